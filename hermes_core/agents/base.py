"""The Agent interface (seed §11 "AIAgent", §9 context injection).

An agent turns (session context, history, new user message) into a reply plus token usage.
`run_turn` runs the backend's `_generate` as its own task so that `interrupt()` can end a running
turn promptly from another task (seed §8: a follow-up interrupts the running turn), whatever the
backend is waiting on (an HTTP request, a tool, a sleep).
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..model.context import SessionContext
from ..model.text import clean_data, clean_optional
from ..model.usage import TokenUsage


class AgentError(Exception):
    """The backend failed to produce a reply (server error, bad response); the message says why."""


class AgentInterrupted(AgentError):
    """The turn was ended by `Agent.interrupt()` before it produced a reply."""


@dataclass(frozen=True, slots=True)
class AgentReply:
    """One turn's result.

    Attributes:
        text: the assistant's reply text (may be empty).
        usage: tokens reported for this turn (seed §2 counters); `usage.input_tokens` is the
            prompt size the backend used (what automatic compression compares to the window).
        reasoning: what a reasoning model returned beside the text, by transcript key
            (`reasoning`, `reasoning_content`, `reasoning_details`, `codex_reasoning_items`);
            kept in the transcript with the reply (docs/behaviour.md §3).

    Text and reasoning are made valid Unicode, as inbound text is (docs/behaviour.md §7): a lone
    surrogate from a backend becomes U+FFFD instead of making the reply impossible to store or
    send.
    """

    text: str
    usage: TokenUsage
    reasoning: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "text", clean_optional(self.text))
        if self.reasoning:
            object.__setattr__(self, "reasoning", clean_data(dict(self.reasoning)))


class Agent(abc.ABC):
    """Base class of agent backends.

    Subclasses implement `_generate`. Callers use `run_turn`, `interrupt` and `aclose`.
    One instance may run turns of several sessions at once; `interrupt(session_key)` ends only
    that session's turn, `interrupt()` ends all of them.
    """

    name: ClassVar[str] = "agent"
    # True for a backend that takes follow-ups into a running turn at its next request boundary
    # (`steer`; `busy_input_mode = "steer"`, docs/behaviour.md §11).
    can_steer: ClassVar[bool] = False

    def __init__(self) -> None:
        # session key (or "" when the context has none) -> running generation task
        self._running: dict[str, asyncio.Task] = {}
        self._interrupted: set[asyncio.Task] = set()
        # Follow-ups handed to a running turn, not taken yet; and how many a turn took.
        self._steers: dict[str, list[str]] = {}
        self._steered: dict[str, int] = {}

    def steer(self, session_key: str, text: str) -> bool:
        """Hand `text` (a follow-up from the user) to the running turn of `session_key`, to be
        read at the backend's next request boundary.

        Returns:
            True when it was handed over (the backend steers and a turn is running); False →
            the caller queues the message as a turn of its own. A handed-over message the turn
            ends without taking is counted out by `take_steered` and queued by the caller.
        """
        task = self._running.get(session_key)
        if not self.can_steer or task is None or task.done():
            return False
        self._steers.setdefault(session_key, []).append(text)
        return True

    def take_steered(self, session_key: str) -> int:
        """How many handed-over follow-ups the last turn of `session_key` took (in order); resets
        the count."""
        return self._steered.pop(session_key, 0)

    def _take_steers(self, slot: str) -> list[str]:
        """For backends: the follow-ups handed over since the last call (at a request boundary)."""
        texts = self._steers.pop(slot, [])
        if texts:
            self._steered[slot] = self._steered.get(slot, 0) + len(texts)
        return texts

    async def run_turn(self, context: SessionContext, history: list[dict[str, Any]], message: str, *,
                       system_context: str = "") -> AgentReply:
        """Run one turn.

        Args:
            context: the SessionContext of the session (seed §9).
            history: earlier transcript messages, oldest first: dicts with `role`
                (`user`/`assistant`/`system`/`tool`) and `content`, optionally `tool_call_id`,
                `tool_name`, `tool_calls`. The new message is not included. This is the agent
                cache's live list (seed §11): read it, never keep or modify it.
            message: the new user message, exactly as the agent should see it (shared sessions
                already carry the `[sender name]` prefix).
            system_context: the `## Current Session Context` prompt section built by the pipeline
                (`pipeline.context.build_session_context_prompt`); may be empty.

        Returns:
            AgentReply with the text and the turn's TokenUsage.

        Raises:
            AgentInterrupted: `interrupt()` was called while the turn ran.
            AgentError: the backend failed.
        """
        return await self._tracked(context, self._generate(context, history, message, system_context))

    async def summarize(self, context: SessionContext, messages: list[dict[str, Any]]) -> AgentReply:
        """Write a summary of `messages` (context compression, docs/behaviour.md §11).

        Args:
            context: the SessionContext of the session.
            messages: the older part of the transcript, oldest first (load_transcript dicts);
                read only.
        Returns:
            AgentReply whose text is the summary (what replaces `messages` in the transcript).
        Raises:
            AgentInterrupted: `interrupt()` was called meanwhile.
            AgentError: the backend failed or cannot summarise (then nothing is changed).
        """
        return await self._tracked(context, self._summarize(context, messages))

    async def _summarize(self, context: SessionContext, messages: list[dict[str, Any]]) -> AgentReply:
        """Backend-specific summary; the default backend cannot summarise."""
        raise AgentError(f"the {self.name} agent cannot summarise a conversation")

    async def _tracked(self, context: SessionContext, work: Any) -> AgentReply:
        """Run `work` (a coroutine) as this session's interruptible task (module docstring)."""
        slot = context.session_key or ""
        task = asyncio.ensure_future(work)
        self._running[slot] = task
        try:
            return await task
        except asyncio.CancelledError:
            # The interrupt alone: the caller's own task was not cancelled too (by a shutdown).
            if task in self._interrupted and not asyncio.current_task().cancelling():
                raise AgentInterrupted("the turn was interrupted") from None
            task.cancel()
            raise
        finally:
            self._interrupted.discard(task)
            if self._running.get(slot) is task:
                del self._running[slot]
                self._steers.pop(slot, None)  # not taken: the caller queues them (take_steered)

    def interrupt(self, session_key: str | None = None) -> bool:
        """End the running turn of `session_key` (or every running turn when None) promptly.

        The interrupted `run_turn` raises AgentInterrupted, unless the task awaiting it was
        cancelled too (a shutdown): that stays a CancelledError, so the shutdown is not lost.
        Returns True when a turn was running.
        """
        tasks = list(self._running.values()) if session_key is None else (
            [self._running[session_key]] if session_key in self._running else [])
        hit = False
        for task in tasks:
            if not task.done():
                self._interrupted.add(task)
                task.cancel()
                hit = True
        return hit

    @property
    def busy(self) -> bool:
        """True while any turn runs on this agent."""
        return any(not t.done() for t in self._running.values())

    async def aclose(self) -> None:
        """Interrupt running turns and release resources (HTTP clients). Idempotent."""
        self.interrupt()

    @abc.abstractmethod
    async def _generate(self, context: SessionContext, history: list[dict[str, Any]], message: str,
                        system_context: str) -> AgentReply:
        """Produce the reply (backend-specific). Cancellation means interruption."""
