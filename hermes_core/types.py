"""Typed records exchanged through hooks (docs/architecture.md §2; conda's `types.py`).

Hooks return these records instead of performing side effects, so the core decides when and
how to act on them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Literal

from pydantic import BaseModel

from .keys import Canonicalizer

Capability = Literal["edit", "threads", "typing", "media", "reactions", "webhook"]

# Capability names an adapter lists in `AdapterSpec.capabilities` (docs/architecture.md §8).
CAP_EDIT = "edit"            # can edit a message it sent
CAP_THREADS = "threads"      # threads / topics are addressable (SessionSource.thread_id)
CAP_TYPING = "typing"        # implements `send_typing(target)`; the core refreshes it while a turn runs
CAP_MEDIA = "media"          # receives (and may send) attachments
CAP_REACTIONS = "reactions"  # can react to a message
CAP_WEBHOOK = "webhook"      # can receive through an HTTP webhook
CAPABILITIES = frozenset({CAP_EDIT, CAP_THREADS, CAP_TYPING, CAP_MEDIA, CAP_REACTIONS, CAP_WEBHOOK})

# `[core] error_notice`'s default: what a chat is told when the gateway itself failed on its
# message (never the error: docs/behaviour.md §0), also an unbound adapter's failure notice.
DEFAULT_ERROR_NOTICE = "Sorry, this message could not be processed. Please try again later."

# `AdapterSpec.ingress`: may several gateway replicas receive for one bot account at once?
INGRESS_SINGLE_RECEIVER = "single_receiver"  # long polling, one socket per bot: only one replica receives
INGRESS_SHARED = "shared"                    # webhooks, Slack Socket Mode: any replica may receive


@dataclass(frozen=True, slots=True)
class KeyPolicy:
    """Inputs of the key and shared-session hooks besides the source (seed §5 settings).

    Attributes:
        group_sessions_per_user: isolate group/channel chats per user.
        thread_sessions_per_user: isolate threads per user.
        canonicalize: `(platform, kind, value) -> str`, normally the `hermes_canonical_identity`
            hook chain, so plugin alias stores apply to keys.
    """

    group_sessions_per_user: bool = True
    thread_sessions_per_user: bool = False
    canonicalize: Canonicalizer | None = None


@dataclass(frozen=True, slots=True)
class AdapterSpec:
    """What a platform adapter declares about itself (docs/architecture.md §2).

    Attributes:
        name: platform id (`"telegram"`), equal to the adapter entry-point name.
        label: human name (`"Telegram"`).
        pii_safe: True when ids may be pseudonymised in the LLM context (seed §9). Discord: False.
        max_message_length: longest text one send may carry, in `length_unit`s.
        length_unit: `"chars"`, `"utf16"` (Telegram) or `"bytes"` (Signal, UTF-8).
        capabilities: subset of edit / threads / typing / media / reactions / webhook.
        settings_model: pydantic model of the `[platforms.<name>]` table, or None.
        required_env: env vars the adapter needs to connect (documentation only).
        install_hint: how to install the plugin (`pip install hermes-gateway-telegram`).
        ingress: `"single_receiver"` (default: only one process may receive for one bot, e.g.
            Telegram long polling) or `"shared"` (several replicas may receive: webhooks, Slack
            Socket Mode); docs/adapters.md §6.
        busy_input_mode: this platform's override of `[core] busy_input_mode` (`"interrupt"`,
            `"queue"`, `"steer"` or `"sequential"`), or None to follow the core setting
            (docs/behaviour.md §5).
        help_lines: lines `/help` adds for the commands the adapter itself handles before the
            gateway sees them (`"/quit — …"` on the local terminal), as `<usage> — <what it
            does>`; docs/behaviour.md §11.
    """

    name: str
    label: str
    pii_safe: bool = False
    max_message_length: int = 4000
    length_unit: Literal["chars", "utf16", "bytes"] = "chars"
    capabilities: frozenset[str] = frozenset()
    settings_model: type[BaseModel] | None = None
    required_env: tuple[str, ...] = ()
    install_hint: str = ""
    ingress: Literal["single_receiver", "shared"] = INGRESS_SINGLE_RECEIVER
    busy_input_mode: Literal["interrupt", "queue", "steer", "sequential"] | None = None
    help_lines: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SettingsSpec:
    """A settings table owned by a plugin: `[platforms.<section>]` or `[plugins.<section>]`."""

    section: str
    model: type[BaseModel]
    table: Literal["platforms", "plugins"] = "platforms"


@dataclass(frozen=True, slots=True)
class RedactionRule:
    """A text rewrite applied in the given scopes (seed §9). The core applies the union of rules."""

    name: str
    scopes: frozenset[str]  # subset of {"log", "llm_context", "store", "index"}
    apply: Callable[[str], str]


@dataclass(slots=True)
class DeliveryPlan:
    """How one reply is sent: the chunks in order and where they go.

    Attributes:
        chunks: texts to send in order, each within the adapter's limit.
        reply_to_message_id: platform message id the first chunk replies to, or None.
        veto: when True nothing is sent (a deployment may veto), `reason` says why.
        metadata: free-form adapter hints (parse mode, thread override, …).
    """

    chunks: list[str]
    reply_to_message_id: str | None = None
    veto: bool = False
    reason: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RecoveryPlan:
    """What to do with a session whose turn failed or was interrupted (seed §7)."""

    action: Literal["retry", "backoff", "reset", "give_up", "resume"]
    delay_seconds: float = 0.0
    reason: str = ""


@dataclass(frozen=True, slots=True)
class OutboundDelivery:
    """One reply (or notice) the gateway owes a chat: the input of `hermes_plan_delivery`.

    Attributes:
        session_key / session_id: the session the text belongs to.
        target: the chat to send to (raw ids; the stored origin, never a parsed key).
        text: the full text, before chunking.
        spec: the target adapter's AdapterSpec (limit and unit for chunking).
        reply_to_message_id: platform id of the triggering message, or None.
        kind: `"reply"`, `"notice"` (command answers, errors) or `"recovered"` (seed §7 re-send).
    """

    session_key: str
    session_id: str | None
    target: Any
    text: str
    spec: AdapterSpec
    reply_to_message_id: str | None = None
    kind: Literal["reply", "notice", "recovered"] = "reply"


@dataclass(frozen=True, slots=True)
class DeliveryOutcome:
    """Result of performing a DeliveryPlan: platform ids of the sent chunks, or the error."""

    delivered: bool
    message_ids: tuple[str | None, ...] = ()
    error: str | None = None
