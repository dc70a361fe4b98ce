"""The `openai` agent: any OpenAI-compatible chat-completions server through the official
`openai` client (settings `[agent.openai]`).

Request: `messages = [system] + history + [user message]`, where the system message is
`[agent.openai] system_prompt`, a blank line, then the session-context prompt (seed §9).
Usage mapping onto the entry's counters (seed §2):
  prompt_tokens → input_tokens, completion_tokens → output_tokens, total_tokens → total_tokens,
  prompt_tokens_details.cached_tokens → cache_read_tokens. The API reports no cache writes and no
  cost, so cache_write_tokens = 0 and cost_status = "unknown".
Interruption cancels the in-flight HTTP request (the base class cancels the task).
"""

from __future__ import annotations

from typing import Any

import openai
from openai import AsyncOpenAI

from ..model.context import SessionContext
from ..model.usage import TokenUsage
from .base import Agent, AgentError, AgentReply

# Message keys the chat-completions API accepts from a stored transcript row.
_PASS_THROUGH = ("tool_call_id", "tool_calls", "name")
_ROLES = frozenset({"system", "user", "assistant", "tool"})


def build_messages(system_prompt: str, system_context: str, history: list[dict[str, Any]],
                   message: str) -> list[dict[str, Any]]:
    """The chat-completions `messages` array for one turn.

    Transcript rows with an unknown role or no content (and no tool calls) are skipped; the
    store's extra fields (`timestamp`, `platform_message_id`, `tool_name`) are not sent.
    """
    system = "\n\n".join(part for part in (system_prompt.strip(), system_context.strip()) if part)
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for row in history:
        role = row.get("role")
        if role not in _ROLES or (row.get("content") is None and not row.get("tool_calls")):
            continue
        out = {"role": role, "content": row.get("content")}
        out.update({k: row[k] for k in _PASS_THROUGH if row.get(k)})
        messages.append(out)
    messages.append({"role": "user", "content": message})
    return messages


def usage_from_completion(usage: Any) -> TokenUsage:
    """Map an `openai.types.CompletionUsage` (or None) onto a TokenUsage (module docstring)."""
    if usage is None:
        return TokenUsage()
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) or 0
    return TokenUsage(input_tokens=usage.prompt_tokens or 0, output_tokens=usage.completion_tokens or 0,
                      cache_read_tokens=cached, total_tokens=usage.total_tokens or 0,
                      cost_status="unknown")


class OpenAIAgent(Agent):
    """Chat-completions agent.

    Args:
        settings: `OpenAIAgentSettings` (`base_url`, `model`, `api_key` SecretStr,
            `request_timeout_s` seconds, `max_retries`, `system_prompt`).
        client: an AsyncOpenAI to use instead of building one (tests, shared pools).
    """

    name = "openai"

    def __init__(self, settings: Any, *, client: AsyncOpenAI | None = None) -> None:
        super().__init__()
        self.settings = settings
        self._client = client or AsyncOpenAI(
            base_url=settings.base_url, api_key=settings.api_key.get_secret_value(),
            timeout=settings.request_timeout_s, max_retries=settings.max_retries)

    async def _generate(self, context: SessionContext, history: list[dict[str, Any]], message: str,
                        system_context: str) -> AgentReply:
        messages = build_messages(self.settings.system_prompt, system_context, history, message)
        try:
            completion = await self._client.chat.completions.create(
                model=self.settings.model, messages=messages)
        except openai.APIError as exc:
            raise AgentError(f"chat-completions request to {self.settings.base_url} failed: "
                             f"{type(exc).__name__}: {exc}") from exc
        if not completion.choices:
            raise AgentError(f"chat-completions server at {self.settings.base_url} returned no choices")
        text = completion.choices[0].message.content or ""
        return AgentReply(text=text, usage=usage_from_completion(completion.usage))

    async def aclose(self) -> None:
        """Interrupt running turns and close the HTTP client."""
        await super().aclose()
        await self._client.close()
