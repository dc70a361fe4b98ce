"""The admin commands on a home whose store is PostgreSQL (docs/operations.md §5): there is no
state.db there, the database `[store] dsn` names is the state."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

GATEWAY = str(Path(sys.executable).with_name("hermes-gateway"))


def gateway(args: list[str], home: Path, dsn: str, stdin: str | None = None) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("HERMES_")}
    env.update(HERMES_HOME=str(home), HERMES_STORE__BACKEND="postgres", HERMES_STORE__DSN=dsn)
    done = subprocess.run([GATEWAY, *args], env=env, input=stdin, capture_output=True, text=True, timeout=60,
                          stdin=None if stdin is not None else subprocess.DEVNULL)
    return done.returncode, done.stdout, done.stderr


def test_sessions_commands_read_the_postgres_store(tmp_path, pg_dsn):
    home = tmp_path / "home"
    code, out, err = gateway(["chat"], home, pg_dsn, stdin="hello there\n")
    assert (code, out) == (0, "echo: hello there\n"), err
    assert not (home / "state.db").exists()
    code, out, err = gateway(["sessions", "list", "--json"], home, pg_dsn)
    assert code == 0, err
    [row] = json.loads(out)
    assert row["session_key"] == "agent:main:local:dm:terminal"
    code, out, err = gateway(["sessions", "show", row["session_id"], "--json"], home, pg_dsn)
    assert code == 0, err
    assert [(m["role"], m["content"]) for m in json.loads(out)["messages"]] == [
        ("user", "hello there"), ("assistant", "echo: hello there")]
    code, out, err = gateway(["sessions", "search", "hello", "--json"], home, pg_dsn)
    assert (code, [h["session_id"] for h in json.loads(out)]) == (0, [row["session_id"]] * 2), err
    code, out, err = gateway(["sessions", "export", row["session_id"]], home, pg_dsn)
    assert (code, [json.loads(line)["content"] for line in out.splitlines()]) == (
        0, ["hello there", "echo: hello there"]), err


# The person and the chats of the erasure tests: the same cast as the SQLite store's
# (tests/pipeline/test_erase_user.py), driven through a gateway on the PostgreSQL store.
ALICE, ALICE_OLD, ALICE_NAME = "u-alice-7731", "u-alice-old-7731", "Alicia Zed"
BOB, BOB_NAME = "u-bob-5150", "Bobby Quux"
ALICE_WORDS = ("pelican", "marzipan", "zeppelin")
ALICE_TRACES = (ALICE, ALICE_OLD, ALICE_NAME, *ALICE_WORDS)


def _dm(user, name, chat):
    from hermes_core.model import SessionSource

    return SessionSource("fake", chat, chat_type="dm", user_id=user, user_name=name)


def _group(user, name):
    from hermes_core.model import SessionSource

    return SessionSource("fake", "-900", chat_type="group", user_id=user, user_name=name, chat_name="Book club")


async def _populate(home: Path, dsn: str) -> dict:
    """Real turns through a gateway on the PostgreSQL store: Alice's DM (two sessions: /new), a
    shared group where Alice (under two ids) and Bob talk, Bob's DM; then a message of hers
    accepted but not yet run, a stuck-loop count and a transcript file of her ended session."""
    from hermes_core.agents import EchoAgent
    from hermes_core.app import GatewayApp
    from hermes_core.model import IdentityAlias, MessageEvent
    from hermes_core.model.events import event_to_dict
    from hermes_core.recovery import save_restart_counts
    from hermes_core.settings import GatewayConfig
    from hermes_core.store import SessionStore
    from hermes_core.testing.fakes import CapturingAdapter

    home.mkdir()
    (home / "hermes.toml").write_text("group_sessions_per_user = false\n")  # the group is one shared session
    config = GatewayConfig(home=home, group_sessions_per_user=False, platforms={"fake": {"allow_all": True}},
                           store={"backend": "postgres", "dsn": dsn})
    app = GatewayApp(config, adapters={"fake": CapturingAdapter()}, agent=EchoAgent(), watcher=False)
    await app.start()

    async def say(source, text, message_id):
        await app.runner.handle(MessageEvent(source=source, text=text, message_id=message_id))
        await app.runner.join()

    try:
        await app.store.record_aliases([IdentityAlias("fake", ALICE_OLD, ALICE, "migration")])
        await say(_dm(ALICE, ALICE_NAME, "100"), "my pelican lives in marzipan", "a1")
        await say(_dm(ALICE, ALICE_NAME, "100"), "/new", "a2")
        await say(_dm(ALICE, ALICE_NAME, "100"), "the zeppelin again", "a3")
        await say(_group(ALICE, ALICE_NAME), "pelican news for the club", "g1")
        await say(_group(BOB, BOB_NAME), "bob likes herons", "g2")
        await say(_group(ALICE_OLD, ALICE_NAME), "zeppelin from my old id", "g3")
        await say(_dm(BOB, BOB_NAME, "200"), "bob's own dm about otters", "b1")
        alice_key = app.store.session_key(_dm(ALICE, ALICE_NAME, "100"))
        group_key = app.store.session_key(_group(BOB, BOB_NAME))
    finally:
        await app.stop()
    async with SessionStore(config.sessions_dir, config) as store:
        event = MessageEvent(source=_dm(ALICE, ALICE_NAME, "100"), text="pending pelican", message_id="a9")
        assert await store.accept_inbound_event(alice_key, event_to_dict(event)) is not None
    save_restart_counts(home, {alice_key: 2, group_key: 1})
    rows = _rows(dsn, "SELECT session_id, EXISTS (SELECT 1 FROM routes r WHERE r.session_id = s.session_id) "
                      "FROM sessions s WHERE session_key = %s", (alice_key,))
    old_sid = next(sid for sid, current in rows if not current)
    config.sessions_dir.mkdir(parents=True, exist_ok=True)
    (config.sessions_dir / f"{old_sid}.jsonl").write_text('{"role": "user", "content": "pelican"}\n')
    return {"alice_key": alice_key, "group_key": group_key, "alice_sids": sorted(r[0] for r in rows),
            "old_sid": old_sid}


def _rows(dsn: str, sql: str, params=()) -> list[tuple]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(sql, params).fetchall()


def _every_row(dsn: str) -> list[tuple[str, str]]:
    """(table, row as text) of every row of every table of the store."""
    tables = [r[0] for r in _rows(dsn, "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1")]
    return [(table, text) for table in tables for (text,) in _rows(dsn, f'SELECT t::text FROM "{table}" t ORDER BY 1')]


async def test_list_all_and_delete_on_the_postgres_store(tmp_path, pg_dsn):
    """docs/operations.md §5: `list --all` and `delete` on a server store, with the SQLite
    store's output (tests/pipeline/test_erase_user.py expects the same)."""
    home = tmp_path / "home"
    facts = await _populate(home, pg_dsn)
    code, out, err = gateway(["sessions", "list", "--all", "--json"], home, pg_dsn)
    rows = json.loads(out)
    assert len(rows) == 4 and (code, err) == (0, "")  # her two DM sessions (one ended by /new), the group, Bob's DM
    old = facts["old_sid"]
    assert {r["session_id"]: r["current"] for r in rows}[old] is False
    assert {r["session_id"]: r["end_reason"] for r in rows}[old] == "reset"
    code, out, err = gateway(["sessions", "list", "--all", "--limit", "3"], home, pg_dsn)
    assert code == 0 and err == "showing sessions 1-3 of 4; use --limit / --offset for more\n"
    code, out, err = gateway(["sessions", "list", "--all", "--limit", "3", "--offset", "3", "--json"], home, pg_dsn)
    assert len(json.loads(out)) == 1 and err == ""

    code, out, err = gateway(["sessions", "delete", old, "--dry-run"], home, pg_dsn)
    assert (code, err) == (0, "")
    assert out.splitlines()[-1] == (f"session {old}: would remove 1 session(s) whole, trimmed 0 shared session(s), "
                                    "5 row(s) and file(s) in all (dry run: nothing changed)")
    code, out, err = gateway(["sessions", "delete", old], home, pg_dsn)
    assert code == 2 and "pass --yes" in err and out == ""  # no terminal: a script must confirm
    code, out, err = gateway(["sessions", "delete", old, "--yes", "--json"], home, pg_dsn)
    assert (code, err) == (0, "")
    assert json.loads(out)["counts"] == {"files": 1, "intake": 0, "messages": 2, "obligations": 1,
                                         "origins": 0, "routes": 0, "sessions": 1}
    code, out, _ = gateway(["sessions", "search", "marzipan", "--json"], home, pg_dsn)
    assert json.loads(out) == []
    code, out, _ = gateway(["sessions", "search", "zeppelin", "--json"], home, pg_dsn)
    assert len(json.loads(out)) == 4  # the current DM session and the group keep theirs
    assert not (home / "sessions" / f"{old}.jsonl").exists()
    assert gateway(["sessions", "delete", old, "--yes"], home, pg_dsn) == (
        2, "", f"hermes-gateway: error: no session with id {old!r}\n")


async def test_erase_user_on_the_postgres_store_leaves_nothing_of_theirs(tmp_path, pg_dsn):
    """docs/operations.md §5, docs/behaviour.md §4: an operator honours an erasure request on a
    deployment of replicas; no row of any table names her or repeats her words afterwards."""
    home = tmp_path / "home"
    facts = await _populate(home, pg_dsn)
    before = _every_row(pg_dsn)
    assert any(ALICE in text for _, text in before) and any("pelican" in text for _, text in before)
    # An older gateway's sessions.json kept because an import skipped an entry of it (Bob's:
    # a counter beyond 64 bits; docs/behaviour.md §3), holding her DM's entry too.
    bob = {"session_key": "agent:main:fake:dm:200", "session_id": "20240101_000000_bbbb0001",
           "input_tokens": 18446744073709551616,
           "origin": {"platform": "fake", "chat_id": "200", "chat_type": "dm", "user_id": BOB, "user_name": BOB_NAME}}
    kept = home / "sessions" / "sessions.json.skipped"
    kept.write_text(json.dumps({
        facts["alice_key"]: {"session_key": facts["alice_key"], "session_id": "20240101_000000_aaaa0001",
                             "origin": {"platform": "fake", "chat_id": "100", "chat_type": "dm",
                                        "user_id": ALICE_OLD, "user_name": ALICE_NAME}},
        bob["session_key"]: bob}))

    code, out, err = gateway(["sessions", "erase-user", "fake", ALICE_OLD, "--dry-run", "--json"], home, pg_dsn)
    assert (code, err) == (0, "")
    preview = json.loads(out)
    assert preview["found"] is True and preview["dry_run"] is True
    assert sorted(preview["sessions"]) == facts["alice_sids"]
    assert _every_row(pg_dsn) == before  # a dry run changes nothing

    code, out, err = gateway(["sessions", "erase-user", "fake", ALICE_OLD], home, pg_dsn)
    assert code == 2 and "pass --yes" in err
    code, out, err = gateway(["sessions", "erase-user", "fake", ALICE_OLD, "--yes", "--json"], home, pg_dsn)
    assert (code, err) == (0, "")
    report = json.loads(out)
    assert report["found"] is True and report["counts"] == preview["counts"], (report["counts"], preview["counts"])
    assert report["counts"]["sessions"] == 2 and report["counts"]["aliases"] == 1
    assert report["counts"]["files"] == 1 and report["counts"]["intake"] >= 4
    # Two DM turns and her two group turns, each a question and its echo.
    assert len(report["trimmed_sessions"]) == 1 and report["counts"]["messages"] == 8
    assert (preview["counts"]["kept_entries"], json.loads(kept.read_text())) == (1, {bob["session_key"]: bob})

    leftovers = [(t, text) for t, text in _every_row(pg_dsn) if any(trace in text for trace in ALICE_TRACES)]
    assert leftovers == []
    for word in ALICE_WORDS:
        assert _rows(pg_dsn, "SELECT id FROM messages WHERE search @@ plainto_tsquery('simple', %s)", (word,)) == []
    group = _rows(pg_dsn, "SELECT content FROM messages WHERE session_id = (SELECT session_id FROM routes "
                          "WHERE session_key = %s) ORDER BY id", (facts["group_key"],))
    assert [r[0] for r in group] == [f"[{BOB_NAME}] bob likes herons", f"echo: [{BOB_NAME}] bob likes herons"]
    code, out, _ = gateway(["sessions", "search", "pelican", "--json"], home, pg_dsn)
    assert (code, json.loads(out)) == (0, [])
    code, out, _ = gateway(["sessions", "search", "otters", "--json"], home, pg_dsn)
    # Bob's DM is whole (the order of equal ranks is the engine's).
    assert sorted(r["snippet"] for r in json.loads(out)) == ["bob's own dm about [otters]",
                                                            "echo: bob's own dm about [otters]"]
    from hermes_core.recovery import load_restart_counts

    assert load_restart_counts(home) == {facts["group_key"]: 1}
    for path in home.rglob("*"):
        if path.is_file():
            assert not any(trace in path.read_bytes().decode("utf-8", "replace") for trace in ALICE_TRACES), path
    # Erased once: asked again, nothing of hers is stored.
    assert gateway(["sessions", "erase-user", "fake", ALICE, "--yes"], home, pg_dsn) == (
        1, "", f"hermes-gateway: nothing of fake user '{ALICE}' is stored (no session, message, intake row "
               "or alias of theirs): nothing to erase\n")


async def test_erase_user_says_so_when_nothing_of_them_is_on_the_postgres_store(tmp_path, pg_dsn):
    home = tmp_path / "home"
    await _populate(home, pg_dsn)
    before = _every_row(pg_dsn)
    zero = {"aliases": 0, "files": 0, "intake": 0, "kept_entries": 0, "messages": 0, "obligations": 0, "origins": 0,
            "routes": 0, "sessions": 0}
    for platform, user in (("fake", "u-nobody-404"), ("discord", ALICE)):
        for extra in ([], ["--dry-run"], ["--yes"]):
            assert gateway(["sessions", "erase-user", platform, user, *extra], home, pg_dsn) == (
                1, "", f"hermes-gateway: nothing of {platform} user '{user}' is stored (no session, message, "
                       "intake row or alias of theirs): nothing to erase\n"), (platform, extra)
            code, out, err = gateway(["sessions", "erase-user", platform, user, *extra, "--json"], home, pg_dsn)
            # The reason of the exit code on stderr with --json too (docs/operations.md §5).
            assert (code, err) == (1, f"hermes-gateway: nothing of {platform} user '{user}' is stored (no session, "
                                      "message, intake row or alias of theirs): nothing to erase\n")
            assert json.loads(out) == {"dry_run": extra == ["--dry-run"], "sessions": [], "session_keys": [],
                                       "trimmed_sessions": [], "counts": zero, "found": False}
    assert _every_row(pg_dsn) == before


async def test_erase_user_is_refused_while_a_replica_holds_one_of_the_sessions(tmp_path, pg_dsn):
    """docs/architecture.md §7: a replica working on a session of hers (its lease live) would
    write on after the removal; the erasure is refused in one line and removes nothing (one
    transaction), and goes through once that lease is released."""
    home = tmp_path / "home"
    facts = await _populate(home, pg_dsn)
    _rows(pg_dsn, "UPDATE session_leases SET holder = 'replica-b', token = token + 1, "
                  "expires_at = now() + interval '1 hour' WHERE session_key = %s RETURNING 1", (facts["group_key"],))
    before = _every_row(pg_dsn)
    code, out, err = gateway(["sessions", "erase-user", "fake", ALICE, "--yes"], home, pg_dsn)
    assert (code, out, err) == (2, "", f"hermes-gateway: error: session {facts['group_key']} is leased by replica "
                                       "replica-b, which is working on it; nothing was removed: try again once "
                                       "that replica stops or its lease runs out\n")
    assert _every_row(pg_dsn) == before
    _rows(pg_dsn, "UPDATE session_leases SET holder = NULL, expires_at = now() WHERE session_key = %s "
                  "RETURNING 1", (facts["group_key"],))
    code, out, err = gateway(["sessions", "erase-user", "fake", ALICE, "--yes"], home, pg_dsn)
    assert (code, err) == (0, "")
    assert out.splitlines()[-1].startswith(f"fake user {ALICE}: removed 2 session(s) whole, trimmed 1 shared "
                                           "session(s), ")


def _lease_to_other_replicas(pg_dsn, *, live: str, crashed: str) -> None:
    """`live`'s lease held by replica-b for an hour more; `crashed`'s by replica-c, expired a
    minute ago and never released (each a new fencing token)."""
    _rows(pg_dsn, "UPDATE session_leases SET holder = 'replica-b', token = token + 1, "
                  "expires_at = now() + interval '1 hour' WHERE session_key = %s RETURNING 1", (live,))
    _rows(pg_dsn, "UPDATE session_leases SET holder = 'replica-c', token = token + 1, "
                  "expires_at = now() - interval '1 minute' WHERE session_key = %s RETURNING 1", (crashed,))


async def test_prune_keeps_the_routes_of_sessions_another_replica_holds(tmp_path, pg_dsn):
    """docs/operations.md §5, docs/architecture.md §7: the home lock cannot see the replicas of a
    server store, so prune keeps the route of a session another replica holds live (it is running
    a turn in it) and of one whose holder stopped without releasing it (its taker recovers the
    turn from the route's marker), says which and why, and removes the rest."""
    home = tmp_path / "home"
    facts = await _populate(home, pg_dsn)
    bob_key = "agent:main:fake:dm:200"
    _rows(pg_dsn, "UPDATE routes SET updated_ts = updated_ts - 10 * 86400 RETURNING 1")  # all idle 10 days
    _rows(pg_dsn, "UPDATE routes SET turn_started_ts = extract(epoch from now()) WHERE session_key = %s "
                  "RETURNING 1", (facts["group_key"],))
    _lease_to_other_replicas(pg_dsn, live=facts["group_key"], crashed=bob_key)
    code, out, err = gateway(["sessions", "prune", "--days", "1", "--yes"], home, pg_dsn)
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        f"kept {facts['group_key']}: leased by replica replica-b, which is working on it",
        f"kept {bob_key}: replica replica-c stopped without releasing its lease: kept for the replica that "
        "takes it over and runs its crash recovery",
        "removed 1 session route(s), kept 2"]
    assert sorted(r[0] for r in _rows(pg_dsn, "SELECT session_key FROM routes")) == sorted(
        [facts["group_key"], bob_key])
    # Nothing granted to the command: both leases are as they were.
    assert sorted(_rows(pg_dsn, "SELECT session_key, holder, token FROM session_leases WHERE session_key "
                                "= ANY(%s)", ([facts["group_key"], bob_key],))) == [
        (bob_key, "replica-c", 2), (facts["group_key"], "replica-b", 2)]
    code, out, err = gateway(["sessions", "prune", "--days", "1", "--yes", "--json"], home, pg_dsn)
    assert (code, err) == (0, "")
    assert json.loads(out) == {"removed": 0, "kept": [
        {"session_key": facts["group_key"], "reason": "leased by replica replica-b, which is working on it"},
        {"session_key": bob_key, "reason": "replica replica-c stopped without releasing its lease: kept for the "
                                           "replica that takes it over and runs its crash recovery"}]}


async def test_prune_dry_run_says_which_routes_the_prune_would_keep_without_locking_or_writing(tmp_path, pg_dsn):
    """docs/operations.md §5: `--dry-run` says what the prune would do, so on a server store it
    lists as kept, with the same lines and reasons, the routes whose lease another replica holds
    (live, or never released), reading the leases without locking a row or writing one. It used
    to list every candidate as removed."""
    import psycopg

    home = tmp_path / "home"
    facts = await _populate(home, pg_dsn)
    bob_key = "agent:main:fake:dm:200"
    _rows(pg_dsn, "UPDATE routes SET updated_ts = updated_ts - 10 * 86400 RETURNING 1")  # all idle 10 days
    _lease_to_other_replicas(pg_dsn, live=facts["group_key"], crashed=bob_key)
    before = _every_row(pg_dsn)
    live = "leased by replica replica-b, which is working on it"
    crashed = ("replica replica-c stopped without releasing its lease: kept for the replica that takes it over "
               "and runs its crash recovery")
    # Another transaction holds the lease row of the route that would go: a lock (`lock_row`)
    # would wait for it; the dry run reads past it.
    with psycopg.connect(pg_dsn) as blocker:
        blocker.execute("SELECT 1 FROM session_leases WHERE session_key = %s FOR UPDATE", (facts["alice_key"],))
        code, out, err = gateway(["sessions", "prune", "--days", "1", "--dry-run"], home, pg_dsn)
        assert (code, err) == (0, "")
        assert [line.rstrip() for line in out.splitlines()] == [
            "SESSION KEY", facts["alice_key"],
            f"kept {facts['group_key']}: {live}",
            f"kept {bob_key}: {crashed}",
            "1 session route(s) would be removed, 2 kept (dry run: nothing changed)"]
        code, out, err = gateway(["sessions", "prune", "--days", "1", "--dry-run", "--json"], home, pg_dsn)
        assert (code, err) == (0, "")
        assert json.loads(out) == {"would_remove": [facts["alice_key"]], "kept": [
            {"session_key": facts["group_key"], "reason": live}, {"session_key": bob_key, "reason": crashed}]}
        blocker.rollback()
    assert _every_row(pg_dsn) == before
    # The prune itself does what the dry run said.
    code, out, err = gateway(["sessions", "prune", "--days", "1", "--yes", "--json"], home, pg_dsn)
    assert (code, err) == (0, "")
    assert json.loads(out) == {"removed": 1, "kept": [
        {"session_key": facts["group_key"], "reason": live}, {"session_key": bob_key, "reason": crashed}]}
    # Every candidate left is kept: no "nothing to prune" above the lines saying what is kept.
    code, out, err = gateway(["sessions", "prune", "--days", "1", "--dry-run"], home, pg_dsn)
    assert (code, err, out.splitlines()) == (0, "", [
        f"kept {facts['group_key']}: {live}", f"kept {bob_key}: {crashed}",
        "0 session route(s) would be removed, 2 kept (dry run: nothing changed)"])


def test_import_replace_keeps_a_shared_route_newer_than_the_file(tmp_path, pg_dsn):
    """docs/operations.md §5: other replicas go on updating the shared routes after a legacy
    sessions.json was written; `import --replace` overwrites a route only when the file's entry
    is at least as new, keeps a newer one and names it."""
    home = tmp_path / "home"
    assert gateway(["chat"], home, pg_dsn, stdin="hello\n")[0] == 0  # the terminal's route, updated now
    ours = _rows(pg_dsn, "SELECT session_id, updated_ts FROM routes")
    [(our_sid, our_ts)] = ours
    terminal, other = "agent:main:local:dm:terminal", "agent:main:telegram:dm:12345"
    origin = {"platform": "telegram", "chat_id": "12345", "chat_type": "dm", "user_id": "9"}

    def legacy(name: str, entries: dict) -> Path:
        folder = tmp_path / name
        folder.mkdir()
        (folder / "sessions.json").write_text(json.dumps(entries))
        return folder

    old = legacy("old", {other: {"session_id": "20250101_000000_00000001", "created_at": "2025-01-01T00:00:00+00:00",
                                 "updated_at": "2025-01-01T00:00:00+00:00", "origin": origin}})
    assert gateway(["sessions", "import", str(old)], home, pg_dsn)[0] == 0
    later = legacy("later", {
        terminal: {"session_id": "20250102_000000_00000002", "created_at": "2025-01-02T00:00:00+00:00",
                   "updated_at": "2025-01-02T00:00:00+00:00",
                   "origin": {"platform": "local", "chat_id": "terminal", "chat_type": "dm"}},
        other: {"session_id": "20250601_000000_00000003", "created_at": "2025-06-01T00:00:00+00:00",
                "updated_at": "2025-06-01T00:00:00+00:00", "origin": origin}})
    code, out, err = gateway(["sessions", "import", str(later), "--replace", "--json"], home, pg_dsn)
    assert (code, err) == (0, "")
    from hermes_core.model import format_timestamp

    report = json.loads(out)
    assert (report["imported"], report["skipped_existing"]) == (1, 1)
    assert report["kept_newer"] == [f"{terminal}: the store's route (updated {format_timestamp(our_ts)}) is newer "
                                    "than the file's (2025-01-02T00:00:00+00:00)"]
    assert sorted(_rows(pg_dsn, "SELECT session_key, session_id, updated_ts FROM routes")) == [
        (terminal, our_sid, our_ts), (other, "20250601_000000_00000003", 1748736000.0)]
    code, out, err = gateway(["sessions", "import", str(later), "--replace"], home, pg_dsn)
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "imported 1 session(s), kept 1 existing, 0 message(s) from 0 legacy transcript(s)",
        f"kept {terminal}: the store's route (updated {format_timestamp(our_ts)}) is newer than the file's "
        "(2025-01-02T00:00:00+00:00)"]


def test_import_skips_an_entry_and_a_line_holding_a_nul_character_and_takes_the_others(tmp_path, pg_dsn):
    """docs/operations.md §5 `sessions import`: PostgreSQL's text cannot hold U+0000, so an older
    gateway's entry or transcript line holding one is skipped and named like any value the store
    cannot take; it used to fail the whole import."""
    home, folder = tmp_path / "home", tmp_path / "old"
    folder.mkdir()
    origin = {"platform": "telegram", "chat_id": "12345", "chat_type": "dm", "user_id": "9"}
    (folder / "sessions.json").write_text(json.dumps({
        "agent:main:telegram:dm:1": {"session_id": "20250101_000000_00000001", "origin": origin,
                                     "display_name": "Book\x00club"},
        "agent:main:telegram:dm:2": {"session_id": "20250101_000000_00000002", "origin": origin}}))
    (folder / "20250101_000000_00000002.jsonl").write_text(
        json.dumps({"role": "user", "content": "hi\x00there"}) + "\n" + json.dumps({"role": "user", "content": "fine"}))
    code, out, err = gateway(["sessions", "import", str(folder), "--json"], home, pg_dsn)
    assert (code, err) == (0, "")
    report = json.loads(out)
    assert (report["imported"], report["messages"], report["skipped"]) == (1, 1, [
        "agent:main:telegram:dm:1: session entry field 'display_name' holds a NUL character (U+0000), which the "
        "store cannot take",
        "20250101_000000_00000002.jsonl line 1: transcript message field 'content' holds a NUL character (U+0000), "
        "which the store cannot take"])
    assert _rows(pg_dsn, "SELECT session_key FROM routes") == [("agent:main:telegram:dm:2",)]
    assert _rows(pg_dsn, "SELECT content FROM messages") == [("fine",)]


async def test_status_tells_this_replicas_ledger_backlog_from_the_whole_stores(tmp_path, pg_dsn):
    """docs/operations.md §2: on a server store every replica's delivery obligations are in one
    ledger; a replica delivers those of the sessions it holds. `status` shows both counts,
    labelled, and `--json` keeps `ledger_backlog` (the whole store's) beside
    `replica_ledger_backlog`."""
    import asyncio

    from hermes_core.agents import EchoAgent
    from hermes_core.app import GatewayApp
    from hermes_core.model import MessageEvent
    from hermes_core.settings import GatewayConfig
    from hermes_core.testing.fakes import CapturingAdapter

    home = tmp_path / "home"
    home.mkdir()
    config = GatewayConfig(home=home, platforms={"fake": {"allow_all": True}}, status={"interval_s": 0.1},
                           store={"backend": "postgres", "dsn": pg_dsn})
    app = GatewayApp(config, adapters={"fake": CapturingAdapter()}, agent=EchoAgent(), watcher=False)
    await app.start()
    try:
        await app.runner.handle(MessageEvent(source=_dm(ALICE, ALICE_NAME, "100"), text="hi", message_id="m1"))
        await app.runner.join()
        ours = app.store.session_key(_dm(ALICE, ALICE_NAME, "100"))
        assert app.store.holds_session(ours)
        theirs = "agent:main:fake:dm:200"
        _rows(pg_dsn, "INSERT INTO session_leases (session_key, holder, token, expires_at) "
                      "VALUES (%s, 'replica-b', 1, now() + interval '1 hour') RETURNING 1", (theirs,))
        for key in (ours, theirs, theirs):  # one reply owed by this replica, two by replica-b
            _rows(pg_dsn, "INSERT INTO delivery_obligations (session_key, session_id, origin, content, state, "
                          "attempts, internal, created_at, updated_at, created_ts, updated_ts) VALUES "
                          "(%s, 's', NULL, 'owed', 'failed', 1, false, '', '', 0, 0) RETURNING 1", (key,))
        for _ in range(200):  # the next snapshots
            code, out, err = await asyncio.to_thread(gateway, ["status", "--json"], home, pg_dsn)
            report = json.loads(out)
            if report.get("ledger_backlog") == 3:
                break
            await asyncio.sleep(0.05)
        assert (code, err, report["ledger_backlog"], report["replica_ledger_backlog"]) == (0, "", 3, 1)
        code, out, err = await asyncio.to_thread(gateway, ["status"], home, pg_dsn)
        assert (code, err) == (0, "")
        lines = out.splitlines()
        assert "ledger backlog (this replica): 1" in lines and "ledger backlog (whole store):  3" in lines
    finally:
        await app.stop()


def _doctor(home: Path, dsn: str) -> tuple[int, dict[str, dict]]:
    code, out, err = gateway(["doctor", "--json"], home, dsn)
    assert err == ""
    return code, {row["check"]: row for row in json.loads(out)}


def test_doctor_opens_the_postgres_store_instead_of_looking_for_state_db(tmp_path, pg_dsn, pg_cluster):
    home = tmp_path / "home"
    assert gateway(["chat"], home, pg_dsn, stdin="hello\n")[0] == 0
    code, checks = _doctor(home, pg_dsn)
    database = pg_dsn.split("dbname=")[1].split()[0]
    assert code == 0
    assert checks["store"] == {"check": "store", "status": "ok",
                               "detail": f"postgres: 127.0.0.1:{pg_cluster.port}/{database}"}
    assert "state.db" not in checks and "leftovers" not in checks
    # A copy an import kept of an older sessions.json with skipped entries is a file of the home,
    # listed on a server store too (docs/operations.md §1).
    kept = home / "sessions" / "sessions.json.skipped"
    kept.write_text("{}")
    assert _doctor(home, pg_dsn)[1]["skipped entries"] == {
        "check": "skipped entries", "status": "warn",
        "detail": f"1 copy(ies) of an older sessions.json hold entries that were skipped when it was taken: {kept}; "
                  "recover the entries you need from them, then delete them"}


def test_doctor_fails_on_an_unreachable_postgres_store_naming_it(tmp_path, pg_cluster):
    home = tmp_path / "home"
    home.mkdir()
    dsn = f"postgresql://postgres:s3cret-pw@127.0.0.1:{pg_cluster.port}/absent_db?connect_timeout=2"
    code, checks = _doctor(home, dsn)
    assert code == 1
    assert checks["store"]["status"] == "fail"
    assert checks["store"]["detail"].startswith(f"PostgreSQL store 127.0.0.1:{pg_cluster.port}/absent_db cannot "
                                                "be reached: ")
    assert "s3cret-pw" not in checks["store"]["detail"]
    assert "state.db" not in checks


async def test_a_second_chat_on_the_store_says_it_waits_for_the_terminal_another_replica_holds(tmp_path, pg_dsn):
    """The terminal is a single-receiver platform (docs/adapters.md §6): a second `chat` on the
    same database accepts nothing while another replica receives for it. It says so on its first
    sweep, instead of sitting silent, and answers once the first one has stopped."""
    import asyncio

    def start(home: Path) -> "asyncio.Future":
        env = {k: v for k, v in os.environ.items() if not k.upper().startswith("HERMES_")}
        env.update(HERMES_HOME=str(home), HERMES_STORE__BACKEND="postgres", HERMES_STORE__DSN=pg_dsn)
        return asyncio.create_subprocess_exec(GATEWAY, "chat", env=env, stdin=asyncio.subprocess.PIPE,
                                              stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)

    first = await start(tmp_path / "a")
    first.stdin.write(b"hello\n")
    await first.stdin.drain()
    assert await asyncio.wait_for(first.stdout.readline(), 60) == b"echo: hello\n"
    second = await start(tmp_path / "b")
    second.stdin.write(b"hi\n")
    await second.stdin.drain()
    try:
        assert await asyncio.wait_for(second.stderr.readline(), 30) == (
            b"hermes-gateway: WARNING: another replica receives for local; this replica starts receiving for it "
            b"when that one stops (its ingress lease runs out)\n")
    finally:
        first.stdin.close()
        await asyncio.wait_for(first.wait(), 60)
    assert await asyncio.wait_for(second.stdout.readline(), 60) == b"echo: hi\n"
    second.stdin.close()
    assert await asyncio.wait_for(second.wait(), 60) == 0


async def test_a_chat_waiting_for_the_terminal_ends_with_its_input(tmp_path, pg_dsn):
    """docs/adapters.md §6: a second `chat` waiting for `ingress:local` whose stdin ends with
    no line read (`chat </dev/null`, Ctrl-D) stops at once, exit code 0, instead of waiting for
    a lease that would read nothing more; one whose stdin held lines before the end answers
    them once the first chat stops, then ends, as a piped chat does."""
    import asyncio

    def start(home: Path, stdin=asyncio.subprocess.PIPE) -> "asyncio.Future":
        env = {k: v for k, v in os.environ.items() if not k.upper().startswith("HERMES_")}
        env.update(HERMES_HOME=str(home), HERMES_STORE__BACKEND="postgres", HERMES_STORE__DSN=pg_dsn)
        return asyncio.create_subprocess_exec(GATEWAY, "chat", env=env, stdin=stdin,
                                              stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)

    waiting = (b"hermes-gateway: WARNING: another replica receives for local; this replica starts receiving for "
               b"it when that one stops (its ingress lease runs out)\n")
    first = await start(tmp_path / "a")
    chats = [first]
    try:
        first.stdin.write(b"hello\n")
        await first.stdin.drain()
        assert await asyncio.wait_for(first.stdout.readline(), 60) == b"echo: hello\n"
        chats.append(empty := await start(tmp_path / "b", stdin=asyncio.subprocess.DEVNULL))
        out, err = await asyncio.wait_for(empty.communicate(), 30)
        assert (empty.returncode, out) == (0, b"")
        assert err in (b"", waiting)  # the first sweep may come before the end of input or not
        chats.append(piped := await start(tmp_path / "c"))
        piped.stdin.write(b"hi\n")
        piped.stdin.close()
        assert await asyncio.wait_for(piped.stderr.readline(), 30) == waiting
        await asyncio.sleep(1)
        assert piped.returncode is None  # its line is not answered yet: it waits for the terminal
        first.stdin.close()
        assert await asyncio.wait_for(first.wait(), 60) == 0
        assert await asyncio.wait_for(piped.stdout.read(), 60) == b"echo: hi\n"
        assert await asyncio.wait_for(piped.wait(), 60) == 0
    finally:
        for chat in chats:  # none left behind when an assertion fails
            if chat.returncode is None:
                chat.kill()
                await chat.wait()


async def test_status_after_a_sigkill_says_a_replica_takes_the_sessions_over(tmp_path, pg_dsn):
    """docs/operations.md §2: on a server store the start runs no recovery of its own; the
    replica that takes the killed one's sessions over (once their leases run out) does."""
    import asyncio
    import signal

    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("HERMES_")}
    env.update(HERMES_HOME=str(home), HERMES_STORE__BACKEND="postgres", HERMES_STORE__DSN=pg_dsn)
    chat = await asyncio.create_subprocess_exec(GATEWAY, "chat", env=env, stdin=asyncio.subprocess.PIPE,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    chat.stdin.write(b"hello\n")
    await chat.stdin.drain()
    assert await asyncio.wait_for(chat.stdout.readline(), 60) == b"echo: hello\n"
    for _ in range(600):  # its first status snapshot
        if (home / "status.json").exists():
            break
        await asyncio.sleep(0.05)
    chat.send_signal(signal.SIGKILL)
    await chat.wait()
    code, out, err = gateway(["status"], home, pg_dsn)
    assert (code, err) == (3, "")
    assert out.splitlines()[1:] == ["it did not stop cleanly: whichever replica of its store takes its sessions over "
                                    "(once their leases run out) recovers any turns and replies it left unfinished"]


async def test_a_chat_that_loses_the_terminals_ingress_lease_goes_on_once_it_holds_it_again(tmp_path, pg_dsn):
    """A database blip or a pause past the lease makes the replica lose `ingress:local`; it stops
    reading the terminal (docs/adapters.md §6) and starts again once it holds the lease again.
    The chat used to end there, exit code 0, with the lines typed next never read."""
    import asyncio

    import psycopg

    home = tmp_path / "home"
    home.mkdir()
    (home / "hermes.toml").write_text('[store]\nbackend = "postgres"\nlease_ttl_s = 2\npoll_interval_s = 0.2\n')
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("HERMES_")}
    env.update(HERMES_HOME=str(home), HERMES_STORE__DSN=pg_dsn)
    chat = await asyncio.create_subprocess_exec(GATEWAY, "chat", env=env, stdin=asyncio.subprocess.PIPE,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    chat.stdin.write(b"one\n")
    await chat.stdin.drain()
    assert await asyncio.wait_for(chat.stdout.readline(), 60) == b"echo: one\n"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # another holder, for 2 s
        conn.execute("UPDATE session_leases SET holder = 'elsewhere', token = token + 1, "
                     "expires_at = now() + interval '2 seconds' WHERE session_key = 'ingress:local'")
    lost = b"hermes-gateway: ERROR: lost the ingress lease of local; this replica stops receiving for it\n"
    back = b"hermes-gateway: WARNING: this replica now receives for local (its ingress lease)\n"
    seen = []
    while back not in seen or lost not in seen:
        seen.append(await asyncio.wait_for(chat.stderr.readline(), 30))
        assert seen[-1], (chat.returncode, seen)
    assert chat.returncode is None  # still running
    chat.stdin.write(b"two\n")
    await chat.stdin.drain()
    assert await asyncio.wait_for(chat.stdout.readline(), 30) == b"echo: two\n"
    chat.stdin.close()
    assert await asyncio.wait_for(chat.wait(), 60) == 0


async def test_a_chat_restarted_after_a_sigkill_takes_its_own_leases_back_at_once(tmp_path, pg_dsn):
    """docs/architecture.md §7: the killed chat's leases (the terminal's ingress, its session)
    are provably its home's previous gateway's (the new one holds the home lock; the recorded
    pid runs no process), so the restarted chat takes them over at once — not after
    `[store] lease_ttl_s`, here 120 s — with new fencing tokens."""
    import asyncio
    import signal

    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("HERMES_")}
    env.update(HERMES_HOME=str(home), HERMES_STORE__BACKEND="postgres", HERMES_STORE__DSN=pg_dsn,
               HERMES_STORE__LEASE_TTL_S="120", HERMES_STORE__POLL_INTERVAL_S="0.2")
    chats = []

    async def chat_says(line: bytes):
        chat = await asyncio.create_subprocess_exec(GATEWAY, "chat", env=env, stdin=asyncio.subprocess.PIPE,
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        chats.append(chat)
        chat.stdin.write(line + b"\n")
        await chat.stdin.drain()
        return chat, await asyncio.wait_for(chat.stdout.readline(), 20)

    try:
        first, answer = await chat_says(b"hello")
        assert answer == b"echo: hello\n"
        assert json.loads((home / "replica.json").read_text())["pid"] == first.pid
        for _ in range(200):  # its reply recorded as delivered: nothing of it is owed after the kill
            if _rows(pg_dsn, "SELECT state FROM delivery_obligations") == [("delivered",)]:
                break
            await asyncio.sleep(0.05)
        first.send_signal(signal.SIGKILL)
        await first.wait()
        held = dict(_rows(pg_dsn, "SELECT session_key, token FROM session_leases WHERE expires_at > now()"))
        assert held == {"ingress:local": 1, "agent:main:local:dm:terminal": 1}
        second, answer = await chat_says(b"again")
        assert answer == b"echo: again\n"
        assert json.loads((home / "replica.json").read_text())["pid"] == second.pid
        assert dict(_rows(pg_dsn, "SELECT session_key, token FROM session_leases")) == {
            "ingress:local": 2, "agent:main:local:dm:terminal": 2}
        second.stdin.close()
        assert await asyncio.wait_for(second.wait(), 60) == 0
    finally:
        for chat in chats:  # none outlives the test (a chat waiting for the ingress lease reads nothing)
            if chat.returncode is None:
                chat.kill()
                await chat.wait()


async def test_leases_of_a_previous_gateway_not_proven_dead_are_left_to_run_out(tmp_path, pg_dsn):
    """docs/architecture.md §7: only a previous gateway of this home on this host whose pid runs
    no process has its leases ended at a start; a live pid or another host leaves them to run
    out (their holder may be working), and the record names the new replica."""
    import socket
    import subprocess

    from hermes_core.settings import GatewayConfig
    from hermes_core.store import SessionStore

    home = tmp_path / "home"
    config = GatewayConfig(home=home, store={"backend": "postgres", "dsn": pg_dsn})
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    try:
        async with SessionStore(config.sessions_dir, config) as store:  # holds the home lock
            for holder, host, pid, ended in (("old-live", socket.gethostname(), live.pid, []),
                                             ("old-elsewhere", "another-host", dead.pid, []),
                                             ("old-dead", socket.gethostname(), dead.pid, ["agent:main:x:dm:1"])):
                _rows(pg_dsn, "DELETE FROM session_leases WHERE session_key = 'agent:main:x:dm:1' RETURNING 1")
                _rows(pg_dsn, "INSERT INTO session_leases (session_key, holder, token, expires_at) VALUES "
                              "('agent:main:x:dm:1', %s, 7, now() + interval '1 hour') RETURNING 1", (holder,))
                (home / "replica.json").write_text(json.dumps({"replica_id": holder, "host": host, "pid": pid}))
                assert await store.take_back_own_leases() == ended, holder
                record = json.loads((home / "replica.json").read_text())
                assert record == {"replica_id": store._b().replica_id, "host": socket.gethostname(),
                                  "pid": os.getpid()}
                live_now = _rows(pg_dsn, "SELECT holder, token, expires_at > now() FROM session_leases "
                                         "WHERE session_key = 'agent:main:x:dm:1'")
                assert live_now == [(holder, 7, not ended)], holder
                if ended:  # the next claim is a takeover with a new fencing token
                    claim = await store.claim_session("agent:main:x:dm:1")
                    assert (claim.takeover, claim.previous_holder) == (True, "old-dead")
                    assert _rows(pg_dsn, "SELECT token FROM session_leases WHERE session_key = "
                                         "'agent:main:x:dm:1'") == [(8,)]
    finally:
        live.kill()
        live.wait()
