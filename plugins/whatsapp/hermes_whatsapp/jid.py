"""JID anatomy of the bridge (docs/adapters.md §4.0, traps W-T2, W-T4).

A user JID is `<user>[_<agent>][:<device>]@<server>`; servers are `s.whatsapp.net` (a phone
number, "PN"; `c.us` in whatsapp-web.js), `lid` (an opaque LID), `g.us` (a group),
`broadcast` (`status@broadcast` = Status updates, and broadcast lists), `newsletter`
(channels). The raw JID is kept for every send; keys use the core's canonical form
(`hermes_core.sdk.canonical_whatsapp_identifier`: the shortest alias of the normalised forms),
which this module only feeds with aliases.
"""

from __future__ import annotations

import re

from hermes_core.sdk import IdentityAlias, normalize_whatsapp_id

PLATFORM = "whatsapp"
GROUP_SERVER = "g.us"
# Chats that look like chats but are never conversations with the bot (W-T4).
NOT_CHATS = ("broadcast", "newsletter")
# The characters the core's canonicalisation folds (docs/behaviour.md §4).
_PLAIN_ID = re.compile(r"^[A-Za-z0-9@.:_+-]+$")


def server_of(jid: str) -> str:
    """The server part of a JID (`"g.us"`, `"lid"`, …), `""` for a bare number."""
    return jid.rpartition("@")[2] if "@" in jid else ""


def is_group(jid: str) -> bool:
    """True for a group JID (`…@g.us`)."""
    return server_of(jid) == GROUP_SERVER


def never_a_chat(jid: str) -> bool:
    """True for Status updates, broadcast lists and channels (`status@broadcast`, `…@newsletter`)."""
    return server_of(jid) in NOT_CHATS


def alias_pair(one: str | None, other: str | None, source: str) -> IdentityAlias | None:
    """The identity alias saying that JIDs `one` and `other` are one person (LID ↔ phone): the
    shortest normalised form is canonical (ties: the lexicographically smaller), as the key
    builder picks it, so the alias points the longer id at it. Normalised forms are stored (the
    store looks a raw JID up by its normalised form too). None when either is missing or both
    normalise to the same id."""
    if not one or not other:
        return None
    a, b = normalize_whatsapp_id(one), normalize_whatsapp_id(other)
    if not a or not b or a == b:
        return None
    if not (_PLAIN_ID.match(one.strip()) and _PLAIN_ID.match(other.strip())):
        return None  # the key builder does not fold ids with other characters either
    canonical, alias = sorted((a, b), key=lambda c: (len(c), c))
    return IdentityAlias(PLATFORM, alias, canonical, source)
