"""Default `hermes_authorize` (docs/behaviour.md §9): the platform table's allow-lists.

The rules, in order: the local terminal is always allowed; a bot or webhook author is refused
unless `allow_bots`; then `allow_all`, a sender in `allowed_users`, a chat in `allowed_chats`,
or a role in `allowed_roles` (the plugin sets `role_authorized`) allows; anything else is
refused. Ids are compared in every form the request carries (raw, canonical, aliases), so an
alias of an allowed user is allowed.
"""

from __future__ import annotations

from ..markers import hookimpl
from ..model.access import AccessRequest
from ..model.source import Platform

# Reasons `decide` gives (logged and counted per platform; never shown to the sender).
LOCAL, ALLOW_ALL, ALLOWED_USER, ALLOWED_CHAT, ROLE = "local", "allow_all", "allowed_user", "allowed_chat", "role"
BOT, NOT_ALLOWED = "bot", "not_allowed"


def decide(request: AccessRequest) -> tuple[bool, str]:
    """The allow-list decision for `request`: `(allowed, reason)`, reason one of the constants
    above. Pure: no I/O."""
    source, settings = request.source, request.settings
    if source.platform == Platform.LOCAL:
        return True, LOCAL
    if source.is_bot and not settings.allow_bots:
        return False, BOT
    if settings.allow_all:
        return True, ALLOW_ALL
    if request.sender_ids & request.allowed_user_ids:
        return True, ALLOWED_USER
    if request.chat_ids & request.allowed_chat_ids:
        return True, ALLOWED_CHAT
    if settings.allowed_roles and source.role_authorized:
        return True, ROLE
    return False, NOT_ALLOWED


@hookimpl(trylast=True)
def hermes_authorize(request: AccessRequest) -> bool:
    """Core default: `decide(request)`."""
    return decide(request)[0]
