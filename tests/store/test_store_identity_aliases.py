"""docs/behaviour.md §4: identity aliases in state.db — recorded, followed in chains, used for keys
and owner scoping, kept across a restart, and working in memory when the store is degraded."""

from __future__ import annotations

import logging
import sqlite3

import pytest

from hermes_core import SessionSource
from hermes_core.model import AliasError, IdentityAlias
from hermes_core.store import SessionStore


async def test_recorded_alias_is_resolved_and_stored_with_first_and_last_seen(store, config, clock):
    # A Telegram group migrated to a supergroup: the new id folds into the group's first id.
    written = await store.record_aliases([IdentityAlias("telegram", "-1004012345678", "-4012345678",
                                                        "migrate_to_chat_id")])
    assert written == 1
    assert store.resolve_identity("telegram", "-1004012345678") == "-4012345678"
    assert store.resolve_identity("telegram", "-4012345678") == "-4012345678"
    assert store.resolve_identity("discord", "-1004012345678") == "-1004012345678"  # per platform
    assert await store.identity_aliases() == [{
        "platform": "telegram", "alias_id": "-1004012345678", "canonical_id": "-4012345678",
        "source": "migrate_to_chat_id", "first_seen": "2026-03-01T12:00:00+00:00",
        "last_seen": "2026-03-01T12:00:00+00:00"}]


async def test_chains_are_followed_and_a_loop_is_refused(store, caplog):
    await store.record_aliases([IdentityAlias("signal", "a", "b", "t"), IdentityAlias("signal", "b", "c", "t")])
    assert store.resolve_identity("signal", "a") == "c"
    caplog.set_level(logging.WARNING, logger="hermes_core.store.aliases")
    assert await store.record_aliases([IdentityAlias("signal", "c", "a", "bridge")]) == 0
    assert "identity alias on signal (source 'bridge') refused: it would make a loop of aliases" in caplog.text
    assert store.resolve_identity("signal", "c") == "c"
    assert [r["alias_id"] for r in await store.identity_aliases("signal")] == ["a", "b"]


async def test_a_known_alias_is_not_rewritten_within_the_hour(store, clock):
    alias = IdentityAlias("whatsapp", "123456789012345", "15551234567", "lid-mapping")
    assert await store.record_aliases([alias]) == 1
    clock.advance(300)
    assert await store.record_aliases([alias]) == 0
    assert (await store.identity_aliases())[0]["last_seen"] == "2026-03-01T12:00:00+00:00"


async def test_aliases_survive_a_restart_and_fold_keys_and_owner_scope(config, clock):
    async with SessionStore(config.sessions_dir, config, clock=clock) as store:
        old = SessionSource("telegram", "-4012345678", chat_type="group", user_id="7")
        entry = await store.get_or_create_session(old)
        assert entry.session_key == "agent:main:telegram:group:-4012345678:7"
        await store.record_aliases([IdentityAlias("telegram", "-1004012345678", "-4012345678", "migrate")])
    conn = sqlite3.connect(config.db_path)
    try:
        assert conn.execute("SELECT platform, alias_id, canonical_id, source FROM identity_aliases").fetchall() == [
            ("telegram", "-1004012345678", "-4012345678", "migrate")]
    finally:
        conn.close()
    async with SessionStore(config.sessions_dir, config, clock=clock) as store:
        new = SessionSource("telegram", "-1004012345678", chat_type="group", user_id="7")
        assert store.session_key(new) == "agent:main:telegram:group:-4012345678:7"
        again = await store.get_or_create_session(new)
        assert again.session_id == entry.session_id  # the migrated chat continues its session
        # Owner scoping compares canonical participant ids: user 70 is an alias of user 7.
        await store.record_aliases([IdentityAlias("telegram", "70", "7", "test")])
        stranger = SessionSource("telegram", "-1004012345678", chat_type="group", user_id="71")
        alias_of_owner = SessionSource("telegram", "-1004012345678", chat_type="group", user_id="70")
        assert await store.lookup_by_session_id(entry.session_id, owner=stranger) is None
        found = await store.lookup_by_session_id(entry.session_id, owner=alias_of_owner)
        assert found.session_id == entry.session_id


async def test_degraded_store_keeps_aliases_in_memory(config, clock):
    config.home.mkdir(parents=True, exist_ok=True)
    config.db_path.mkdir()  # SQLite cannot open a directory: degraded mode
    async with SessionStore(config.sessions_dir, config, clock=clock) as store:
        assert store.degraded is True
        await store.record_aliases([IdentityAlias("signal", "+4915112345678", "uuid-1", "envelope")])
        assert store.session_key(SessionSource("signal", "+4915112345678", user_id="+4915112345678")) == \
            "agent:main:signal:dm:uuid-1"
        assert [r["canonical_id"] for r in await store.identity_aliases()] == ["uuid-1"]


def test_identity_alias_names_the_bad_field():
    with pytest.raises(AliasError, match=r"^IdentityAlias.alias_id must be a non-empty string$"):
        IdentityAlias("telegram", "", "5")
    with pytest.raises(AliasError, match=r"nothing to fold"):
        IdentityAlias("telegram", "5", "5")
    assert IdentityAlias("telegram", 5, 6).alias_id == "5"  # ids are strings, like SessionSource's
