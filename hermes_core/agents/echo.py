"""The `echo` agent: the embedded, deterministic, offline default.

Reply rule: `"echo: " + message`.
Usage rule (deterministic, so tests can assert literal counts): a "token" is a run of
non-whitespace characters (`len(text.split())`).
  * input_tokens  = tokens of every history message's content + tokens of the new message
    (the system context is not counted: it is not a conversation turn);
  * output_tokens = tokens of the reply (so `"echo: hi"` is 2);
  * total_tokens  = input + output; cost 0.0 USD, cost_status "exact" (nothing is billed).

Summary rule (context compression, deterministic so tests can pin it):
`"Summary of N earlier message(s). The user wrote: " + " | ".join(user texts)`, each user text on
one line and cut to `SUMMARY_TEXT_CHARS` characters (an ellipsis marks a cut); usage counts the
summarised contents as input and the summary as output.

Counting is O(1) per turn in the history's length: the agent keeps, per session key, the running
input count of the history it last saw. When the new history extends that one (same first and
last counted message objects — the pipeline's live transcript grows by appending, seed §11), only
the new messages are counted; any other history (a reload from the store, a rewrite) is counted
in full. The numbers are the same either way. History messages are treated as immutable.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from ..model.context import SessionContext
from ..model.usage import TokenUsage
from .base import Agent, AgentReply

ECHO_PREFIX = "echo: "
SUMMARY_TEXT_CHARS = 40
# Sessions whose running count is remembered (least recently used forgotten first); a forgotten
# session is simply counted in full once.
MAX_TRACKED_SESSIONS = 1024


def count_tokens(text: Any) -> int:
    """Whitespace token count of `text` (non-strings, e.g. None or tool payloads, count 0)."""
    return len(text.split()) if isinstance(text, str) else 0


@dataclass(slots=True)
class _RunningCount:
    """Tokens of the first `length` history messages; `first`/`last` are those message objects."""

    length: int
    first: Any
    last: Any
    tokens: int


class EchoAgent(Agent):
    """Replies `echo: <message>` and reports whitespace-token usage (module docstring)."""

    name = "echo"

    def __init__(self) -> None:
        super().__init__()
        self._counts: OrderedDict[str, _RunningCount] = OrderedDict()

    def history_tokens(self, slot: str, history: list[dict[str, Any]]) -> int:
        """Tokens of every message content in `history`, counting only what was appended since
        this session's previous turn when `history` extends the one seen then (the same first
        and last messages: compared by value, so a transcript the gateway reloaded from the
        store after an eviction is not counted again from the start)."""
        n = len(history)
        memo = self._counts.get(slot)
        if memo is not None and 0 < memo.length <= n and history[0] == memo.first \
                and history[memo.length - 1] == memo.last:
            tokens = memo.tokens + sum(count_tokens(history[i].get("content")) for i in range(memo.length, n))
        else:
            tokens = sum(count_tokens(m.get("content")) for m in history)
        if n:
            self._counts[slot] = _RunningCount(n, history[0], history[n - 1], tokens)
            self._counts.move_to_end(slot)
            while len(self._counts) > MAX_TRACKED_SESSIONS:
                self._counts.popitem(last=False)
        else:
            self._counts.pop(slot, None)
        return tokens

    async def _generate(self, context: SessionContext, history: list[dict[str, Any]], message: str,
                        system_context: str) -> AgentReply:
        text = ECHO_PREFIX + message
        input_tokens = self.history_tokens(context.session_key or "", history) + count_tokens(message)
        usage = TokenUsage(input_tokens=input_tokens, output_tokens=count_tokens(text),
                           estimated_cost_usd=0.0, cost_status="exact")
        return AgentReply(text=text, usage=usage)

    async def _summarize(self, context: SessionContext, messages: list[dict[str, Any]]) -> AgentReply:
        users = []
        for message in messages:
            if message.get("role") == "user" and isinstance(message.get("content"), str):
                line = " ".join(message["content"].split())
                users.append(line if len(line) <= SUMMARY_TEXT_CHARS else line[:SUMMARY_TEXT_CHARS - 1] + "…")
        text = f"Summary of {len(messages)} earlier message(s). The user wrote: " + " | ".join(users)
        usage = TokenUsage(input_tokens=sum(count_tokens(m.get("content")) for m in messages),
                           output_tokens=count_tokens(text), estimated_cost_usd=0.0, cost_status="exact")
        return AgentReply(text=text, usage=usage)
