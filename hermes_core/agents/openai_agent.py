"""The `openai` agent: any OpenAI-compatible chat-completions server through the official
`openai` client (settings `[agent.openai]`).

Request: `messages = [system] + history + [user message]`, where the system message is
`[agent.openai] system_prompt`, a blank line, then the session-context prompt (seed §9).
Usage mapping onto the entry's counters (seed §2):
  prompt_tokens → input_tokens, completion_tokens → output_tokens, total_tokens → total_tokens,
  prompt_tokens_details.cached_tokens → cache_read_tokens. The API reports no cache writes and no
  cost, so cache_write_tokens = 0 and cost_status = "unknown".
Interruption cancels the in-flight HTTP request (the base class cancels the task).
Steering (`busy_input_mode = "steer"`): follow-ups handed over while a request runs are appended
after its reply at the request boundary and the model is asked again; usage adds up.

Reasoning models: the fields such servers add to the reply message (`reasoning`,
`reasoning_content`, `reasoning_details`, `codex_reasoning_items`) are returned in
`AgentReply.reasoning` and kept in the transcript beside the text; they are not sent back.
`reasoning` or `reasoning_content` that is not text is dropped with a warning (`reasoning_fields`).
Summaries (context compression): one request with `SUMMARY_PROMPT` as the system message, the
older messages as history and `SUMMARY_REQUEST` as the user message.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import openai
from openai import AsyncOpenAI

from ..model.context import SessionContext
from ..model.message import REASONING_KEYS
from ..model.usage import TokenUsage
from ..sdk.errors import describe_failure
from .base import Agent, AgentError, AgentReply

log = logging.getLogger(__name__)

# Message keys the chat-completions API accepts from a stored transcript row.
_PASS_THROUGH = ("tool_call_id", "tool_calls", "name")
_ROLES = frozenset({"system", "user", "assistant", "tool"})
# The reasoning fields that hold the model's reasoning as text; `reasoning_details` and
# `codex_reasoning_items` are structured (lists of objects) and are kept as any JSON value.
TEXT_REASONING_FIELDS = frozenset({"reasoning", "reasoning_content"})
SUMMARY_PROMPT = ("You compress conversations. Summarise the conversation you are given so that it "
                  "can replace it: keep facts, decisions, names, numbers and open questions; be brief.")
SUMMARY_REQUEST = "Write the summary of the conversation above now, in the language it was held in."


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


def reasoning_fields(message: Any, server: str) -> dict[str, Any]:
    """The reasoning fields a server added to a reply message (`REASONING_KEYS` that are set;
    the client keeps unknown fields as extra attributes).

    A field of `TEXT_REASONING_FIELDS` that is not text (a number, an object) is dropped with
    a warning naming `server` (the base URL, for the log only) and the field, never its value;
    the structured fields are kept as the JSON they are (docs/configuration.md `[agent.openai]`).
    """
    extra = getattr(message, "model_extra", None) or {}
    found = {}
    for name in REASONING_KEYS:
        value = extra.get(name, getattr(message, name, None))
        if value is None:
            continue
        # Dropped, not an AgentError as a malformed completion is: the reply's text and usage
        # are valid and are what the chat is owed, while the reasoning is only stored beside the
        # reply (never sent, never shown); refusing the answer for it would give the chat
        # `agent_failure_notice` instead of a good reply (docs/behaviour.md §0).
        if name in TEXT_REASONING_FIELDS and not isinstance(value, str):
            log.warning("chat-completions server at %s sent the reply's reasoning field '%s' as %s, not text; "
                        "the field is dropped, the reply kept", server, name, type(value).__name__)
            continue
        found[name] = value
    return found


class OpenAIAgent(Agent):
    """Chat-completions agent.

    Args:
        settings: `OpenAIAgentSettings` (`base_url`, `model`, `api_key` SecretStr,
            `request_timeout_s` seconds, `max_retries`, `system_prompt`).
        client: an AsyncOpenAI to use instead of building one (tests, shared pools).
    """

    name = "openai"
    can_steer = True

    def __init__(self, settings: Any, *, client: AsyncOpenAI | None = None) -> None:
        super().__init__()
        self.settings = settings
        self._client = client or AsyncOpenAI(
            base_url=settings.base_url, api_key=settings.api_key.get_secret_value(),
            timeout=settings.request_timeout_s, max_retries=settings.max_retries)

    async def _generate(self, context: SessionContext, history: list[dict[str, Any]], message: str,
                        system_context: str) -> AgentReply:
        messages = build_messages(self.settings.system_prompt, system_context, history, message)
        slot = context.session_key or ""
        reply = await self._complete(messages)
        usage = reply.usage
        # Steering: follow-ups handed over during a request join the conversation at this
        # boundary, and the model answers again with them in view.
        while steers := self._take_steers(slot):
            messages += [{"role": "assistant", "content": reply.text}] + [{"role": "user", "content": t}
                                                                           for t in steers]
            reply = await self._complete(messages)
            usage = usage + reply.usage
        return AgentReply(text=reply.text, usage=usage, reasoning=reply.reasoning)

    async def _summarize(self, context: SessionContext, messages: list[dict[str, Any]]) -> AgentReply:
        return await self._complete(build_messages(SUMMARY_PROMPT, "", messages, SUMMARY_REQUEST))

    async def _complete(self, messages: list[dict[str, Any]]) -> AgentReply:
        """One chat-completions request → AgentReply (text, usage, reasoning fields)."""
        try:
            completion = await self._client.chat.completions.create(
                model=self.settings.model, messages=messages)
        except openai.APIError as exc:
            raise AgentError(self._request_failure(exc)) from exc
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            # A 200 declared as JSON whose body does not parse (a proxy that cut it short): the
            # client's json decoding raises. A failure of the backend, so the chat gets
            # `agent_failure_notice` and the log one line (docs/behaviour.md §0).
            raise self._not_a_completion("not valid JSON") from exc
        # A 200 whose body is not a chat completion (an HTML page, plain text): the client hands
        # back the raw body instead of raising.
        if not hasattr(completion, "choices"):
            raise self._not_a_completion(
                "text, not JSON" if isinstance(completion, (str, bytes)) else "not the completion's fields")
        # The client does not validate the body's shape: a field of another type reaches here as
        # it was parsed, and would fail later in the gateway instead.
        if not isinstance(completion.choices, (list, type(None))):
            raise self._not_a_completion(f"its choices are {type(completion.choices).__name__}, not a list")
        if completion.usage is not None and not hasattr(completion.usage, "prompt_tokens"):
            raise self._not_a_completion(f"its usage is {type(completion.usage).__name__}, not the usage's fields")
        if not completion.choices:
            raise AgentError(f"chat-completions server at {self.settings.base_url} returned no choices")
        reply = getattr(completion.choices[0], "message", None)
        if not hasattr(reply, "content"):
            raise self._not_a_completion("its choice has no message")
        if not isinstance(reply.content, (str, type(None))):
            raise self._not_a_completion(f"its message content is {type(reply.content).__name__}, not text")
        return AgentReply(text=reply.content or "", usage=usage_from_completion(completion.usage),
                          reasoning=reasoning_fields(reply, self.settings.base_url))

    def _not_a_completion(self, what: str) -> AgentError:
        """The AgentError for a 200 whose body is not a usable chat completion; `what` says how."""
        return AgentError(f"chat-completions server at {self.settings.base_url} answered with something "
                          f"that is not a chat completion ({what})")

    def _request_failure(self, exc: openai.APIError) -> str:
        """What went wrong with one request, in words for the operator's log line (the server's
        own error message included; docs/behaviour.md §0 keeps it from the chat)."""
        url = self.settings.base_url
        if isinstance(exc, openai.APITimeoutError):
            return f"chat-completions server at {url} gave no answer within {self.settings.request_timeout_s:g} s"
        if isinstance(exc, openai.APIConnectionError):
            return f"cannot reach the chat-completions server at {url}: {describe_failure(exc)}"
        if isinstance(exc, openai.APIStatusError):
            body = exc.body if isinstance(exc.body, dict) else {}
            said = " ".join(str(body.get("message") or exc.response.reason_phrase or "").split())
            return f"chat-completions server at {url} answered HTTP {exc.status_code}" + (f": {said}" if said else "")
        return f"chat-completions request to {url} failed: {describe_failure(exc)}"

    async def aclose(self) -> None:
        """Interrupt running turns and close the HTTP client."""
        await super().aclose()
        await self._client.close()
