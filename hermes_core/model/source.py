"""SessionSource: where a message came from (seed §1, docs/behaviour.md §1)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from .text import clean_optional


class Platform:
    """Well-known platform names. Platforms are an open set (docs/behaviour.md §0): any non-empty string
    is a valid platform, so plugins add platforms without touching the core."""

    LOCAL = "local"
    TELEGRAM = "telegram"
    DISCORD = "discord"
    SLACK = "slack"
    WHATSAPP = "whatsapp"
    WHATSAPP_CLOUD = "whatsapp_cloud"
    SIGNAL = "signal"
    MATRIX = "matrix"

    WELL_KNOWN = frozenset(
        {LOCAL, TELEGRAM, DISCORD, SLACK, WHATSAPP, WHATSAPP_CLOUD, SIGNAL, MATRIX}
    )


CHAT_TYPES = ("dm", "group", "channel", "thread")

# Serialised always, in this order, after `platform` (docs/behaviour.md §1).
_ALWAYS = ("chat_id", "chat_name", "chat_type", "user_id", "user_name", "thread_id", "chat_topic")
# Serialised only when truthy.
_OPTIONAL = ("user_id_alt", "chat_id_alt", "guild_id", "parent_chat_id", "message_id")
# Never serialised: a peer must not be able to forge them (docs/behaviour.md §1).
_NEVER = ("is_bot", "role_authorized")


class SourceError(ValueError):
    """A SessionSource could not be built from a dict; the message names the field."""


def _opt_str(value: Any) -> str | None:
    if value is None or value == "":
        return None
    return str(value)


@dataclass(frozen=True, slots=True)
class SessionSource:
    """Immutable description of where a message came from (seed §1).

    All ids are strings (`chat_id=12345` is stored as `"12345"`). `platform` is a free-form name
    (see `Platform`). `chat_type` is one of `dm`, `group`, `channel`, `thread`.
    """

    platform: str
    chat_id: str
    chat_name: str | None = None
    chat_type: str = "dm"
    user_id: str | None = None
    user_name: str | None = None
    thread_id: str | None = None
    chat_topic: str | None = None
    user_id_alt: str | None = None
    chat_id_alt: str | None = None
    is_bot: bool = False
    guild_id: str | None = None
    parent_chat_id: str | None = None
    message_id: str | None = None
    role_authorized: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.platform, str) or not self.platform:
            raise SourceError("SessionSource.platform must be a non-empty string")
        # The name is kept verbatim (docs/behaviour.md §1: an unknown platform name is "kept as a
        # string"); folding case here would silently re-key a plugin's sessions.
        object.__setattr__(self, "chat_id", "" if self.chat_id is None else clean_optional(str(self.chat_id)))
        for name in ("user_id", "thread_id", "user_id_alt", "chat_id_alt", "guild_id",
                     "parent_chat_id", "message_id"):
            object.__setattr__(self, name, clean_optional(_opt_str(getattr(self, name))))
        # Names and topics come from peers: a lone surrogate must not make the source
        # impossible to store (docs/behaviour.md §7).
        for name in ("chat_name", "user_name", "chat_topic"):
            object.__setattr__(self, name, clean_optional(getattr(self, name)))
        if self.chat_type not in CHAT_TYPES:
            raise SourceError(
                f"SessionSource.chat_type must be one of {', '.join(CHAT_TYPES)}; got {self.chat_type!r}"
            )

    @property
    def participant_id(self) -> str | None:
        """`user_id_alt or user_id` (seed §4): the stable per-user id used for isolation."""
        return self.user_id_alt or self.user_id

    @property
    def description(self) -> str:
        """Human-readable summary (docs/behaviour.md §1), e.g. `DM with Alice`, `group: Dev, thread: 7`."""
        if self.platform == Platform.LOCAL:
            text = "CLI terminal"
        elif self.chat_type == "dm":
            text = f"DM with {self.user_name or self.user_id or 'user'}"
        elif self.chat_type == "group":
            text = f"group: {self.chat_name or self.chat_id}"
        elif self.chat_type == "channel":
            text = f"channel: {self.chat_name or self.chat_id}"
        else:
            text = f"{self.chat_name or self.chat_id}"
        if self.thread_id:
            text += f", thread: {self.thread_id}"
        return text

    def to_dict(self) -> dict[str, Any]:
        """Serialise for sessions.json / the store: `platform`, then the always-present fields,
        then truthy optional fields; `is_bot` and `role_authorized` are never written."""
        out: dict[str, Any] = {"platform": self.platform}
        for name in _ALWAYS:
            out[name] = getattr(self, name)
        for name in _OPTIONAL:
            value = getattr(self, name)
            if value:
                out[name] = value
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "SessionSource":
        """Rebuild a source written by `to_dict` (or by an older gateway).

        Missing optionals become None; an int `chat_id` becomes a string; unknown keys and the
        forgeable `is_bot` / `role_authorized` are ignored.

        Raises:
            SourceError: `data` is not a mapping, or `platform` / `chat_id` is missing
                (the message names the field).
        """
        if not isinstance(data, Mapping):
            raise SourceError(f"SessionSource must be a JSON object, got {type(data).__name__}")
        if not data.get("platform"):
            raise SourceError("SessionSource field 'platform' is missing")
        if data.get("chat_id") is None:
            # "" is allowed: a DM known only by its participant has no chat id (seed §4).
            raise SourceError("SessionSource field 'chat_id' is missing")
        known = {f.name for f in fields(cls)} - set(_NEVER)
        kwargs = {k: data[k] for k in known if k in data}
        kwargs.setdefault("chat_type", "dm")
        if kwargs["chat_type"] in (None, ""):
            kwargs["chat_type"] = "dm"
        return cls(**kwargs)
