"""docs/behaviour.md §12: degraded mode runs the same engine — an in-memory SQLite database with
the store's schema and SQL — made durable by `journal.jsonl` (routes, sessions, intake, dedupe,
ledger, aliases) and `{session_id}.jsonl` transcripts (seed §3), rebuilt from them at the next
degraded start. Real files, real SQLite; `state.db` is a directory, so SQLite cannot open it."""

from __future__ import annotations

import json
import stat

import pytest

from hermes_core import SessionSource
from hermes_core.model.identity import IdentityAlias
from hermes_core.model.ids import RESERVED_SESSION_IDS, validate_session_id
from hermes_core.store import SessionStore, TranscriptReadError
from hermes_core.store.journal import JOURNAL_FILE_NAME, read_journal


@pytest.fixture
def broken_db(config):
    config.home.mkdir(parents=True, exist_ok=True)
    config.db_path.mkdir()
    return config


def lines(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("session_id", ["journal", "Journal", "inbound", "inbound_seen", "turn_markers",
                                        "delivery_ledger", "sessions", "merged", ".hidden"])
def test_session_ids_that_name_the_stores_own_files_are_refused(session_id):
    with pytest.raises(ValueError) as err:
        validate_session_id(session_id)
    assert repr(session_id) in str(err.value)


def test_the_journal_file_name_is_reserved():
    assert JOURNAL_FILE_NAME == "journal.jsonl"
    assert JOURNAL_FILE_NAME.removesuffix(".jsonl") in RESERVED_SESSION_IDS


async def test_the_store_refuses_a_reserved_session_id(broken_db, clock):
    async with SessionStore(broken_db.sessions_dir, broken_db, clock=clock) as store:
        with pytest.raises(ValueError):
            await store.append_to_transcript("journal", {"role": "user", "content": "x"})
        with pytest.raises(ValueError):
            await store.load_transcript("inbound")
    assert not (broken_db.sessions_dir / "journal.jsonl").read_text().count('"role"')


async def test_a_reply_is_one_journal_transaction_and_the_files_are_private(broken_db, clock, dm):
    async with SessionStore(broken_db.sessions_dir, broken_db, clock=clock) as store:
        entry = await store.get_or_create_session(dm)
        await store.begin_turn(entry.session_key, entry.session_id, {"role": "user", "content": "q"})
        await store.record_reply(entry.session_key, entry.session_id, {"role": "assistant", "content": "a"},
                                 origin=dm, content="a", reply_to="m1")
    journal = broken_db.sessions_dir / JOURNAL_FILE_NAME
    transcript = broken_db.sessions_dir / f"{entry.session_id}.jsonl"
    assert stat.S_IMODE(journal.stat().st_mode) == 0o600
    assert stat.S_IMODE(transcript.stat().st_mode) == 0o600
    header, *txs = lines(journal)
    assert sorted(header) == ["created", "id", "journal"] and header["journal"] == 1
    reply_tx = txs[-1]
    # the assistant row, its obligation and the end of the turn marker: one transaction
    assert reply_tx["transcripts"] == [entry.session_id]
    (ob,) = reply_tx["put"]["delivery_obligations"]
    assert (ob["content"], ob["state"], ob["reply_to"]) == ("a", "pending", "m1")
    (route,) = reply_tx["put"]["routes"]
    assert route["turn_message_id"] is None
    rows = lines(transcript)
    assert [(r["role"], r["content"], r["active"]) for r in rows] == [("user", "q", 1), ("assistant", "a", 1)]
    assert rows[-1]["tx"] == reply_tx["tx"] and ob["message_id"] == rows[-1]["id"]
    assert "session_id" not in rows[-1]  # named by the file


async def test_intake_ledger_markers_and_aliases_survive_a_degraded_restart(broken_db, clock, dm):
    async with SessionStore(broken_db.sessions_dir, broken_db, clock=clock) as store:
        entry = await store.get_or_create_session(dm)
        waiting = await store.accept_inbound_event(entry.session_key, {"source": dm.to_dict(), "text": "later",
                                                                       "message_id": "m9"})
        await store.begin_turn(entry.session_key, entry.session_id, {"role": "user", "content": "q"})
        ob = await store.record_reply(entry.session_key, entry.session_id, None, origin=dm, content="owed")
        await store.start_delivery(ob)
        await store.begin_turn(entry.session_key, entry.session_id, {"role": "user", "content": "in flight"})
        await store.record_aliases([IdentityAlias("whatsapp", "15550001", "lid9", source="test")])
    async with SessionStore(broken_db.sessions_dir, broken_db, clock=clock) as store:
        assert store.degraded
        assert [(r["id"], r["state"], r["event"]["text"]) for r in await store.pending_inbound()] == [
            (waiting, "pending", "later")]
        assert [(o["id"], o["state"], o["attempts"]) for o in await store.open_obligations()] == [
            (ob, "attempting", 1)]
        assert [m["session_id"] for m in await store.turn_markers()] == [entry.session_id]
        assert store.resolve_identity("whatsapp", "15550001") == "lid9"
        assert await store.accept_inbound_event(entry.session_key, {"source": dm.to_dict(), "text": "later",
                                                                    "message_id": "m9"}) is None  # dedupe
        # ids go on after the rebuilt ones
        again = await store.accept_inbound_event(entry.session_key, {"source": dm.to_dict(), "text": "x",
                                                                     "message_id": "m10"})
        assert again == waiting + 1


async def test_a_transaction_cut_short_is_ignored_and_the_next_append_starts_a_new_line(broken_db, clock, dm):
    async with SessionStore(broken_db.sessions_dir, broken_db, clock=clock) as store:
        entry = await store.get_or_create_session(dm)
        await store.append_to_transcript(entry.session_id, {"role": "user", "content": "kept"})
    transcript = broken_db.sessions_dir / f"{entry.session_id}.jsonl"
    state = read_journal(broken_db.sessions_dir)
    last_tx, run = state.last_tx, state.transactions[-1].run
    # A crash after the transcript line of the next transaction, before its journal line; the
    # kill also cut a line in half.
    with open(transcript, "a") as fh:
        fh.write(json.dumps({"id": 99, "role": "user", "content": "never committed", "timestamp":
                             "2026-03-01T12:00:00+00:00", "active": 1, "tx": last_tx + 1, "run": run}) + "\n")
        fh.write('{"id": 100, "role": "us')
    async with SessionStore(broken_db.sessions_dir, broken_db, clock=clock) as store:
        assert [m["content"] for m in await store.load_transcript(entry.session_id)] == ["kept"]
        await store.append_to_transcript(entry.session_id, {"role": "assistant", "content": "after"})
    async with SessionStore(broken_db.sessions_dir, broken_db, clock=clock) as store:
        assert [m["content"] for m in await store.load_transcript(entry.session_id)] == ["kept", "after"]
    *_, torn, last = transcript.read_text().splitlines()
    tail = json.loads(last)
    # the torn fragment stays on its own line; the next run numbers on from the journal, and its
    # run id keeps the cut transaction's line out even though the number is the same
    assert torn == '{"id": 100, "role": "us'
    assert (tail["content"], tail["tx"]) == ("after", last_tx + 1) and tail["run"] != run


async def test_owner_scoping_compares_canonical_ids_while_degraded(broken_db, clock):
    wa = SessionSource(platform="whatsapp", chat_id="15551234567@s.whatsapp.net", chat_type="dm",
                       user_id="15551234567:12@s.whatsapp.net")
    async with SessionStore(broken_db.sessions_dir, broken_db, clock=clock) as store:
        entry = await store.get_or_create_session(wa)
        same_person = SessionSource(platform="whatsapp", chat_id="x", chat_type="dm", user_id="+15551234567")
        stranger = SessionSource(platform="whatsapp", chat_id="y", chat_type="dm", user_id="15550000000")
        assert (await store.lookup_by_session_id(entry.session_id, owner=same_person)).session_id == entry.session_id
        assert await store.lookup_by_session_id(entry.session_id, owner=stranger) is None


DAMAGE = {"not JSON": lambda line: b'{"id": oops',
          "not UTF-8": lambda line: line.replace(b'"a1"', b'"a\xff1"'),
          "truncated": lambda line: line[:20],
          "empty": lambda line: b"",
          "no transcript line's field": lambda line: b"{}",
          "removed": None}
# Lines passed over without being named: an older gateway's message (no `tx`), and the whole line
# of a transaction a crash cut short (its run has no journal line).
LEGACY_LINE = b'{"role": "user", "content": "from an older gateway"}'
CUT_SHORT_LINE = b'{"id": 99, "role": "user", "content": "cut short", "active": 1, "tx": 4, "run": "gone"}'


@pytest.mark.parametrize("damage", DAMAGE)
async def test_a_damaged_middle_line_makes_that_transcript_unreadable_at_the_rebuild(broken_db, clock, damage, caplog):
    # docs/behaviour.md §12: a transcript that cannot be read at the rebuild makes that session's
    # transcript reads fail (never answered with a hole); the other sessions go on.
    a = SessionSource(platform="telegram", chat_id="1", user_id="1")
    b = SessionSource(platform="telegram", chat_id="2", user_id="2")
    async with SessionStore(broken_db.sessions_dir, broken_db, clock=clock) as store:
        ea, eb = await store.get_or_create_session(a), await store.get_or_create_session(b)
        for i in range(3):
            await store.append_to_transcript(ea.session_id, {"role": "user", "content": f"a{i}"})
            await store.append_to_transcript(eb.session_id, {"role": "user", "content": f"b{i}"})
    transcript = broken_db.sessions_dir / f"{ea.session_id}.jsonl"
    first, middle, last = transcript.read_bytes().splitlines()
    damaged = [] if DAMAGE[damage] is None else [DAMAGE[damage](middle)]
    kept = [LEGACY_LINE, first, *damaged, last, CUT_SHORT_LINE]
    transcript.write_bytes(b"\n".join(kept) + b"\n")
    async with SessionStore(broken_db.sessions_dir, broken_db, clock=clock) as store:
        with pytest.raises(TranscriptReadError) as err:
            await store.load_transcript(ea.session_id)
        assert [m["content"] for m in await store.load_transcript(eb.session_id)] == ["b0", "b1", "b2"]
        # /status counts the unreadable session's turns as "at least N" (§11)
        assert (store.counts_turns_in_full(ea.session_id), store.counts_turns_in_full(eb.session_id)) == (False, True)
    assert "lacks 1 line(s) of committed transactions" in str(err.value)
    (error,) = [r.getMessage() for r in caplog.records if r.levelname == "ERROR" and "degraded transcript" in r.getMessage()]
    assert error == (f"degraded transcript of session {ea.session_id}: {transcript} lacks 1 line(s) of committed "
                     f"transactions{'' if damage == 'removed' else ' (unreadable line(s) 3)'}; that session's "
                     "transcript is unavailable until state.db is back (docs/behaviour.md §12)")


BLANK = {"empty": lambda line: b"", "whitespace": lambda line: b" \t" * (len(line) // 2),
         "NUL bytes": lambda line: b"\0" * len(line)}


@pytest.mark.parametrize("blank", BLANK)
async def test_a_blank_journal_record_is_damaged_in_the_middle_and_torn_at_the_end(broken_db, clock, dm, blank, caplog):
    # docs/behaviour.md §12: a journal line left blank (a partial overwrite or a filesystem repair)
    # followed by a transaction of the same run is the damaged record of a committed transaction,
    # as an unreadable one is; the writer never writes a blank line. At the end it is a crash cut
    # short: skipped, like the end of the file after the last newline.
    async with SessionStore(broken_db.sessions_dir, broken_db, clock=clock) as store:
        entry = await store.get_or_create_session(dm)
        for i in range(3):
            await store.append_to_transcript(entry.session_id, {"role": "user", "content": f"a{i}"})
    journal = broken_db.sessions_dir / JOURNAL_FILE_NAME
    header, *records = journal.read_bytes().split(b"\n")[:-1]
    assert len(records) >= 3
    middle = records[:]
    middle[1] = BLANK[blank](middle[1])
    journal.write_bytes(b"\n".join([header, *middle]) + b"\n")
    state = read_journal(broken_db.sessions_dir)
    assert (state.damaged_lines, len(state.transactions)) == ([3], len(records) - 1)
    assert caplog.records[-1].getMessage() == (
        f"{journal} line(s) 3 cannot be read and a later transaction of the same run follows: the record of a "
        "committed transaction is damaged, its rows and transcript lines are left out; the journal is not merged "
        "until the line is repaired, or removed to merge the rest without it (docs/behaviour.md §12)")
    # the last record blanked (with or without its newline), and a blank line after the last one
    for tail in ([*records[:-1], BLANK[blank](records[-1])], [*records, BLANK[blank](records[-1])]):
        for end in (b"\n", b""):
            journal.write_bytes(b"\n".join([header, *tail]) + end)
            state = read_journal(broken_db.sessions_dir)
            assert (state.damaged_lines, len(state.transactions)) == ([], len(records) - (tail[-2] != records[-1]))
