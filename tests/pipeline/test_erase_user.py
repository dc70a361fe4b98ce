"""`hermes-gateway sessions erase-user PLATFORM USER_ID` (docs/operations.md §5): after real
turns through a gateway, nothing of the person is left — an SQL scan of every column of every
table, a full-text query, every file under HERMES_HOME — while another member's messages in a
shared group session, and their own DM, stay."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from pipeline_helpers import RecordingAdapter, say, start_app
from typer.testing import CliRunner

from hermes_core.agents import EchoAgent
from hermes_core.cli.sessions import sessions_app
from hermes_core.model import IdentityAlias, MessageEvent, SessionSource
from hermes_core.model.events import event_to_dict
from hermes_core.recovery import load_restart_counts, save_restart_counts

ALICE, ALICE_OLD, ALICE_NAME = "u-alice-7731", "u-alice-old-7731", "Alicia Zed"
BOB, BOB_NAME = "u-bob-5150", "Bobby Quux"
# What only Alice ever wrote, and what only Bob wrote.
ALICE_WORDS = ("pelican", "marzipan", "zeppelin")
ALICE_TRACES = (ALICE, ALICE_OLD, ALICE_NAME, *ALICE_WORDS)


def _dm(user, name, chat):
    return SessionSource("testchat", chat, chat_type="dm", user_id=user, user_name=name)


def _group(user, name):
    return SessionSource("testchat", "-900", chat_type="group", user_id=user, user_name=name, chat_name="Book club")


def _cli_sync(home, monkeypatch, *args):
    monkeypatch.setenv("HERMES_HOME", str(home))
    monkeypatch.delenv("HERMES_CONFIG", raising=False)
    result = CliRunner().invoke(sessions_app, list(args))
    return result.exit_code, result.stdout, result.stderr


async def _cli(home, monkeypatch, *args):
    """The command in a thread of its own: it runs its own event loop."""
    return await asyncio.to_thread(_cli_sync, home, monkeypatch, *args)


def _every_text(db: Path) -> list[tuple[str, str, str]]:
    """(table, column, value) of every text value in every table of `db` (FTS shadow tables
    included: their blobs are decoded leniently)."""
    found = []
    # Closed at once: a connection left to the garbage collector may still hold a read snapshot,
    # which keeps the old pages in state.db (a checkpoint may not overwrite them).
    with closing(sqlite3.connect(db)) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table')")]
        for table in tables:
            cursor = conn.execute(f'SELECT * FROM "{table}"')
            names = [d[0] for d in cursor.description]
            for row in cursor:
                for name, value in zip(names, row):
                    if isinstance(value, bytes):
                        value = value.decode("utf-8", "replace")
                    if isinstance(value, str):
                        found.append((table, name, value))
    return found


async def _populate(home: Path) -> dict:
    (home / "hermes.toml").write_text("group_sessions_per_user = false\n")  # the group is one shared session
    adapter = RecordingAdapter()
    app = await start_app(home, adapter, EchoAgent(), group_sessions_per_user=False)
    try:
        await app.store.record_aliases([IdentityAlias("testchat", ALICE_OLD, ALICE, "migration")])
        await say(app, _dm(ALICE, ALICE_NAME, "100"), "my pelican lives in marzipan", "a1")
        await app.runner.handle(MessageEvent(source=_dm(ALICE, ALICE_NAME, "100"), text="/new", message_id="a2"))
        await app.runner.join()
        await say(app, _dm(ALICE, ALICE_NAME, "100"), "the zeppelin again", "a3")
        await say(app, _group(ALICE, ALICE_NAME), "pelican news for the club", "g1")
        await say(app, _group(BOB, BOB_NAME), "bob likes herons", "g2")
        await say(app, _group(ALICE_OLD, ALICE_NAME), "zeppelin from my old id", "g3")
        await say(app, _dm(BOB, BOB_NAME, "200"), "bob's own dm about otters", "b1")
        alice_key = app.store.session_key(_dm(ALICE, ALICE_NAME, "100"))
        group_key = app.store.session_key(_group(BOB, BOB_NAME))
    finally:
        await app.stop()
    # A message of hers accepted but not yet run (the gateway stopped first), and a stuck-loop count.
    from hermes_core.settings import GatewayConfig
    from hermes_core.store import SessionStore

    config = GatewayConfig(home=home, group_sessions_per_user=False)
    async with SessionStore(config.sessions_dir, config) as store:
        event = MessageEvent(source=_dm(ALICE, ALICE_NAME, "100"), text="pending pelican", message_id="a9")
        assert await store.accept_inbound_event(alice_key, event_to_dict(event)) is not None
        sessions = await store.list_all_sessions(limit=100)
    save_restart_counts(home, {alice_key: 2, group_key: 1})
    alice_sids = [r["session_id"] for r in sessions[0] if r["session_key"] == alice_key]
    old_sid = next(r["session_id"] for r in sessions[0] if r["session_key"] == alice_key and not r["current"])
    # A transcript file a degraded run left for her ended session.
    (config.sessions_dir / f"{old_sid}.jsonl").write_text('{"role": "user", "content": "pelican"}\n')
    return {"alice_key": alice_key, "group_key": group_key, "alice_sids": alice_sids, "old_sid": old_sid}


# An older gateway's sessions.json kept as `sessions.json.skipped` because an import skipped
# entries of it (docs/behaviour.md §3): her DM's entry (under her old id), Bob's DM (the
# skipped one: a counter beyond 64 bits) and the shared group's entry, first written by her.
_BOB_KEPT = {"session_key": "agent:main:testchat:dm:200", "session_id": "20240101_000000_bbbb0001",
             "updated_at": "2024-01-01T00:00:00", "input_tokens": 18446744073709551616,
             "origin": {"platform": "testchat", "chat_id": "200", "chat_type": "dm", "user_id": BOB,
                        "user_name": BOB_NAME}}


def _kept_copy(alice_key: str, group_key: str) -> dict:
    return {"_README": "an older gateway's routing index",
            alice_key: {"session_key": alice_key, "session_id": "20240101_000000_aaaa0001",
                        "updated_at": "2024-01-01T00:00:00",
                        "origin": {"platform": "testchat", "chat_id": "100", "chat_type": "dm",
                                   "user_id": ALICE_OLD, "user_name": ALICE_NAME}},
            _BOB_KEPT["session_key"]: _BOB_KEPT,
            group_key: {"session_key": group_key, "session_id": "20240101_000000_cccc0001",
                        "display_name": "Book club",
                        "origin": {"platform": "testchat", "chat_id": "-900", "chat_type": "group",
                                   "chat_name": "Book club", "user_id": ALICE, "user_name": ALICE_NAME}}}


async def test_erase_user_leaves_nothing_of_theirs_and_keeps_the_others(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    facts = await _populate(home)
    kept = home / "sessions" / "sessions.json.skipped"
    kept.write_text(json.dumps(_kept_copy(facts["alice_key"], facts["group_key"]), indent=1))
    kept.chmod(0o640)
    kept_before = kept.read_bytes()
    assert len(facts["alice_sids"]) == 2  # /new made a second session of her DM
    before = _every_text(home / "state.db")
    assert any(ALICE in v for _, _, v in before) and any("pelican" in v for _, _, v in before)

    code, out, err = await _cli(home, monkeypatch, "erase-user", "testchat", ALICE_OLD, "--dry-run", "--json")
    assert (code, err) == (0, "")
    preview = json.loads(out)
    assert preview["found"] is True and preview["dry_run"] is True and sorted(preview["sessions"]) == sorted(facts["alice_sids"])
    assert _every_text(home / "state.db") == before  # a dry run changes nothing
    assert preview["counts"]["kept_entries"] == 2 and kept.read_bytes() == kept_before

    code, out, err = await _cli(home, monkeypatch, "erase-user", "testchat", ALICE_OLD)
    assert code == 2 and "pass --yes" in err  # no terminal: a script must confirm with --yes
    code, out, err = await _cli(home, monkeypatch, "erase-user", "testchat", ALICE_OLD, "--yes", "--json")
    assert (code, err) == (0, "")
    report = json.loads(out)
    assert report["found"] is True and report["counts"] == preview["counts"], (report["counts"], preview["counts"])
    assert report["counts"]["sessions"] == 2 and report["counts"]["aliases"] == 1
    assert report["counts"]["files"] == 1 and report["counts"]["intake"] >= 4
    # Two DM turns and her two group turns, each a question and its echo.
    assert len(report["trimmed_sessions"]) == 1 and report["counts"]["messages"] == 8
    # The kept copy: her DM's entry gone, the shared group's without her id and name, Bob's
    # entry exactly as it was (its 65-bit counter too); the file keeps its mode.
    assert report["counts"]["kept_entries"] == 2
    assert json.loads(kept.read_text()) == {
        "_README": "an older gateway's routing index",
        "agent:main:testchat:dm:200": _BOB_KEPT,
        facts["group_key"]: {"session_key": facts["group_key"], "session_id": "20240101_000000_cccc0001",
                             "display_name": "Book club",
                             "origin": {"platform": "testchat", "chat_id": "-900", "chat_type": "group",
                                        "chat_name": "Book club", "user_id": None, "user_name": None,
                                        "user_id_alt": None}}}
    assert kept.stat().st_mode & 0o777 == 0o640

    # 1. SQL: no text value anywhere in state.db names her or repeats her words.
    leftovers = [(t, c, v) for t, c, v in _every_text(home / "state.db")
                 if any(trace in v for trace in ALICE_TRACES)]
    assert leftovers == []
    # 2. The full-text index finds none of her words (and still finds Bob's).
    with closing(sqlite3.connect(home / "state.db")) as conn:
        for word in ALICE_WORDS:
            assert conn.execute("SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?", (word,)).fetchall() == []
        assert conn.execute("INSERT INTO messages_fts(messages_fts, rank) VALUES ('integrity-check', 1)")
        assert len(conn.execute("SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'herons'").fetchall()) == 2
        group = conn.execute("SELECT content FROM messages WHERE session_id = (SELECT session_id FROM routes "
                             "WHERE session_key = ?) ORDER BY id", (facts["group_key"],)).fetchall()
    assert [r[0] for r in group] == [f"[{BOB_NAME}] bob likes herons", f"echo: [{BOB_NAME}] bob likes herons"]
    code, out, _ = await _cli(home, monkeypatch, "search", "pelican", "--json")
    assert (code, json.loads(out)) == (0, [])
    # 3. Files: nothing under HERMES_HOME mentions her, not even the free pages of state.db
    # (secure_delete, merged index segments), its WAL, sessions.json or the logs.
    for path in home.rglob("*"):
        if path.is_file():
            text = path.read_bytes().decode("utf-8", "replace")
            assert not any(trace in text for trace in ALICE_TRACES), path
    mirror = json.loads((home / "sessions" / "sessions.json").read_text())
    assert facts["alice_key"] not in mirror and facts["group_key"] in mirror
    assert load_restart_counts(home) == {facts["group_key"]: 1}
    # Bob's DM is whole.
    code, out, _ = await _cli(home, monkeypatch, "search", "otters", "--json")
    assert [r["snippet"] for r in json.loads(out)] == ["bob's own dm about [otters]",
                                                      "echo: bob's own dm about [otters]"]


async def test_erase_user_says_so_when_nothing_of_them_is_stored(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    await _populate(home)
    before = _every_text(home / "state.db")
    zero = {"aliases": 0, "files": 0, "intake": 0, "kept_entries": 0, "messages": 0, "obligations": 0, "origins": 0,
            "routes": 0, "sessions": 0}
    # An id nobody used, and Alice's own id on a platform she never wrote from; without --yes
    # and without a terminal: nothing to confirm.
    for platform, user in (("testchat", "u-nobody-404"), ("discord", ALICE)):
        for extra in ([], ["--dry-run"], ["--yes"]):
            code, out, err = await _cli(home, monkeypatch, "erase-user", platform, user, *extra)
            assert (code, out) == (1, ""), (platform, extra)
            assert err == (f"hermes-gateway: nothing of {platform} user '{user}' is stored (no session, message, "
                           "intake row or alias of theirs): nothing to erase\n")
            # --json: the report on stdout, the same line on stderr (an exit 1 with its reason).
            code, out, err_json = await _cli(home, monkeypatch, "erase-user", platform, user, *extra, "--json")
            assert (code, err_json) == (1, err)
            assert json.loads(out) == {"dry_run": extra == ["--dry-run"], "sessions": [], "session_keys": [],
                                       "trimmed_sessions": [], "counts": zero, "found": False}
    assert _every_text(home / "state.db") == before


async def test_erase_user_edits_kept_copies_and_logs_one_it_cannot_read(tmp_path, monkeypatch, caplog):
    """docs/operations.md §5: a person whose only trace is an entry of a kept
    `sessions.json.skipped` copy is found and erased from it; a kept copy that is not JSON is
    left as it is and named in the log (gateway.log) as not checked (doctor lists it, §1)."""
    from hermes_core.settings import GatewayConfig
    from hermes_core.store import SessionStore

    home = tmp_path / "home"
    config = GatewayConfig(home=home)
    async with SessionStore(config.sessions_dir, config) as store:
        await store.get_or_create_session(_dm(BOB, BOB_NAME, "200"))
    kept = config.sessions_dir / "sessions.json.skipped"
    kept.write_text(json.dumps(_kept_copy("agent:main:testchat:dm:100", "agent:main:testchat:group:-900")))
    damaged = config.sessions_dir / "sessions.json.skipped.2"
    damaged.write_bytes(b'{"agent:main:testchat:dm:100": {"origin": ')

    code, out, err = await _cli(home, monkeypatch, "erase-user", "testchat", ALICE_OLD, "--yes", "--json")
    assert (code, err) == (0, "")
    assert json.loads(out)["counts"]["kept_entries"] == 1  # her DM (the group's entry is under her new id)
    assert list(json.loads(kept.read_text())) == ["_README", "agent:main:testchat:dm:200",
                                                  "agent:main:testchat:group:-900"]
    assert damaged.read_bytes() == b'{"agent:main:testchat:dm:100": {"origin": '
    assert (f"kept sessions.json copy {damaged} could not be read (Expecting value: line 1 column 43 (char 42)); "
            "not checked for the erased person's entries: it may still hold them") in caplog.messages


async def test_erase_user_refuses_an_empty_platform_or_user_id(tmp_path, monkeypatch):
    # docs/operations.md §5: one line naming what is empty, exit code 2, nothing opened or changed.
    home = tmp_path / "home"
    home.mkdir()
    await _populate(home)
    before = _every_text(home / "state.db")
    usage = " must not be empty (hermes-gateway sessions erase-user PLATFORM USER_ID)\n"
    for platform, user, empty in (("", "", "the platform and the user id"), ("testchat", "", "the user id"),
                                  ("", ALICE, "the platform"), (" ", ALICE, "the platform")):
        for extra in ([], ["--dry-run"], ["--yes", "--json"]):
            code, out, err = await _cli(home, monkeypatch, "erase-user", platform, user, *extra)
            assert (code, out, err) == (2, "", f"hermes-gateway: error: {empty}{usage}"), (platform, user, extra)
    assert _every_text(home / "state.db") == before


async def test_delete_one_session_and_list_all(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    facts = await _populate(home)
    code, out, err = await _cli(home, monkeypatch, "list", "--all", "--json")
    rows = json.loads(out)
    assert len(rows) == 4 and err == ""  # two DM sessions of hers (one ended by /new), the group, Bob's DM
    old = facts["old_sid"]
    assert {r["session_id"]: r["current"] for r in rows}[old] is False
    assert {r["session_id"]: r["end_reason"] for r in rows}[old] == "reset"
    code, out, err = await _cli(home, monkeypatch, "list", "--all", "--limit", "3")
    assert code == 0 and err == "showing sessions 1-3 of 4; use --limit / --offset for more\n"
    code, out, err = await _cli(home, monkeypatch, "list", "--all", "--limit", "3", "--offset", "3", "--json")
    assert len(json.loads(out)) == 1 and err == ""

    code, out, err = await _cli(home, monkeypatch, "delete", old, "--yes", "--json")
    assert code == 0
    assert json.loads(out)["counts"] == {"files": 1, "intake": 0, "messages": 2, "obligations": 1,
                                         "origins": 0, "routes": 0, "sessions": 1}
    code, out, _ = await _cli(home, monkeypatch, "search", "marzipan", "--json")
    assert json.loads(out) == []
    code, out, _ = await _cli(home, monkeypatch, "search", "zeppelin", "--json")
    assert len(json.loads(out)) == 4  # the current DM session and the group keep theirs
    code, out, err = await _cli(home, monkeypatch, "delete", old, "--yes")
    assert (code, err) == (2, f"hermes-gateway: error: no session with id {old!r}\n")


async def test_an_engine_without_admin_removals_is_refused_naming_the_backend(tmp_path):
    """docs/architecture.md "Store engines": the removals need an engine that implements
    `RemovalBackend`; on one that does not, each is refused in one line that names `[store]
    backend`, before anything is read or removed."""
    from types import SimpleNamespace

    from hermes_core.settings import GatewayConfig
    from hermes_core.store import SessionStore, StoreError

    config = GatewayConfig(home=tmp_path / "home")
    store = SessionStore(config.sessions_dir, config)
    await store.open()
    engine = store._backend
    try:
        config.store.backend = "acme"  # a third-party engine with none of the removals
        store._backend = SimpleNamespace(degraded=False)
        with pytest.raises(StoreError) as deleting:
            await store.delete_session("20260101_000000_abcdef12")
        with pytest.raises(StoreError) as erasing:
            await store.erase_user("testchat", ALICE)
        assert str(deleting.value) == str(erasing.value) == (
            "erasing and deleting are not available with [store] backend = 'acme': its engine does not implement "
            "the admin operations (RemovalBackend)")
    finally:
        store._backend = engine
        await store.close()


async def test_prune_dry_run_lists_and_changes_nothing(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    facts = await _populate(home)
    with sqlite3.connect(home / "state.db") as conn:  # three weeks idle, but for the group
        conn.execute("UPDATE routes SET updated_ts = updated_ts - 21 * 86400 WHERE session_key != ?",
                     (facts["group_key"],))
    code, out, err = await _cli(home, monkeypatch, "prune", "--days", "7", "--dry-run", "--json")
    assert code == 0
    assert sorted(json.loads(out)["would_remove"]) == sorted(["agent:main:testchat:dm:200", facts["alice_key"]])
    code, out, err = await _cli(home, monkeypatch, "prune", "--days", "7", "--dry-run")
    assert out.endswith("2 session route(s) would be removed (dry run: nothing changed)\n")
    code, out, err = await _cli(home, monkeypatch, "prune", "--days", "7")
    assert code == 2
    assert err == ("hermes-gateway: error: Remove 2 session route(s) idle for more than 7 day(s)? "
                   "Not confirmed: stdin is not a terminal; pass --yes (or --dry-run to see)\n")
    code, out, _ = await _cli(home, monkeypatch, "list", "--json")
    assert len(json.loads(out)) == 3  # nothing was removed
    # Nothing idle that long: one line, not a "nothing to prune" above a count of 0.
    code, out, _ = await _cli(home, monkeypatch, "prune", "--days", "30", "--dry-run")
    assert (code, out) == (0, "0 session route(s) would be removed (dry run: nothing changed)\n")
    code, out, _ = await _cli(home, monkeypatch, "prune", "--days", "7", "--yes")
    assert (code, out) == (0, "removed 2 session route(s)\n")
    code, out, _ = await _cli(home, monkeypatch, "list", "--json")
    assert [r["session_key"] for r in json.loads(out)] == [facts["group_key"]]


@pytest.mark.parametrize(("given", "shown"), [("-1", "-1"), ("-0.5", "-0.5"), ("nan", "nan"), ("inf", "inf"),
                                              ("1e400", "inf")])
def test_prune_refuses_a_negative_or_endless_age(tmp_path, monkeypatch, given, shown):
    home = tmp_path / "home"
    home.mkdir()
    code, out, err = _cli_sync(home, monkeypatch, "prune", "--days", given, "--dry-run")
    assert (code, out) == (2, "")
    assert err == f"hermes-gateway: error: --days must be a finite number of days, 0 or more (got {shown})\n"


async def test_listing_numbers_past_sqlite_or_the_calendar_mean_everything(tmp_path, monkeypatch):
    """`--limit` / `--offset` past SQLite's largest integer and an `--active-minutes` window
    reaching before year 1 used to end in 'unexpected failure: Python int too large to convert
    to SQLite INTEGER' (or '… to C int'); they mean every row, skipping every row, every route."""
    home = tmp_path / "home"
    home.mkdir()
    await _populate(home)
    huge = "99999999999999999999"
    code, out, err = await _cli(home, monkeypatch, "list", "--all", "--limit", huge, "--json")
    assert (code, err, len(json.loads(out))) == (0, "", 4)
    code, out, err = await _cli(home, monkeypatch, "list", "--all", "--offset", huge, "--json")
    assert (code, out, err) == (0, "[]\n", "")
    for window in (huge, "9999999999999"):
        code, out, err = await _cli(home, monkeypatch, "list", "--active-minutes", window, "--json")
        assert (code, err, len(json.loads(out))) == (0, "", 3)
    code, out, err = await _cli(home, monkeypatch, "search", "zeppelin", "--limit", huge, "--json")
    assert (code, err, len(json.loads(out))) == (0, "", 4)


def test_list_refuses_a_negative_activity_window(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    code, out, err = _cli_sync(home, monkeypatch, "list", "--active-minutes", "-5")
    assert (code, out) == (2, "")
    assert err == "hermes-gateway: error: --active-minutes must be 0 or more minutes (got -5)\n"


@pytest.mark.parametrize("args", [["erase-user", "testchat", "x"], ["delete", "20260101_000000_abcdef12"]])
def test_removals_are_refused_while_a_gateway_runs(tmp_path, monkeypatch, args):
    from hermes_core.store.home_lock import HomeLock

    home = tmp_path / "home"
    home.mkdir()
    sqlite3.connect(home / "state.db").close()
    lock = HomeLock(home)
    lock.acquire()
    try:
        code, _out, err = _cli_sync(home, monkeypatch, *args, "--yes")
    finally:
        lock.release()
    assert code == 2 and err.startswith(f"hermes-gateway: error: a gateway is running on HERMES_HOME {home}")


async def test_show_prints_people_times_not_raw_values(tmp_path, monkeypatch):
    import re

    home = tmp_path / "home"
    home.mkdir()
    await _populate(home)
    code, out, err = await _cli(home, monkeypatch, "show", "agent:main:testchat:dm:200")
    assert (code, err) == (0, "")
    assert "None" not in out and "False" not in out and "True" not in out
    assert not re.search(r"\d\d:\d\d:\d\d\.\d", out)  # to the second, no microseconds
    assert re.search(r"^created at: +\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$", out, flags=re.M)
    assert re.search(r"^suspended: +no$", out, flags=re.M)
    assert "bob's own dm about otters" in out


async def test_table_cells_are_text_not_markup(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    await _populate(home)
    code, out, _ = await _cli(home, monkeypatch, "search", "herons")
    assert code == 0
    assert f"[{BOB_NAME}] bob likes [herons]" in out  # the sender prefix and the match marks stay
