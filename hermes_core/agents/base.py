"""The Agent interface (seed §11 "AIAgent", §9 context injection).

An agent turns (session context, history, new user message) into a reply plus token usage.
`run_turn` runs the backend's `_generate` as its own task so that `interrupt()` can end a running
turn promptly from another task (seed §8: a follow-up interrupts the running turn), whatever the
backend is waiting on (an HTTP request, a tool, a sleep).
"""

from __future__ import annotations

import abc
import asyncio
from dataclasses import dataclass
from typing import Any, ClassVar

from ..model.context import SessionContext
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
        usage: tokens reported for this turn (seed §2 counters).
    """

    text: str
    usage: TokenUsage


class Agent(abc.ABC):
    """Base class of agent backends.

    Subclasses implement `_generate`. Callers use `run_turn`, `interrupt` and `aclose`.
    One instance may run turns of several sessions at once; `interrupt(session_key)` ends only
    that session's turn, `interrupt()` ends all of them.
    """

    name: ClassVar[str] = "agent"

    def __init__(self) -> None:
        # session key (or "" when the context has none) -> running generation task
        self._running: dict[str, asyncio.Task] = {}
        self._interrupted: set[asyncio.Task] = set()

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
        slot = context.session_key or ""
        task = asyncio.ensure_future(self._generate(context, history, message, system_context))
        self._running[slot] = task
        try:
            return await task
        except asyncio.CancelledError:
            if task in self._interrupted:
                raise AgentInterrupted("the turn was interrupted") from None
            task.cancel()
            raise
        finally:
            self._interrupted.discard(task)
            if self._running.get(slot) is task:
                del self._running[slot]

    def interrupt(self, session_key: str | None = None) -> bool:
        """End the running turn of `session_key` (or every running turn when None) promptly.

        The interrupted `run_turn` raises AgentInterrupted. Returns True when a turn was running.
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
