"""The adapter contract every platform implements (docs/architecture.md §2 "Adapters are not hooks").

An adapter class is published through the `hermes_core.adapters` entry point (name = platform
id) and carries a class-level `spec: AdapterSpec`. The gateway constructs it with the validated
settings of `[platforms.<name>]`, gives it a private data directory (`data_dir`) and binds its
inbound handler and alias recorder, then calls `start()`; the adapter turns each platform payload
into a `MessageEvent` and awaits `self.emit(event)`. Replies go out through `send()`, one call per
chunk, in order.
"""

from __future__ import annotations

import abc
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable, ClassVar, Iterable

from pydantic import BaseModel

from ..model.events import MessageEvent
from ..model.identity import IdentityAlias
from ..model.source import SessionSource
from ..model.text import neutralize_inline
from ..types import DEFAULT_ERROR_NOTICE, AdapterSpec
from .sending import DEFAULT_RETRY_POLICY, RetryPolicy

log = logging.getLogger(__name__)

InboundHandler = Callable[[MessageEvent], Awaitable[None]]
# Records identity aliases in the gateway's store (SessionStore.record_aliases).
AliasRecorder = Callable[[Iterable[IdentityAlias]], Awaitable[Any]]
# Applies a platform's delivery report to the ledger (GatewayRunner.settle_sent_message, over
# SessionStore.settle_sent_message): (platform, platform message id, "delivered" | "failed",
# error or None) -> the id of the obligation it changed, or None.
DeliveryReporter = Callable[[str, str, str, "str | None"], Awaitable["int | None"]]
# Edits or withdraws a message still queued in the gateway (Runner.edit_queued / withdraw_queued,
# docs/behaviour.md §5): (source, platform message id, new text or None to withdraw) -> whether
# a queued message was changed.
QueuedEditor = Callable[[SessionSource, str, "str | None"], Awaitable[bool]]
# Words what a chat is told when the gateway failed on its message (pipeline.notices, hook
# `hermes_failure_notice`): (source, the error — never shown) -> text.
FailureNotice = Callable[[SessionSource, BaseException], str]


@dataclass(frozen=True, slots=True)
class SendResult:
    """Outcome of one `send`: the platform's id of the message it created (None if unknown)."""

    message_id: str | None = None


class BaseAdapter(abc.ABC):
    """Base class of platform adapters.

    Args:
        settings: the validated `[platforms.<name>]` model (`spec.settings_model`, normally a
            `PlatformSettings` subclass), or None.
        on_message: async callable the adapter awaits for every inbound `MessageEvent`; it
            returns once the message is durably accepted (docs/behaviour.md §0), so an adapter may
            acknowledge the platform after it returns (and must not before).
        data_dir: the adapter's own directory for files (`HERMES_HOME/<platform>/`, created
            mode 0700 by the core before `start()`); None until the core sets it.

    Attributes:
        spec: the class-level AdapterSpec.
        settings: as given.
        data_dir: as given, or set by the core before `start()`.
        bot_username: the bot's own username on its platform (Telegram: from getMe, without the
            `@`), set by the adapter when it learns it (normally in `start()`); None (the default)
            when the platform has none. With it set, `emit` drops a command whose `/cmd@name`
            suffix names another bot (docs/behaviour.md §11).
    """

    spec: ClassVar[AdapterSpec]

    def __init__(self, settings: BaseModel | None = None, *, on_message: InboundHandler | None = None,
                 data_dir: Path | None = None):
        self.settings = settings
        self.data_dir: Path | None = Path(data_dir) if data_dir is not None else None
        self._on_message = on_message
        self._record_aliases: AliasRecorder | None = None
        self._report_delivery: DeliveryReporter | None = None
        self._failure_notice: FailureNotice | None = None
        self._edit_queued: QueuedEditor | None = None
        self.bot_username: str | None = None

    @property
    def capabilities(self) -> frozenset[str]:
        """The capability names of `spec` (`CAP_EDIT` … `CAP_WEBHOOK`)."""
        return frozenset(self.spec.capabilities)

    @property
    def busy_input_mode(self) -> str | None:
        """This platform's busy-input override (`spec.busy_input_mode`), or None for
        `[core] busy_input_mode` (docs/behaviour.md §5). A subclass may decide per run."""
        return self.spec.busy_input_mode

    @property
    def retry_policy(self) -> RetryPolicy:
        """How long the delivery layer waits out this platform's rate limits (`RetryPolicy`:
        the longest single wait and the attempts per chunk; docs/adapters.md §0.4). The default
        (60 s, 4 attempts) unless a plugin's settings say otherwise (Telegram: `max_retry_after`,
        `send_attempts`)."""
        return DEFAULT_RETRY_POLICY

    def bind(self, on_message: InboundHandler, *, record_aliases: AliasRecorder | None = None,
             report_delivery: DeliveryReporter | None = None,
             failure_notice: FailureNotice | None = None,
             edit_queued: QueuedEditor | None = None) -> None:
        """Set (or replace) the inbound handler and, optionally, the alias recorder and the
        delivery reporter (both bound by the gateway to its store), the failure notice
        (bound to the configured wording, `failure_notice`) and the editor of queued messages
        (bound to the runner, `edit_queued` / `withdraw_queued`)."""
        self._on_message = on_message
        if record_aliases is not None:
            self._record_aliases = record_aliases
        if report_delivery is not None:
            self._report_delivery = report_delivery
        if failure_notice is not None:
            self._failure_notice = failure_notice
        if edit_queued is not None:
            self._edit_queued = edit_queued

    def failure_notice(self, source: SessionSource, error: BaseException) -> str:
        """What to tell the chat of `source` when the gateway failed on its message and the
        platform will not deliver it again (the terminal chat): the configured `[core]
        error_notice` or a plugin's wording, never the error itself (docs/behaviour.md §0: users
        never see internal errors or exception names). The caller logs `error`."""
        if self._failure_notice is None:
            return DEFAULT_ERROR_NOTICE
        return self._failure_notice(source, error)

    async def emit(self, event: MessageEvent) -> None:
        """Hand one inbound event to the gateway; returns after it is durably accepted, or at
        once when it is not for this gateway: a command whose `/cmd@name` suffix names another
        bot than `bot_username` (compared case-insensitively, as Telegram usernames are) is that
        bot's (a Telegram group with privacy mode off delivers it to every bot), so it is not
        answered, stored or run, only logged at info (docs/behaviour.md §11). Either way the
        adapter may acknowledge the platform.

        Raises:
            RuntimeError: no inbound handler is bound.
            Exception: the gateway could not persist the event; do not acknowledge the platform
                (the update must be redelivered).
        """
        if self._on_message is None:
            raise RuntimeError(f"{self.spec.name} adapter has no inbound handler bound")
        addressee = self._other_bot(event)
        if addressee is not None:
            log.info("%s message %s in chat %s not handled: its command is addressed to @%s, "
                     "not to this bot (@%s)", self.spec.name, event.message_id,
                     event.source.chat_id, addressee, self.bot_username)
            return
        await self._on_message(event)

    def _other_bot(self, event: MessageEvent) -> str | None:
        """The other bot `event`'s `/cmd@name` suffix names (ready to log), or None when the
        event is for this gateway: no command, no suffix, a suffix naming `bot_username` in any
        case, or no `bot_username` at all (docs/behaviour.md §11). The one place the comparison
        is made, for a new message (`emit`) and an edited queued one (`edit_queued`) alike."""
        if not self.bot_username:
            return None
        addressee = event.command_addressee()
        if addressee is None or addressee.lower() == self.bot_username.lower():
            return None
        # a peer's text: one inert line, at most Telegram's 32 characters and some
        return neutralize_inline(addressee, 64)

    async def edit_queued(self, source: SessionSource, message_id: str, text: str | None) -> bool:
        """Apply an edit (`text`) or a deletion (`text=None`) of a message the platform reports
        to the gateway's queue (docs/behaviour.md §5 "Edits and deletions"): a message still
        queued gets the new text in place (an emptied one is withdrawn), a deleted one is
        withdrawn. An edit into a command addressed to another bot (`/undo@other_bot`, as `emit`
        decides it, docs/behaviour.md §11) is that bot's now: the queued message is withdrawn,
        not re-read as a command of this gateway when its turn comes.

        Args:
            source: the SessionSource of the edited or deleted message (routes it to its session).
            message_id: the platform id the message was emitted with (`MessageEvent.message_id`).
            text: the new full text, or None for a deletion.

        Returns:
            True when a queued message was changed; False when it is not queued (running,
            answered, unknown) or no gateway is bound: the adapter then applies its
            `edits_as_turns` policy.
        """
        if self._edit_queued is None:
            return False
        addressee = None if text is None else self._other_bot(
            MessageEvent(source=source, text=text, message_id=message_id))
        if addressee is None:
            return await self._edit_queued(source, message_id, text)
        # Not queued (False): the adapter's edits_as_turns policy may emit the edit, and `emit`
        # drops it for the same reason.
        withdrawn = await self._edit_queued(source, message_id, None)
        if withdrawn:
            log.info("%s message %s in chat %s edited into a command addressed to @%s, not to this "
                     "bot (@%s): withdrawn from the queue", self.spec.name, message_id,
                     source.chat_id, addressee, self.bot_username)
        return withdrawn

    async def record_alias(self, alias_id: str, canonical_id: str, *, source: str) -> None:
        """Record that `alias_id` is another id of `canonical_id` on this platform, learned out of
        band (a chat migration, a bridge's mapping file); docs/behaviour.md §4. Aliases learned
        from one payload go on `MessageEvent.aliases` instead.

        Args:
            alias_id / canonical_id: raw platform ids (str); the plugin decides which is canonical.
            source: what taught it (free text for audits, e.g. `"migrate_to_chat_id"`).

        Raises:
            AliasError (a ValueError): an id is empty or both are equal.
            RuntimeError: no alias recorder is bound (the adapter runs outside a gateway).
        """
        alias = IdentityAlias(self.spec.name, alias_id, canonical_id, source)
        if self._record_aliases is None:
            raise RuntimeError(f"{self.spec.name} adapter has no alias recorder bound")
        await self._record_aliases([alias])

    async def report_delivery(self, message_id: str, status: str, error: str | None = None) -> int | None:
        """Tell the delivery ledger what the platform later reported about a message the gateway
        sent (a WhatsApp status callback); docs/behaviour.md §6 "Delivery reports".

        Args:
            message_id: the platform's id of the sent message, as this adapter's `send` returned
                it in `SendResult.message_id`.
            status: `"delivered"` (delivered or read) or `"failed"`. Progress reports such as
                "sent" are not delivery reports: do not pass them.
            error: for `"failed"`, a short reason for the operator (no secrets, no message text).

        Returns:
            The id of the obligation settled, or None (no obligation sent that message within the
            last day, or nothing changed: a confirmation never overrides a failure).

        Raises:
            ValueError: `status` is neither "delivered" nor "failed".
            RuntimeError: no delivery reporter is bound (the adapter runs outside a gateway).
            sqlite3.Error / OSError: the ledger could not be written (the platform may retry).
        """
        if self._report_delivery is None:
            raise RuntimeError(f"{self.spec.name} adapter has no delivery reporter bound")
        return await self._report_delivery(self.spec.name, message_id, status, error)

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

    async def send_typing(self, target: SessionSource) -> None:
        """Show "typing…" in `target`'s chat (capability `"typing"`). The core calls it while a
        turn runs, about every 4 seconds. Default: nothing. Errors are logged by the caller."""
        return None

    async def health(self) -> dict[str, Any]:
        """Return `{"ok": bool, ...details}`; default: ok."""
        return {"ok": True}

    async def check_online(self) -> str | None:
        """`hermes-gateway doctor --online` (docs/operations.md §1): reach the platform with the
        configured credentials, without starting to receive or send anything.

        Returns:
            One line saying who the credentials are (`"bot @hermes_bot"`), or None when this
            platform has no online check (the default).
        Raises:
            any exception whose message is one line naming what failed, never a secret.
        """
        return None
