"""IdentityAlias: one person or chat seen under several ids on one platform (docs/behaviour.md §4).

Examples: a Telegram group migrated to a supergroup (old chat id → new chat id), WhatsApp LID ↔
phone number, Signal number ↔ UUID, WhatsApp Cloud phone ↔ business-scoped user id. The platform
plugin decides which id is canonical; the core stores the mapping (`identity_aliases` table) and
folds every alias into its canonical id before it builds a session key, a pseudonym or an owner
scope. Delivery always keeps the raw ids.
"""

from __future__ import annotations

from dataclasses import dataclass


class AliasError(ValueError):
    """An IdentityAlias is malformed; the message names the field."""


@dataclass(frozen=True, slots=True)
class IdentityAlias:
    """`alias_id` is another id of the same person or chat as `canonical_id` on `platform`.

    Attributes:
        platform: platform id (`"telegram"`), the same string as `SessionSource.platform`.
        alias_id: the id that should be folded (raw platform id, as it appears in sources).
        canonical_id: the id keys and pseudonyms use instead.
        source: what taught the plugin the mapping, for audits (`"migrate_to_chat_id"`,
            `"lid-mapping"`); free text, never parsed.

    Raises:
        AliasError: a field is empty, or `alias_id` equals `canonical_id`.
    """

    platform: str
    alias_id: str
    canonical_id: str
    source: str = ""

    def __post_init__(self) -> None:
        for name in ("platform", "alias_id", "canonical_id"):
            value = getattr(self, name)
            if value is None or str(value).strip() == "":
                raise AliasError(f"IdentityAlias.{name} must be a non-empty string")
            object.__setattr__(self, name, str(value))
        object.__setattr__(self, "source", str(self.source or ""))
        if self.alias_id == self.canonical_id:
            raise AliasError(f"IdentityAlias.alias_id equals canonical_id ({self.platform}): nothing to fold")
