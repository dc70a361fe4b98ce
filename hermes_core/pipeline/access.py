"""The access gate of the runner (docs/behaviour.md §9): who may talk to the agent.

`AccessGate.check(event)` runs first in `GatewayRunner.handle`, before the message's aliases are
recorded and before its intake row is written, so a refused sender leaves nothing in the store.
The decision itself is the `hermes_authorize` hook (builtin default: `builtin/access.py`, the
platform table's allow-lists); the gate gathers the facts for it (every id the sender and chat
are known by), counts refusals per platform and reason, and rate-limits the refusal notice.

Why the notice memory is in memory, not in `state.db`: a refused stranger must cost no write at
all (a flood of strangers grows neither the database nor the journal). The price is that a
restart may let a refused sender see the notice once more that day.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from ..builtin.access import decide
from ..model.access import AccessRequest
from ..model.events import MessageEvent
from ..model.source import Platform
from ..sdk.settings import PlatformSettings

log = logging.getLogger(__name__)

# Seconds between two refusal notices to the same sender (docs/behaviour.md §9: one a day).
NOTICE_EVERY_S = 86_400.0
# Senders whose last notice time is remembered; the oldest is forgotten first.
MAX_REMEMBERED = 10_000
OVERRIDE = "hermes_authorize"

Canonicalizer = Callable[[str, str, str | None], str | None]


@dataclass(frozen=True, slots=True)
class Refusal:
    """A refused message: `reason` (logged and counted) and the `notice` owed to the sender
    (None: say nothing — not a DM, a bot, already told today, or `refusal_notice = ""`)."""

    reason: str
    notice: str | None


def refusing_platforms(platforms: Iterable[str], settings: Mapping[str, PlatformSettings]) -> list[str]:
    """The network platforms among `platforms` whose table allows nobody (no `allowed_users`,
    `allowed_chats`, `allowed_roles`, and `allow_all` false): every message there is refused."""
    out = []
    for name in platforms:
        s = settings.get(name) or PlatformSettings()
        if name != Platform.LOCAL and not (s.allow_all or s.allowed_users or s.allowed_chats or s.allowed_roles):
            out.append(name)
    return out


class AccessGate:
    """Decides, counts and answers refusals (module docstring).

    Args:
        pm: the plugin manager (its `hermes_authorize` chain decides).
        settings: `{platform: PlatformSettings}`; a platform without a table gets the defaults
            (which refuse everyone).
        canonical: `(platform, kind, value) -> canonical id or None` (the store's `canonical_id`).
        clock: monotonic seconds, for the notice rate limit.
    """

    def __init__(self, pm: Any, settings: Mapping[str, PlatformSettings], canonical: Canonicalizer, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.pm = pm
        self.settings = dict(settings)
        self.canonical = canonical
        self.clock = clock
        # (platform, reason) → refused messages since start (the refusal counter).
        self.refused: Counter[tuple[str, str]] = Counter()
        self._noticed: OrderedDict[tuple[str, str], float] = OrderedDict()

    def settings_for(self, platform: str) -> PlatformSettings:
        """The common settings of `platform` (defaults when it has no table)."""
        return self.settings.get(platform) or PlatformSettings()

    def is_admin(self, event: MessageEvent) -> bool:
        """True when the sender is in the platform's `admin_users` (any known form of their id);
        the local terminal is its machine's operator."""
        source = event.source
        if source.platform == Platform.LOCAL:
            return True
        admins = self._forms(source.platform, "user", self.settings_for(source.platform).admin_users)
        return bool(self._known_ids(event, "user") & admins)

    def check(self, event: MessageEvent) -> Refusal | None:
        """None when `event`'s sender may talk to the agent, else the Refusal (counted and logged,
        without the message text). Sync and I/O-free.

        Raises:
            whatever a broken `hermes_authorize` implementation raises (the runner refuses then).
        """
        source = event.source
        if source.platform == Platform.LOCAL:
            return None
        settings = self.settings_for(source.platform)
        request = AccessRequest(
            source=source, settings=settings,
            sender_ids=frozenset(self._known_ids(event, "user")),
            chat_ids=frozenset(self._known_ids(event, "chat")),
            allowed_user_ids=frozenset(self._forms(source.platform, "user", settings.allowed_users)),
            allowed_chat_ids=frozenset(self._forms(source.platform, "chat", settings.allowed_chats)))
        allowed, reason = decide(request)
        verdict = self.pm.hook.hermes_authorize(request=request)
        if verdict is not None and bool(verdict) != allowed:
            allowed, reason = bool(verdict), OVERRIDE
        if allowed:
            return None
        self.refused[(source.platform, reason)] += 1
        log.info("message refused on %s (%s): user %s in chat %s", source.platform, reason,
                 source.participant_id, source.chat_id)
        return Refusal(reason=reason, notice=self._notice(source, settings))

    def _notice(self, source: Any, settings: PlatformSettings) -> str | None:
        # Only in a DM and never to a bot: in a group the notice would be noise for everyone
        # else, and two bots refusing each other would loop.
        if not settings.refusal_notice or source.is_bot or source.chat_type != "dm":
            return None
        who = (source.platform, source.participant_id or source.chat_id)
        now = self.clock()
        last = self._noticed.get(who)
        if last is not None and now - last < NOTICE_EVERY_S:
            return None
        self._noticed[who] = now
        self._noticed.move_to_end(who)
        while len(self._noticed) > MAX_REMEMBERED:
            self._noticed.popitem(last=False)
        return settings.refusal_notice

    def _forms(self, platform: str, kind: str, ids: Iterable[str]) -> set[str]:
        """Each id of `ids` and its canonical id."""
        out: set[str] = set()
        for value in ids:
            out.add(value)
            out.add(self.canonical(platform, kind, value) or value)
        return out

    def _known_ids(self, event: MessageEvent, kind: str) -> set[str]:
        """Every id the message's sender (kind `"user"`) or chat (`"chat"`) is known by: raw,
        canonical, and the aliases the message itself carries (not yet recorded: a refused
        message records nothing)."""
        source = event.source
        raw = [source.user_id, source.user_id_alt] if kind == "user" else [source.chat_id, source.chat_id_alt]
        ids = self._forms(source.platform, kind, [v for v in raw if v])
        aliases = [a for a in event.aliases if a.platform == source.platform]
        grew = bool(ids)
        while grew:  # follow the message's aliases transitively (each alias adds at most two ids)
            grew = False
            for alias in aliases:
                pair = {alias.alias_id, alias.canonical_id}
                if pair & ids and not pair <= ids:
                    ids |= self._forms(source.platform, kind, pair)
                    grew = True
        return ids
