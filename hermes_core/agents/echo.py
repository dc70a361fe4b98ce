"""The `echo` agent: the embedded, deterministic, offline default (issue 2 item 7).

Reply rule: `"echo: " + message`.
Usage rule (deterministic, so tests can assert literal counts): a "token" is a run of
non-whitespace characters (`len(text.split())`).
  * input_tokens  = tokens of every history message's content + tokens of the new message
    (the system context is not counted: it is not a conversation turn);
  * output_tokens = tokens of the reply (so `"echo: hi"` is 2);
  * total_tokens  = input + output; cost 0.0 USD, cost_status "exact" (nothing is billed).
"""

from __future__ import annotations

from typing import Any

from ..model.context import SessionContext
from ..model.usage import TokenUsage
from .base import Agent, AgentReply

ECHO_PREFIX = "echo: "


def count_tokens(text: Any) -> int:
    """Whitespace token count of `text` (non-strings, e.g. None or tool payloads, count 0)."""
    return len(text.split()) if isinstance(text, str) else 0


class EchoAgent(Agent):
    """Replies `echo: <message>` and reports whitespace-token usage (module docstring)."""

    name = "echo"

    async def _generate(self, context: SessionContext, history: list[dict[str, Any]], message: str,
                        system_context: str) -> AgentReply:
        text = ECHO_PREFIX + message
        input_tokens = sum(count_tokens(m.get("content")) for m in history) + count_tokens(message)
        usage = TokenUsage(input_tokens=input_tokens, output_tokens=count_tokens(text),
                           estimated_cost_usd=0.0, cost_status="exact")
        return AgentReply(text=text, usage=usage)
