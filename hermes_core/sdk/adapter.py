"""The adapter contract every platform implements (docs/architecture.md §2 "Adapters are not hooks").

An adapter class is published through the `hermes_core.adapters` entry point (name = platform
id) and carries a class-level `spec: AdapterSpec`. The gateway constructs it with the validated
settings of `[platforms.<name>]` and an inbound handler, then calls `start()`; the adapter turns
each platform payload into a `MessageEvent` and awaits `self.emit(event)`. Replies go out through
`send()`, one call per chunk, in order.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, ClassVar

from pydantic import BaseModel

from ..model.events import MessageEvent
from ..model.source import SessionSource
from ..types import AdapterSpec

InboundHandler = Callable[[MessageEvent], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class SendResult:
    """Outcome of one `send`: the platform's id of the message it created (None if unknown)."""

    message_id: str | None = None


class BaseAdapter(abc.ABC):
    """Base class of platform adapters.

    Args:
        settings: the validated `[platforms.<name>]` model (`spec.settings_model`), or None.
        on_message: async callable the adapter awaits for every inbound `MessageEvent`; it
            returns once the message is durably accepted (docs/behaviour.md §0), so an adapter may
            acknowledge the platform after it returns.
    """

    spec: ClassVar[AdapterSpec]

    def __init__(self, settings: BaseModel | None = None, *, on_message: InboundHandler | None = None):
        self.settings = settings
        self._on_message = on_message

    def bind(self, on_message: InboundHandler) -> None:
        """Set (or replace) the inbound handler."""
        self._on_message = on_message

    async def emit(self, event: MessageEvent) -> None:
        """Hand one inbound event to the gateway; returns after it is durably accepted.

        Raises:
            RuntimeError: no inbound handler is bound.
        """
        if self._on_message is None:
            raise RuntimeError(f"{self.spec.name} adapter has no inbound handler bound")
        await self._on_message(event)

    @abc.abstractmethod
    async def start(self) -> None:
        """Connect and begin receiving. Idempotent: a second call does nothing."""

    @abc.abstractmethod
    async def stop(self) -> None:
        """Stop receiving and disconnect. Idempotent; must not lose pending platform updates."""

    @abc.abstractmethod
    async def send(self, target: SessionSource, text: str, *, reply_to: str | None = None,
                   metadata: dict[str, Any] | None = None) -> SendResult:
        """Send one chunk of text (already within `spec.max_message_length`) to `target`
        (raw ids: chat, thread). `reply_to` is the platform message id to reply to.

        Raises:
            hermes_core.sdk.errors.RetryAfter: the platform asked to wait (seconds given).
            Exception: any other failure; the delivery layer records and retries it.
        """

    async def health(self) -> dict[str, Any]:
        """Return `{"ok": bool, ...details}`; default: ok."""
        return {"ok": True}
