"""The core's data model (seed §1, §2, §9): sources, entries, events, contexts and ids."""

from .context import HomeChannel, SessionContext, neutralize_untrusted
from .entry import SessionEntry
from .events import INTERNAL, USER, MessageEvent
from .identity import AliasError, IdentityAlias
from .ids import new_session_id, validate_session_id
from .source import CHAT_TYPES, Platform, SessionSource, SourceError
from .timeutil import format_timestamp, parse_timestamp, utc_now
from .usage import TokenUsage

__all__ = [
    "AliasError", "CHAT_TYPES", "INTERNAL", "HomeChannel", "IdentityAlias", "USER", "MessageEvent", "Platform",
    "SessionContext", "SessionEntry",
    "SessionSource", "SourceError", "TokenUsage", "format_timestamp", "neutralize_untrusted", "new_session_id",
    "parse_timestamp", "utc_now", "validate_session_id",
]
