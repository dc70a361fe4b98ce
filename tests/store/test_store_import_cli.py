"""`hermes-gateway sessions import PATH` (seed §3 sessions.json with legacy fields and
naive timestamps) and the admin CLI (list/show/search/export/prune, --json, lock refusal)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hermes_core import GatewayConfig, SessionSource
from hermes_core.cli.sessions import sessions_app
from hermes_core.store import SessionStore
from hermes_core.store.home_lock import HomeLock

SEED_FILE = {
    "agent:main:telegram:dm:12345": {
        "session_key": "agent:main:telegram:dm:12345",
        "session_id": "20250101_101010_abcdef12",
        "created_at": "2025-01-01T10:10:10.123456",          # naive: host local time
        "updated_at": "2025-01-02T09:00:00",
        "origin": {"platform": "telegram", "chat_id": 12345, "chat_type": "dm", "user_id": "9",
                   "user_name": "Alice", "is_bot": True},
        "display_name": None, "platform": "telegram", "chat_type": "dm",
        "input_tokens": 10, "output_tokens": 20, "total_tokens": 30, "estimated_cost_usd": 0.01,
        "cost_status": "estimated", "last_prompt_tokens": 9,
        # legacy fields of older gateways
        "was_auto_reset": True, "auto_reset_reason": "idle", "expiry_finalized": True,
        "last_reset_at": "2024-12-31T00:00:00", "memory_flushed": True, "reset_policy": "daily",
    },
    "agent:main:discord:group:77:u1": {
        "session_id": "20250103_000000_00000001",             # no session_key: taken from the dict key
        "created_at": "2025-01-03T00:00:00+00:00",
        "origin": {"platform": "discord", "chat_id": "77", "chat_type": "group", "user_id": "u1"},
        "resume_pending": True, "resume_reason": "restart_timeout",
    },
    "agent:main:telegram:dm:broken": {"created_at": "2025-01-01T00:00:00"},  # no session_id
    "agent:main:telegram:dm:evil": {"session_id": "../../x", "created_at": "2025-01-01T00:00:00"},
    "_meta": {"written_by": "old gateway"},
    "junk": "not an entry",
}


@pytest.fixture
def home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("HERMES_HOME", str(home))
    monkeypatch.delenv("HERMES_CONFIG", raising=False)
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    yield home
    monkeypatch.undo()
    time.tzset()


@pytest.fixture
def seed_dir(tmp_path):
    old = tmp_path / "old_gateway"
    old.mkdir()
    (old / "sessions.json").write_text(json.dumps(SEED_FILE))
    (old / "20250101_101010_abcdef12.jsonl").write_text(
        '{"role": "session_meta", "tools": []}\n'
        '{"role": "user", "content": "old question", "timestamp": "2025-01-01T10:10:11"}\n'
        'not json\n'
        '{"role": "assistant", "content": "old answer", "timestamp": "2025-01-01T10:10:12"}\n')
    return old


def run(*args):
    result = CliRunner().invoke(sessions_app, list(args))
    return result.exit_code, result.output


def _open_fails_with_a_disk_error(home):
    """Open the store on `home` as a start does; the write the caller broke makes it fail."""
    async def first_start():
        config = GatewayConfig(home=home)
        store = SessionStore(config.sessions_dir, config)
        with pytest.raises(sqlite3.OperationalError, match="disk I/O error"):
            await store.open()
        await store.close()
    asyncio.run(first_start())


def _store_call(home, fn):
    async def main():
        config = GatewayConfig(home=home)
        async with SessionStore(config.sessions_dir, config) as store:
            return await fn(store)
    return asyncio.run(main())


def test_import_seed_sessions_json(home, seed_dir):
    code, out = run("import", str(seed_dir / "sessions.json"), "--json")
    assert code == 0, out
    report = json.loads(out)
    assert (report["imported"], report["skipped_existing"], report["transcripts"], report["messages"]) == (2, 0, 1, 2)
    assert len(report["skipped"]) == 5  # broken, evil, junk, session_meta line, "not json" line

    async def check(store):
        entry = await store.get_entry("agent:main:telegram:dm:12345")
        assert entry.created_at.isoformat() == "2025-01-01T01:10:10.123456+00:00"
        assert entry.updated_at.isoformat() == "2025-01-02T00:00:00+00:00"
        assert (entry.input_tokens, entry.output_tokens, entry.total_tokens, entry.cost_status) == (
            10, 20, 30, "estimated")
        assert entry.origin == SessionSource(platform="telegram", chat_id="12345", user_id="9", user_name="Alice")
        assert [m["content"] for m in await store.load_transcript(entry.session_id)] == [
            "old question", "old answer"]
        assert (await store.load_transcript(entry.session_id))[0]["timestamp"] == "2025-01-01T01:10:11+00:00"
        other = await store.get_entry("agent:main:discord:group:77:u1")
        assert (other.session_id, other.resume_pending, other.resume_reason) == (
            "20250103_000000_00000001", True, "restart_timeout")
        # the imported chat continues its session
        again = await store.get_or_create_session(SessionSource(platform="telegram", chat_id="12345"))
        assert again.session_id == "20250101_101010_abcdef12"
        assert (await store.session_info(again.session_id))["input_tokens"] == 10
    _store_call(home, check)

    code, out = run("import", str(seed_dir / "sessions.json"), "--json")
    assert (code, json.loads(out)["imported"], json.loads(out)["skipped_existing"]) == (0, 0, 2)


def test_import_missing_or_bad_file_is_one_line(home, tmp_path):
    code, out = run("import", str(tmp_path / "nope.json"))
    assert code == 2
    assert out.strip().splitlines() == [f"hermes-gateway: error: no sessions.json at {tmp_path / 'nope.json'}"]
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2")
    code, out = run("import", str(bad))
    assert code == 2 and len(out.strip().splitlines()) == 1 and "not valid JSON" in out


_ENTRY = {"session_id": "20250101_000000_abcd1234", "created_at": "2025-01-01T00:00:00"}
_GOOD = {"session_id": "20250101_000000_00000002", "created_at": "2025-01-01T00:00:00"}


@pytest.mark.parametrize("data, line", [
    ({"agent:main:telegram:dm:\ud800": _ENTRY, "agent:main:telegram:dm:2": _GOOD},  # UTF-8 cannot encode it
     "skipped agent:main:telegram:dm:\\ud800: session entry field 'session_key' holds a lone surrogate "
     "('\\ud800'), which the store cannot take"),
    ({"agent:main:telegram:dm:1": {**_ENTRY, "input_tokens": 10 ** 26}, "agent:main:telegram:dm:2": _GOOD},
     "skipped agent:main:telegram:dm:1: session entry field 'input_tokens' holds an integer beyond 64 bits, "
     "which the store cannot take"),
    # PostgreSQL's text cannot hold U+0000: skipped on every engine, not only where it would fail.
    ({"agent:main:telegram:dm:1": {**_ENTRY, "display_name": "Book\x00club"}, "agent:main:telegram:dm:2": _GOOD},
     "skipped agent:main:telegram:dm:1: session entry field 'display_name' holds a NUL character (U+0000), "
     "which the store cannot take"),
])
def test_an_entry_the_store_cannot_take_is_skipped_and_reported(home, tmp_path, data, line):
    """docs/operations.md §5 `sessions import`: an entry holding a value the store cannot take is
    skipped with a report line naming it and why, like any bad entry; the others are imported."""
    source = tmp_path / "sessions.json"
    source.write_text(json.dumps(data))
    code, out = run("import", str(source))
    assert (code, out) == (0, "imported 1 session(s), kept 0 existing, 0 message(s) from 0 legacy transcript(s)\n"
                              f"{line}\n")

    async def routes(store):
        return [entry.session_key for entry in await store.list_sessions()]
    assert _store_call(home, routes) == ["agent:main:telegram:dm:2"]


def test_a_transcript_line_the_store_cannot_take_is_skipped_and_reported(home, tmp_path):
    """A legacy transcript's message holding a lone surrogate is skipped like any bad line (named
    by file and line); the transcript's other messages are imported."""
    source = tmp_path / "sessions.json"
    source.write_text(json.dumps({"agent:main:telegram:dm:1": _ENTRY}))
    legacy = tmp_path / "20250101_000000_abcd1234.jsonl"
    legacy.write_text('{"role": "user", "content": "\\ud800"}\n{"role": "user", "content": "fine"}\n')
    code, out = run("import", str(source), "--json")
    report = json.loads(out)
    assert (code, report["imported"], report["transcripts"], report["messages"], report["skipped"]) == (
        0, 1, 1, 1, ["20250101_000000_abcd1234.jsonl line 1: transcript message field 'content' holds a lone "
                     "surrogate ('\\ud800'), which the store cannot take"])

    async def transcript(store):
        return [m["content"] for m in await store.load_transcript("20250101_000000_abcd1234")]
    assert _store_call(home, transcript) == ["fine"]


def _populate(home):
    async def fill(store):
        e = await store.get_or_create_session(SessionSource(platform="telegram", chat_id="1", user_id="1"))
        await store.append_to_transcript(e.session_id, {"role": "user", "content": "where is the lighthouse",
                                                        "timestamp": "2026-01-01T00:00:00+00:00"})
        await store.append_to_transcript(e.session_id, {"role": "assistant", "content": "on the cliff",
                                                        "timestamp": "2026-01-01T00:00:01+00:00"})
        return e
    return _store_call(home, fill)


def test_list_show_search_export(home, tmp_path):
    entry = _populate(home)
    code, out = run("list", "--json")
    assert code == 0
    assert [(r["session_key"], r["session_id"]) for r in json.loads(out)] == [
        ("agent:main:telegram:dm:1", entry.session_id)]
    code, out = run("list")
    assert out.splitlines()[0].split() == ["SESSION", "KEY", "SESSION", "ID", "TITLE", "UPDATED", "AT", "TOTAL",
                                           "TOKENS"]
    assert entry.session_id in out.splitlines()[1]

    for ref in (entry.session_key, entry.session_id):
        code, out = run("show", ref, "--json")
        assert code == 0
        shown = json.loads(out)
        assert shown["entry"]["session_id"] == entry.session_id
        assert [m["content"] for m in shown["messages"]] == ["where is the lighthouse", "on the cliff"]

    code, out = run("search", "lighthouse", "--json")
    assert json.loads(out) == [{"session_id": entry.session_id, "message_id": 1,
                                "snippet": "where is the [lighthouse]"}]
    for nothing in ("", '"', "* -"):  # no word at all: said so, not an empty result that reads "not found"
        assert run("search", nothing) == (2, f"hermes-gateway: error: nothing to search for: {nothing!r} has no "
                                             "word (letters or digits); quotes and operators such as * are not "
                                             "search syntax here\n")

    code, out = run("export", entry.session_id, "--format", "jsonl")
    assert [json.loads(line) for line in out.splitlines()] == [
        {"role": "user", "content": "where is the lighthouse", "timestamp": "2026-01-01T00:00:00+00:00"},
        {"role": "assistant", "content": "on the cliff", "timestamp": "2026-01-01T00:00:01+00:00"}]
    code, out = run("export", entry.session_id, "--format", "md")
    assert out.splitlines()[:5] == [f"# Session {entry.session_id}", "",
                                    "**user** (2026-01-01T00:00:00+00:00)", "", "where is the lighthouse"]
    code, out = run("show", "nothing-here")
    assert (code, out.strip()) == (2, "hermes-gateway: error: no session with key or id 'nothing-here'")
    code, out = run("export", "../etc/passwd")
    assert code == 2 and out.count("\n") == 1 and "not path-safe" in out


def test_prune_and_refusal_while_gateway_runs(home):
    _populate(home)
    lock = HomeLock(home)
    lock.acquire()  # a running gateway
    try:
        code, out = run("prune", "--days", "1")
        assert code == 2
        assert out.strip() == f"hermes-gateway: error: a gateway is running on HERMES_HOME {home} (pid {__import__('os').getpid()}); stop it first"
        code, out = run("list", "--json")  # reading beside a gateway is fine
        assert code == 0 and len(json.loads(out)) == 1
    finally:
        lock.release()
    code, out = run("prune", "--days", "0", "--json")
    assert (code, json.loads(out)) == (0, {"removed": 0, "kept": []})
    code, out = run("prune", "--days", "1")
    assert (code, out.strip()) == (0, "removed 0 session route(s)")


def test_bad_config_is_one_line(home):
    home.mkdir(parents=True)
    (home / "hermes.toml").write_text("group_sessions_per_user = [")
    code, out = run("list")
    assert code == 2
    assert len(out.strip().splitlines()) == 1 and out.startswith("hermes-gateway: error: config file")


def test_legacy_transcript_of_a_kept_route_is_not_imported(home, seed_dir):
    """A route kept because its key already exists points at our session: the file's legacy
    transcript must not land under the file's session id, which was never created."""
    async def ours(store):
        e = await store.get_or_create_session(SessionSource(platform="telegram", chat_id="12345", user_id="9"))
        await store.append_to_transcript(e.session_id, {"role": "user", "content": "our question",
                                                        "timestamp": "2026-01-01T00:00:00+00:00"})
        return e
    mine = _store_call(home, ours)
    assert mine.session_key == "agent:main:telegram:dm:12345"

    code, out = run("import", str(seed_dir / "sessions.json"), "--json")
    assert code == 0, out
    report = json.loads(out)
    assert (report["imported"], report["skipped_existing"], report["transcripts"], report["messages"]) == (1, 1, 0, 0)
    assert report["skipped"][-1] == ("20250101_101010_abcdef12.jsonl: route agent:main:telegram:dm:12345 "
                                     "kept as it was; transcript not imported")

    async def check(store):
        assert (await store.get_entry("agent:main:telegram:dm:12345")).session_id == mine.session_id
        assert await store.session_info("20250101_101010_abcdef12") is None
        assert await store.load_transcript("20250101_101010_abcdef12") == []
        assert [m["content"] for m in await store.load_transcript(mine.session_id)] == ["our question"]
    _store_call(home, check)

    # --replace takes the file's route: now the session exists and its transcript comes along
    code, out = run("import", str(seed_dir / "sessions.json"), "--replace", "--json")
    report = json.loads(out)
    assert (code, report["imported"], report["skipped_existing"], report["transcripts"], report["messages"]) == (
        0, 2, 0, 1, 2)

    async def check_replaced(store):
        assert (await store.get_entry("agent:main:telegram:dm:12345")).session_id == "20250101_101010_abcdef12"
        assert [m["content"] for m in await store.load_transcript("20250101_101010_abcdef12")] == [
            "old question", "old answer"]
        assert [m["content"] for m in await store.load_transcript(mine.session_id)] == ["our question"]
    _store_call(home, check_replaced)


def test_an_older_gateways_sessions_folder_is_taken_in_at_the_first_open(home, seed_dir, caplog):
    """docs/behaviour.md §3: a new state.db beside an older gateway's sessions folder (its
    sessions.json and legacy .jsonl transcripts) takes them at the first open that holds the home
    lock, as `sessions import` would, with one warning; the mirror keeps listing those chats."""
    home.mkdir()
    sessions = home / "sessions"
    seed_dir.rename(sessions)
    caplog.set_level("WARNING", logger="hermes_core.store.session_store")

    async def check(store):
        entry = await store.get_entry("agent:main:telegram:dm:12345")
        assert entry.session_id == "20250101_101010_abcdef12"
        assert [m["content"] for m in await store.load_transcript(entry.session_id)] == ["old question", "old answer"]
        assert (await store.get_entry("agent:main:discord:group:77:u1")).session_id == "20250103_000000_00000001"
    _store_call(home, check)
    assert [r.getMessage() for r in caplog.records if r.name == "hermes_core.store.session_store"] == [
        f"state.db {home / 'state.db'} held no session while {sessions / 'sessions.json'} lists 2: took their "
        "routes and 2 message(s) from 1 .jsonl transcript(s) from it, as `sessions import` does; if state.db was "
        "truncated or replaced, stop the gateway and restore it from a backup (docs/operations.md §1)"]
    listed = json.loads((sessions / "sessions.json").read_text())
    assert sorted(k for k in listed if not k.startswith("_")) == [
        "agent:main:discord:group:77:u1", "agent:main:telegram:dm:12345"]
    caplog.clear()
    _store_call(home, check)  # the next open finds sessions: nothing taken twice, nothing said
    assert [r for r in caplog.records if r.name == "hermes_core.store.session_store"] == []


def test_a_truncated_state_db_keeps_the_routes_sessions_json_lists(home, caplog):
    """doctor's warning case (docs/operations.md §1): state.db truncated to 0 bytes while
    sessions.json lists the chats. The next open takes the routes back from sessions.json
    (the transcripts were in state.db and are gone), rather than rewriting sessions.json from the
    empty database."""
    entry = _populate(home)
    (home / "state.db").write_bytes(b"")
    caplog.set_level("WARNING", logger="hermes_core.store.session_store")

    async def check(store):
        again = await store.get_entry(entry.session_key)
        return again.session_id, await store.load_transcript(again.session_id)
    assert _store_call(home, check) == (entry.session_id, [])
    assert [r.getMessage() for r in caplog.records if r.name == "hermes_core.store.session_store"] == [
        f"state.db {home / 'state.db'} held no session while {home / 'sessions' / 'sessions.json'} lists 1: took "
        "their routes from it, as `sessions import` does; if state.db was truncated or replaced, stop the gateway "
        "and restore it from a backup (docs/operations.md §1)"]
    assert entry.session_key in json.loads((home / "sessions" / "sessions.json").read_text())


@pytest.mark.parametrize("engine", ["state.db", "degraded"])
def test_a_start_on_a_sessions_json_with_values_the_store_cannot_take_takes_the_other_entries(home, caplog, engine):
    """docs/behaviour.md §3, §12: a start whose new store takes an older gateway's sessions.json
    (state.db adopts it; the degraded engine seeds from it) skips an entry holding a lone
    surrogate or an integer beyond 64 bits, with a line naming the file and the entry, and
    takes the other entries: it starts, never failing again at every restart."""
    from hermes_core.app import GatewayApp

    sessions = home / "sessions"
    sessions.mkdir(parents=True)
    if engine == "degraded":
        (home / "state.db").mkdir()  # SQLite cannot open a directory: the journaled engine
    listed = sessions / "sessions.json"
    listed.write_text(json.dumps({"agent:main:telegram:dm:\ud800": _ENTRY,
                                  "agent:main:telegram:dm:big": {**_ENTRY, "input_tokens": 2 ** 64},
                                  "agent:main:telegram:dm:2": _GOOD}))
    caplog.set_level("WARNING", logger="hermes_core.store.mirror")

    async def start() -> list[str]:
        app = GatewayApp(GatewayConfig(home=home), adapters=[], watcher=False)
        await app.start()
        try:
            return [entry.session_key for entry in await app.store.list_sessions()]
        finally:
            await app.stop()
    assert asyncio.run(start()) == ["agent:main:telegram:dm:2"]
    assert [r.getMessage() for r in caplog.records if r.name == "hermes_core.store.mirror"] == [
        f"{listed}: entry 'agent:main:telegram:dm:\\ud800' skipped: session entry field 'session_key' holds a "
        "lone surrogate ('\\ud800'), which the store cannot take",
        f"{listed}: entry 'agent:main:telegram:dm:big' skipped: session entry field 'input_tokens' holds an "
        "integer beyond 64 bits, which the store cannot take",
        f"{listed}: the file as it was is kept as {listed}.skipped: the 2 entr(ies) skipped above are in it, and "
        "the next rewrite of sessions.json leaves them out"]


# An older gateway's sessions.json as it lies on disk (CRLF line ends, indented): the copy kept
# aside must be these bytes, not a re-rendering of what was parsed.
_WITH_UNSTORABLE = json.dumps({"agent:main:telegram:dm:big": {**_ENTRY, "input_tokens": 2 ** 64},
                               "agent:main:telegram:dm:2": _GOOD}, indent=1).replace("\n", "\r\n").encode()


@pytest.mark.parametrize("engine", ["state.db", "degraded"])
def test_a_start_that_skips_entries_keeps_the_original_sessions_json_beside_it(home, caplog, engine):
    """docs/behaviour.md §3: the rewrite of sessions.json after a start took an older gateway's
    file would drop the entries it skipped for good; the original is kept first, byte for byte,
    as `sessions/sessions.json.skipped`, and the log line says where."""
    from hermes_core.app import GatewayApp

    sessions = home / "sessions"
    sessions.mkdir(parents=True)
    if engine == "degraded":
        (home / "state.db").mkdir()  # SQLite cannot open a directory: the journaled engine
    listed = sessions / "sessions.json"
    listed.write_bytes(_WITH_UNSTORABLE)
    caplog.set_level("WARNING", logger="hermes_core.store.mirror")

    async def start() -> None:
        app = GatewayApp(GatewayConfig(home=home), adapters=[], watcher=False)
        await app.start()
        await app.stop()
    asyncio.run(start())
    kept = sessions / "sessions.json.skipped"
    assert kept.read_bytes() == _WITH_UNSTORABLE
    assert sorted(k for k in json.loads(listed.read_text()) if not k.startswith("_")) == ["agent:main:telegram:dm:2"]
    assert [r.getMessage() for r in caplog.records if r.name == "hermes_core.store.mirror"][-1] == (
        f"{listed}: the file as it was is kept as {kept}: the 1 entr(ies) skipped above are in it, and the next "
        "rewrite of sessions.json leaves them out")


def test_importing_the_homes_own_sessions_json_keeps_it_when_entries_are_skipped(home, tmp_path):
    """docs/operations.md §5 `sessions import`: importing the home's own sessions.json (the file
    the mirror rewrites) keeps the original aside when it skipped entries, says where, and never
    overwrites an earlier copy; importing a file elsewhere leaves it where it is, copying
    nothing."""
    _populate(home)
    sessions = home / "sessions"
    listed = sessions / "sessions.json"
    listed.write_bytes(_WITH_UNSTORABLE)
    code, out = run("import", str(sessions))
    assert (code, out) == (0, "imported 1 session(s), kept 0 existing, 0 message(s) from 0 legacy transcript(s)\n"
                              "skipped agent:main:telegram:dm:big: session entry field 'input_tokens' holds an "
                              "integer beyond 64 bits, which the store cannot take\n"
                              f"kept {sessions / 'sessions.json.skipped'}: the file as it was, with the skipped entries\n")
    assert (sessions / "sessions.json.skipped").read_bytes() == _WITH_UNSTORABLE
    assert "agent:main:telegram:dm:big" not in json.loads(listed.read_text())  # rewritten from state.db
    second = _WITH_UNSTORABLE.replace(b"dm:2", b"dm:3")
    listed.write_bytes(second)
    code, out = run("import", str(listed), "--json")
    assert (code, json.loads(out)["kept_original"]) == (0, str(sessions / "sessions.json.skipped.2"))
    assert ((sessions / "sessions.json.skipped").read_bytes(), (sessions / "sessions.json.skipped.2").read_bytes()) == (
        _WITH_UNSTORABLE, second)
    elsewhere = tmp_path / "old" / "sessions.json"
    elsewhere.parent.mkdir()
    elsewhere.write_bytes(_WITH_UNSTORABLE)
    code, out = run("import", str(elsewhere), "--json")
    assert (code, json.loads(out)["kept_original"], sorted(p.name for p in elsewhere.parent.iterdir())) == (
        0, None, ["sessions.json"])


def test_a_writing_command_that_takes_an_older_gateways_folder_leaves_the_first_start_clean(home, seed_dir):
    """docs/behaviour.md §6: `sessions prune` on a home with an older gateway's sessions folder
    and a state.db of 0 bytes takes that folder in (its open holds the home lock) and, having
    given the home its first state, leaves the clean-stop marker, so the first start does not
    report an unclean shutdown of a run that never was."""
    from hermes_core.app import GatewayApp

    home.mkdir()
    seed_dir.rename(home / "sessions")
    (home / "state.db").write_bytes(b"")
    assert run("prune", "--days", "100000", "--yes") == (0, "removed 0 session route(s)\n")
    assert (home / ".clean_shutdown").read_bytes() == b""

    async def first_start() -> bool:
        app = GatewayApp(GatewayConfig(home=home), adapters=[], watcher=False)
        await app.start()
        try:
            return app.unclean_start
        finally:
            await app.stop()
    assert asyncio.run(first_start()) is False


def test_nothing_is_taken_from_sessions_json_while_a_degraded_journal_waits_to_be_merged(home, monkeypatch):
    """docs/behaviour.md §3: when the merge of a degraded run's journal fails (a full disk), the
    emptied state.db does not take sessions.json's routes and the run's own `.jsonl` files: the
    journal holds them, and the next start's merge would store those messages a second time."""
    import hermes_core.store.session_store as session_store

    home.mkdir()
    (home / "state.db").write_text("not a database")  # the store runs degraded

    async def degraded_chat(store):
        assert store.degraded
        entry = await store.get_or_create_session(SessionSource(platform="telegram", chat_id="5", user_id="5"))
        for text in ("first while degraded", "second while degraded"):
            await store.append_to_transcript(entry.session_id, {"role": "user", "content": text})
        return entry
    entry = _store_call(home, degraded_chat)
    (home / "state.db").write_bytes(b"")  # emptied, not restored

    async def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")
    with monkeypatch.context() as patch:
        patch.setattr(session_store, "merge_journal", full_disk)
        assert _store_call(home, lambda store: store.has_any_sessions()) is False

    async def transcript(store):
        return [m["content"] for m in await store.load_transcript(entry.session_id)]
    assert _store_call(home, transcript) == ["first while degraded", "second while degraded"]


def test_importing_the_homes_own_folder_into_an_emptied_state_db_reports_what_it_took(home):
    """`sessions import` does the taking itself (its open does not), so its report counts the
    routes it took rather than "kept 1 existing"."""
    entry = _populate(home)
    (home / "state.db").write_bytes(b"")
    code, out = run("import", str(home / "sessions"), "--json")
    assert (code, json.loads(out)["imported"], json.loads(out)["skipped_existing"]) == (0, 1, 0)
    assert _store_call(home, lambda store: store.get_entry(entry.session_key)).session_id == entry.session_id


def _legacy_sessions_folder(sessions: Path, n: int) -> list[str]:
    """An older gateway's sessions folder: sessions.json listing `n` chats, each with a legacy
    .jsonl transcript of two messages. Returns the session ids."""
    sessions.mkdir(parents=True)
    listed, ids = {}, []
    for i in range(n):
        sid = f"20250101_000000_{i:08x}"
        ids.append(sid)
        listed[f"agent:main:telegram:dm:{i}"] = {"session_id": sid, "created_at": "2025-01-01T00:00:00+00:00",
                                                 "updated_at": "2025-01-01T00:00:00+00:00"}
        (sessions / f"{sid}.jsonl").write_text(
            json.dumps({"role": "user", "content": f"question {i}", "timestamp": "2025-01-01T00:00:01+00:00"}) + "\n"
            + json.dumps({"role": "assistant", "content": f"answer {i}", "timestamp": "2025-01-01T00:00:02+00:00"})
            + "\n")
    (sessions / "sessions.json").write_text(json.dumps(listed))
    return ids


def _adoption_cut_short(home: Path, monkeypatch) -> list[str]:
    """A start that adopts an older gateway's sessions folder of 3 chats (`_legacy_sessions_folder`)
    and stops half-way: storing the second message of the second transcript raises. Returns the
    session ids."""
    from hermes_core.store import transcripts as store_transcripts

    ids = _legacy_sessions_folder(home / "sessions", 3)
    real_normalize = store_transcripts.normalize_message

    def failing_normalize(message, clock):
        if message.get("content") == "answer 1":
            raise sqlite3.OperationalError("disk I/O error")
        return real_normalize(message, clock)

    with monkeypatch.context() as patch:
        patch.setattr(store_transcripts, "normalize_message", failing_normalize)
        _open_fails_with_a_disk_error(home)
    return ids


def test_an_adoption_cut_short_is_finished_by_the_next_open_without_loss_or_doubles(home, monkeypatch, caplog):
    """docs/behaviour.md §3: each legacy transcript goes in whole or not at all, and a start that
    stopped half-way through the adoption (here: storing the second message of the second
    transcript raises) leaves it to the next open, which takes what is missing and nothing
    twice. (One commit per message used to leave that transcript with its first message only,
    and the next open, finding sessions, took nothing more.)"""
    sessions = home / "sessions"
    ids = _adoption_cut_short(home, monkeypatch)
    caplog.set_level("WARNING", logger="hermes_core.store.session_store")

    async def transcripts(store):
        return [[m["content"] for m in await store.load_transcript(sid)] for sid in ids]
    assert _store_call(home, transcripts) == [["question 0", "answer 0"], ["question 1", "answer 1"],
                                              ["question 2", "answer 2"]]
    assert [r.getMessage() for r in caplog.records if r.name == "hermes_core.store.session_store"] == [
        f"finished taking the routes and legacy transcripts {sessions / 'sessions.json'} lists, cut short at an "
        "earlier start: 0 more route(s) and 2 message(s) from 1 .jsonl transcript(s)"]
    caplog.clear()
    assert _store_call(home, transcripts)[1] == ["question 1", "answer 1"]  # the next open takes nothing more
    assert [r for r in caplog.records if r.name == "hermes_core.store.session_store"] == []


def test_a_long_import_of_legacy_transcripts_says_how_far_it_is(home, monkeypatch, caplog):
    """The import logs its progress every few seconds (here every batch of one transcript: the
    pace set to 0 s), never at the end: the end has its own line."""
    from hermes_core.store import importer

    sessions = home / "sessions"
    _legacy_sessions_folder(sessions, 3)
    monkeypatch.setattr(importer, "IMPORT_BATCH", 1, raising=False)
    monkeypatch.setattr(importer, "PROGRESS_EVERY_S", 0.0, raising=False)
    caplog.set_level("INFO", logger="hermes_core.store.importer")
    _store_call(home, lambda store: store.get_entry("agent:main:telegram:dm:0"))
    assert [r.getMessage() for r in caplog.records if r.name == "hermes_core.store.importer"] == [
        f"importing {sessions / 'sessions.json'}: taking 3 route(s), then the legacy transcripts beside them",
        f"importing legacy transcripts from {sessions}: 1 of 3 read, 2 message(s) taken so far",
        f"importing legacy transcripts from {sessions}: 2 of 3 read, 4 message(s) taken so far"]


def test_the_progress_clock_of_an_import_counts_the_time_its_routes_took(home, monkeypatch, caplog):
    """The routes go in one transaction before the transcripts (20,000: seconds): the first
    progress line comes `PROGRESS_EVERY_S` after the import began, not after the routes."""
    from hermes_core.store import importer

    sessions = home / "sessions"
    _legacy_sessions_folder(sessions, 3)
    monkeypatch.setattr(importer, "IMPORT_BATCH", 1, raising=False)
    monkeypatch.setattr(importer, "PROGRESS_EVERY_S", 0.5, raising=False)
    real_import_entries = SessionStore.import_entries

    async def slow_import_entries(self, *args, **kwargs):
        await asyncio.sleep(0.5)  # the routes of a large file
        return await real_import_entries(self, *args, **kwargs)

    monkeypatch.setattr(SessionStore, "import_entries", slow_import_entries)
    caplog.set_level("INFO", logger="hermes_core.store.importer")
    _store_call(home, lambda store: store.get_entry("agent:main:telegram:dm:0"))
    assert [r.getMessage() for r in caplog.records if r.name == "hermes_core.store.importer"][1:] == [
        f"importing legacy transcripts from {sessions}: 1 of 3 read, 2 message(s) taken so far"]


def test_doctor_warns_while_an_adoption_cut_short_waits_for_the_next_start(home, monkeypatch):
    """docs/behaviour.md §3, docs/operations.md §1: until the next start finishes it, doctor says
    the adoption was cut short (`sessions show` shows no message for the sessions not taken yet)."""
    from hermes_core.ops.doctor import check_database

    _adoption_cut_short(home, monkeypatch)
    config = GatewayConfig(home=home)
    adoption = ("sessions.json adoption", "warn",
                f"taking the routes and legacy transcripts {home / 'sessions' / 'sessions.json'} lists was cut short "
                "at an earlier start: the next start finishes it; until then those sessions may be missing or show "
                "no messages")
    assert [(c.name, c.status, c.detail) for c in check_database(config)][1] == adoption
    _store_call(home, lambda store: store.get_entry("agent:main:telegram:dm:0"))  # finishes it
    assert "sessions.json adoption" not in [c.name for c in check_database(config)]


def test_doctor_says_an_adoption_cut_short_before_its_routes_is_not_a_replaced_state_db(home, monkeypatch):
    """The routes go in one transaction: a start stopped in it leaves state.db with no session and
    the mark. That is an adoption the next start finishes, not a state.db to restore."""
    from hermes_core.ops.doctor import check_database

    _legacy_sessions_folder(home / "sessions", 3)

    async def failing_import_entries(self, *args, **kwargs):
        raise sqlite3.OperationalError("disk I/O error")

    with monkeypatch.context() as patch:
        patch.setattr(SessionStore, "import_entries", failing_import_entries)
        _open_fails_with_a_disk_error(home)
    checks = check_database(GatewayConfig(home=home))
    assert [(c.name, c.status) for c in checks] == [("state.db", "ok"), ("sessions.json adoption", "warn")]
