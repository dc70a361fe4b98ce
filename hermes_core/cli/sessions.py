"""`hermes-gateway sessions …`: inspect and manage stored sessions.

Read-only commands (list, show, search, export) open state.db read-only and without the home lock, so they
work beside a running gateway. Writing commands (prune, delete, erase-user, import, reindex) take
the lock and refuse with one clear line while a gateway holds the home; prune, delete and
erase-user ask before removing anything (`--yes` skips the question, and is required when stdin
is not a terminal) and show what they would remove with `--dry-run`. Tables are rich tables with
local times; every table has `--json` (docs/operations.md §5). Every command but `import` refuses a home
without `state.db` ("no gateway state at …") instead of creating an empty store there. Config loading and errors are the CLI's own
(`cli/common.py`): `hermes-gateway: error: <one line>` on stderr and exit 2, never a traceback.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sqlite3
import sys
from dataclasses import replace
from enum import Enum
from pathlib import Path
from typing import Any, Awaitable, Callable

import typer

from ..dirs import not_a_file, why_home_unusable
from ..model import SessionEntry, format_timestamp, validate_session_id
from ..model.limits import INT64_MAX
from ..model.text import clean_text, escape_controls
from ..store import HomeLockedError, SessionStore, StoreError, TranscriptReadError, is_damaged
from ..store.files import CLEAN_SHUTDOWN, write_atomic
from ..store.fts import is_index_damage, match_expression
from ..store.home_lock import home_is_locked
from ..store.journal import pending_journal
from .common import (HELP_MARKUP, CliError, PersonalCliError, choice_parser, fail, home_not_a_directory,
                     load_cli_config_or_exit, quiet_terminal_logging, run_async, setup_logging, warn)
from .output import human_time, print_fields, print_json, print_table, progress

log = logging.getLogger(__name__)

sessions_app = typer.Typer(help="Inspect and manage stored sessions.", no_args_is_help=True,
                           rich_markup_mode=HELP_MARKUP)

# `erase-user` of a person the store holds nothing of: not an error of the command line (2).
EXIT_NOTHING_FOUND = 1

_EXPECTED = (StoreError, HomeLockedError, TranscriptReadError, sqlite3.Error, OSError, ValueError)


def _stored_form(value: str) -> str:
    """A key, id, platform or query typed on the command line, as the store holds such text:
    undecodable bytes (lone surrogates from the terminal) become U+FFFD as they did when the
    text was stored (`clean_text`, docs/behaviour.md §7). Passed on raw, they failed the command
    with "'utf-8' codec can't encode character '\\udcff' …", naming neither the argument nor
    the problem; now `show` answers "no session with key or id '…'" like any unknown key."""
    return clean_text(value)


def _refuse_empty(usage: str, *arguments: tuple[str, str]) -> None:
    """Refuse the empty or blank ones of `arguments` (`(what the argument is, its value)`, e.g.
    `("session key or session id", key_or_id)`) in one line naming each and the command's
    `usage`, exit code 2, before anything is opened: an empty key or id would only ever find
    nothing, or fail in the store in words about something else (docs/operations.md §5).

    Raises:
        typer.Exit: (code 2) after printing the error line.
    """
    empty = [what for what, value in arguments if not value.strip()]
    if empty:
        raise fail(f"the {' and the '.join(empty)} must not be empty ({usage})")


class ExportFormat(str, Enum):
    jsonl = "jsonl"
    md = "md"


def _run(work: Callable[[SessionStore], Awaitable[Any]], *, write: bool = False,
         need_state: bool = True, reads_index: bool = False,
         prepare: Callable[[], None] | None = None, removes: bool = False) -> Any:
    """Load the config (the CLI's one loader), open the store (locked for writes), run `work`,
    close. Every failure is the CLI's one error line and exit 2.

    With `need_state` (every command but `import`) a home without `state.db` is refused before
    anything is opened: a mistyped HERMES_HOME must not get an empty store created in it. A
    server store (`[store] backend`, docs/architecture.md §7) keeps no state.db: its database is
    the state, so the commands open it (docs/operations.md §5).
    A home this command gives its first gateway state (`import` into a new home, or any writing
    command whose open takes an older gateway's sessions.json into a state.db that held no
    session) is left with the `.clean_shutdown` marker a clean stop leaves (`_mark_never_ran`).
    `reads_index`: `work` reads the full-text index, so a bare "database disk image is
    malformed" may be its damage as well as the file's, and the error line names both.
    `prepare`: called once the config has loaded, before the home is touched (`import` reads its
    file there); its OSError or ValueError is the CLI's one error line, exit 2.
    A read (list, show, search, export) of a state.db whose degraded run's journal is not merged
    yet (`store.journal.pending_journal`, what `doctor` checks) ends with one warning line on
    stderr saying that what that run wrote is not shown (docs/behaviour.md §12). With `removes`
    (delete, erase-user, prune) such a state.db is refused instead: the removal would miss what
    that run wrote, which the next start merges in and its journal keeps (docs/operations.md §5)."""
    # No stderr logging set-up: the commands print their own report (skipped entries included).
    config = load_cli_config_or_exit(logging_on=False)
    if prepare is not None:
        try:
            prepare()
        except (OSError, ValueError) as exc:
            raise fail(exc) from None
    if need_state and config.store.builtin and not config.db_path.is_file():
        obstacle = not_a_file(config.db_path)
        why = home_not_a_directory(config.home) or (f" ({obstacle})" if obstacle is not None
                                                    else f" (state.db not found at {config.db_path})")
        raise fail(f"no gateway state at {config.home}{why}")
    if not write and config.store.builtin and config.db_path.is_file() and config.db_path.stat().st_size == 0:
        # Opening it would write its schema: a read writes nothing into the home, and doctor
        # tells a truncated state.db by what it holds (docs/operations.md §1).
        raise fail(f"state.db {config.db_path} is empty (0 bytes): nothing to show; `hermes-gateway doctor` says "
                   "what to do")
    if write and not need_state:
        # `import` may make the home: what is in the way is said as the start says it
        # (docs/operations.md §5), not as the lock file's OSError ("[Errno 17] File exists: …").
        if (problem := why_home_unusable(config.home)) is not None:
            raise fail(problem)
    creates_state = not need_state and not _has_gateway_state(config.db_path, config.sessions_dir)
    # The commands print their own report: warnings go to gateway.log (writes) or nowhere
    # (reads: a read-only command writes nothing into the home), never twice on the terminal.
    # From here on a write's error line is logged there too (`common.fail`, docs/operations.md §4).
    if write:
        setup_logging(config.home, terminal=False, fmt=config.logging.format)
    else:
        quiet_terminal_logging()
    if write:
        pid = home_is_locked(config.home)
        if pid is not None:
            holder = f" (pid {pid})" if pid else ""
            raise fail(f"a gateway is running on HERMES_HOME {config.home}{holder}; stop it first")
    if removes and config.store.builtin and (journal := pending_journal(config.sessions_dir)) is not None:
        raise fail(f"a degraded run's journal waits to be merged into state.db ({journal}): this would not remove "
                   "what that run wrote; start the gateway once (its start merges the journal), stop it, then run "
                   "this again")

    async def main() -> Any:
        # No degraded fallback: its copy holds no transcripts, so a listing or an export would
        # come out empty, and a write would land in its journal instead of state.db.
        # A read opens state.db read-only: it writes nothing into the home, and works on a home
        # this user cannot write (docs/operations.md §5).
        store = SessionStore(config.sessions_dir, config, lock_home=write, degraded_fallback=False,
                             adopt_sessions_json=need_state,  # `import` imports and reports itself
                             read_only=not write)
        await store.open()
        try:
            return await work(store)
        except Exception as exc:
            # Name the file and what to do: SQLite's words ("database disk image is malformed",
            # "invalid fts5 file format", also wrapped in a transcript read's error) name neither.
            # Index damage first: it is not always SQLITE_CORRUPT ("no such table: fts_progress").
            if is_index_damage(exc):  # derived data: rebuilt, not restored (docs/behaviour.md §3)
                raise StoreError(f"the full-text index of state.db {config.db_path} is damaged: `hermes-gateway "
                                 "sessions reindex` rebuilds it from the messages (none is lost)") from exc
            if not is_damaged(exc):
                raise
            if reads_index:
                # A damaged index also says a bare "database disk image is malformed", and only
                # its integrity check (a write) tells the two apart: both are named.
                raise StoreError(f"state.db {config.db_path} or its full-text index is damaged: `hermes-gateway "
                                 "doctor` tells which; a damaged index is rebuilt by `hermes-gateway sessions "
                                 "reindex` (no message is lost), a damaged state.db is restored from a backup "
                                 "(docs/operations.md §1)") from exc
            raise StoreError(f"state.db {config.db_path} is damaged: `hermes-gateway doctor` names the damage; "
                             "restore it from a backup (docs/operations.md §1)") from exc
        finally:
            await store.close()
            # Taking an older gateway's sessions.json into a state.db that held no session gives
            # the home its first state too (docs/behaviour.md §6).
            if creates_state or store.adopted_sessions_json:
                _mark_never_ran(config.home)

    result = run_async(main, expected=_EXPECTED)
    if not write and config.store.builtin:
        journal = pending_journal(config.sessions_dir)
        if journal is not None:  # said after a read that worked: a failure stays one error line
            # What a degraded run wrote is in the journal until the next start merges it
            # (docs/behaviour.md §12): the read above saw state.db without it.
            warn("sessions and messages written during a degraded run are not shown until the next gateway "
                 f"start merges them ({journal} holds them)")
    return result


def _has_gateway_state(db_path: Path, sessions_dir: Path) -> bool:
    """True when a gateway may have run on the home: `state.db` exists, or `sessions/` holds
    anything (a degraded run's journal, the mirror)."""
    if db_path.exists():
        return True
    try:
        return any(sessions_dir.iterdir())
    except FileNotFoundError:
        return False
    except OSError:
        return True  # unreadable: assume a gateway ran, so its crash is never hidden


def _mark_never_ran(home: Path) -> None:
    """Write the empty `.clean_shutdown` a clean stop writes, on a home whose gateway state this
    command created.

    Why here and not at start: the start reads a missing marker on a home with sessions as a
    crash (docs/behaviour.md §6), and after `import` the home has sessions although no gateway
    ever ran on it; its first start would warn of an unclean shutdown of a run that never was.
    The start cannot tell the two apart afterwards, but this command knows it created the state.
    A home that already had state (a gateway may have crashed on it) is never marked, so a real
    crash is still recovered."""
    try:
        write_atomic(home / CLEAN_SHUTDOWN, "")  # empty, as a clean stop writes it
    except OSError as exc:
        # Only cosmetic: the first start then reports an unclean shutdown with nothing to recover.
        log.warning("could not write %s: %s", home / CLEAN_SHUTDOWN, exc)


def _entry_row(entry: SessionEntry, title: str | None) -> dict[str, Any]:
    return {"session_key": entry.session_key, "session_id": entry.session_id, "title": title,
            "updated_at": format_timestamp(entry.updated_at), "platform": entry.platform,
            "chat_type": entry.chat_type, "display_name": entry.display_name,
            "total_tokens": entry.total_tokens, "suspended": entry.suspended,
            "resume_pending": entry.resume_pending}


def _cut_note(shown: int, total: int, offset: int, what: str) -> None:
    """One line on stderr when a listing is cut: a silent cut reads as "that is all"."""
    if offset + shown < total:
        typer.echo(f"showing {what} {offset + 1 if shown else offset}-{offset + shown} of {total}; "
                   "use --limit / --offset for more", err=True)


def _confirm(question: str, yes: bool, *, names_a_person: bool = False) -> None:
    """Ask `question` on a terminal; without one, `--yes` is required (a script must say so).
    `names_a_person`: the question names whose data it is about (`erase-user`), so the error
    that repeats it is kept out of gateway.log (`PersonalCliError`).

    Raises:
        CliError: not confirmed (nothing was changed).
    """
    if yes:
        return
    if not sys.stdin.isatty():
        error = PersonalCliError if names_a_person else CliError
        raise error(f"{question} Not confirmed: stdin is not a terminal; pass --yes (or --dry-run to see)")
    if not typer.confirm(question, default=False, err=True):
        raise CliError("cancelled; nothing was changed")


def _sql_count(number: int) -> int:
    """A `--limit` / `--offset` as SQLite takes it: a number past its largest integer means the
    same as that integer (every row / skip every row), where it raised 'Python int too large to
    convert to SQLite INTEGER'."""
    return min(number, INT64_MAX)


@sessions_app.command("list")
def list_cmd(
    active_minutes: int = typer.Option(None, "--active-minutes", help="only sessions active in the last N minutes"),
    show_all: bool = typer.Option(False, "--all", help="every stored session, not only each chat's current one"),
    limit: int = typer.Option(50, "--limit", min=1, help="at most this many rows"),
    offset: int = typer.Option(0, "--offset", min=0, help="skip this many rows first (paging)"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
) -> None:
    """List session entries, most recently active first.

    `--all` lists every stored session, ended ones too. Each row names its session's title
    (`/new <title>`, `/title`; docs/behaviour.md §11)."""
    if active_minutes is not None and active_minutes < 0:  # would list nothing, silently
        raise fail(f"--active-minutes must be 0 or more minutes (got {active_minutes})")
    limit, offset = _sql_count(limit), _sql_count(offset)
    if show_all:
        if active_minutes is not None:
            raise fail("--active-minutes lists current sessions only; it cannot be combined with --all")
        rows, total = _run(lambda s: s.list_all_sessions(limit=limit, offset=offset))
        columns = ["session_id", "session_key", "title", "current", "updated_at", "ended_at", "end_reason",
                   "total_tokens"]
    else:
        async def work(store: SessionStore) -> tuple[list[dict[str, Any]], int]:
            entries = await store.list_sessions(active_minutes)
            # The title is the session row's, not the route's: read for the shown rows only.
            rows = [_entry_row(e, (await store.session_info(e.session_id) or {}).get("title"))
                    for e in entries[offset:offset + limit]]
            return rows, len(entries)

        rows, total = _run(work)
        columns = ["session_key", "session_id", "title", "updated_at", "total_tokens"]
    if as_json:
        print_json(rows)
    else:
        print_table(rows, columns, times=("updated_at", "ended_at"))
    _cut_note(len(rows), total, offset, "sessions" if show_all else "routes")


async def _resolve(store: SessionStore, key_or_id: str) -> SessionEntry | None:
    """The entry whose session key, or else session id, is `key_or_id`; None when neither is.
    A text no session id can be (`validate_session_id`: not path-safe, or one of the store's
    own file names) is looked up as a key only: it finds no session, like any unknown key."""
    entry = await store.get_entry(key_or_id)
    if entry is None:
        try:
            validate_session_id(key_or_id)
        except ValueError:
            return None
        entry = await store.lookup_by_session_id(key_or_id)
    return entry


# The entry's fields `show` prints, in this order (the rest is in --json).
_SHOWN_FIELDS = ("session_key", "session_id", "platform", "chat_type", "display_name", "created_at", "updated_at",
                 "input_tokens", "output_tokens", "total_tokens", "estimated_cost_usd", "suspended",
                 "resume_pending", "resume_reason")
_TIME_FIELDS = {"created_at", "updated_at", "last_resume_marked_at"}


@sessions_app.command("show")
def show_cmd(
    key_or_id: str = typer.Argument(..., help="a session key or a session id", callback=_stored_form),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
) -> None:
    """Show one session entry and its transcript."""
    _refuse_empty("hermes-gateway sessions show KEY_OR_ID", ("session key or session id", key_or_id))

    async def work(store: SessionStore):
        entry = await _resolve(store, key_or_id)
        if entry is None:
            return None, None, []
        info = await store.session_info(entry.session_id) or {}
        return entry, info.get("title"), await store.load_transcript(entry.session_id)

    entry, title, messages = _run(work)
    if entry is None:
        raise fail(f"no session with key or id {key_or_id!r}")
    if as_json:
        print_json({"entry": entry.to_dict(), "title": title, "messages": messages})
        return
    data = entry.to_dict()
    fields = [(name.replace("_", " "), human_time(data.get(name)) if name in _TIME_FIELDS else data.get(name))
              for name in _SHOWN_FIELDS if data.get(name) not in (None, "")]
    if title:  # set by /new <title> or /title (docs/behaviour.md §11)
        fields.insert(2, ("title", title))
    if entry.origin is not None:
        fields.append(("origin", entry.origin.description))
    fields.append(("messages", len(messages)))
    print_fields(fields)
    print_table([{"time": m.get("timestamp"), "role": m.get("role"), "content": m.get("content") or ""}
                 for m in messages], ["time", "role", "content"], times=("time",), empty="")


@sessions_app.command("search")
def search_cmd(
    query: str = typer.Argument(..., help="words to find (all must match)", callback=_stored_form),
    limit: int = typer.Option(20, "--limit", min=1),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
) -> None:
    """Full-text search over every transcript."""
    limit = _sql_count(limit)
    if match_expression(query) is None:  # an empty result would read as "not found"
        raise fail(f"nothing to search for: {query!r} has no word (letters or digits); quotes and operators "
                   "such as * are not search syntax here")
    results = _run(lambda s: s.search_transcripts(query, limit=limit), reads_index=True)
    if as_json:
        print_json(results)
    else:
        print_table(results, ["session_id", "message_id", "snippet"])


def _markdown(session_id: str, messages: list[dict[str, Any]]) -> str:
    """The transcript as Markdown. Stored text is shown with its control characters escaped
    (`escape_controls`): a chat member must not be able to drive the terminal or the viewer the
    operator reads the export with (docs/behaviour.md §7)."""
    lines = [f"# Session {session_id}", ""]
    for m in messages:
        lines.append(f"**{escape_controls(m['role'])}** ({escape_controls(m['timestamp'])})")
        lines.append("")
        lines.append(escape_controls(m.get("content") or ""))
        if m.get("tool_calls"):
            lines += ["", "```json", json.dumps(m["tool_calls"], ensure_ascii=False, indent=2), "```"]
        lines.append("")
    return "\n".join(lines)


@sessions_app.command("export")
def export_cmd(
    session_id: str = typer.Argument(..., help="the session id", callback=_stored_form),
    fmt: ExportFormat = typer.Option(ExportFormat.jsonl, "--format", help="jsonl or md",
                                     parser=choice_parser(ExportFormat)),
    output: Path = typer.Option(None, "--output", "-o", help="write to this file instead of stdout"),
) -> None:
    """Export a transcript as JSON lines or Markdown."""
    _refuse_empty("hermes-gateway sessions export SESSION_ID", ("session id", session_id))

    async def work(store: SessionStore):
        if await store.session_info(session_id) is None and not await store.load_transcript(session_id):
            return None
        with progress("loading the transcript", None):
            return await store.load_transcript(session_id)

    messages = _run(work)
    if messages is None:
        raise fail(f"no session with id {session_id!r}")
    if fmt is ExportFormat.jsonl:
        parts = []
        with progress("exporting", len(messages)) as advance:
            for m in messages:
                parts.append(json.dumps(m, ensure_ascii=False) + "\n")
                advance()
        text = "".join(parts)
    else:
        text = _markdown(session_id, messages)
    if output is None:
        typer.echo(text, nl=False)
    else:
        try:
            # A transcript is personal data, kept 0600 in the home (docs/behaviour.md §3): a new
            # file is made so too. An existing one (or a device such as /dev/stdout) keeps its mode.
            fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with open(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
        except OSError as exc:
            raise fail(f"cannot write {output}: {exc.strerror or exc}") from None


@sessions_app.command("prune")
def prune_cmd(
    days: float = typer.Option(..., "--days", help="remove routes idle for more than N days (0: nothing)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="list the routes that would be removed or kept; change nothing"),
    yes: bool = typer.Option(False, "--yes", "-y", help="do not ask for confirmation"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
) -> None:
    """Remove old session routes (transcripts stay). Asks first; refused while a gateway runs."""
    if not (math.isfinite(days) and days >= 0):  # a negative age would read as "nothing", silently
        raise fail(f"--days must be a finite number of days, 0 or more (got {days:g})")

    async def work(store: SessionStore) -> tuple[list[str], dict[str, str]]:
        doomed, kept = await store.prune_candidates(days)
        if dry_run or not doomed:
            return doomed, kept
        _confirm(f"Remove {len(doomed)} session route(s) idle for more than {days:g} day(s)?", yes)
        with progress(f"pruning {len(doomed)} route(s)", None):
            return await store.prune_routes(days)

    removed, kept = _run(work, write=True, removes=True)  # on a dry run: what would be removed and kept
    # A server store keeps the routes of sessions another replica holds (docs/operations.md §5);
    # a dry run names them as the prune would, from the leases as they stand.
    kept_rows = [{"session_key": key, "reason": why} for key, why in kept.items()]
    if as_json:
        done = {"would_remove": removed} if dry_run else {"removed": len(removed)}
        typer.echo(json.dumps({**done, "kept": kept_rows}, ensure_ascii=False))
        return
    if dry_run and removed:  # with nothing to remove, the count line below says so alone
        print_table([{"session_key": key} for key in removed], ["session_key"])
    for row in kept_rows:
        typer.echo(f"kept {row['session_key']}: {row['reason']}")
    if dry_run:
        typer.echo(f"{len(removed)} session route(s) would be removed" + (f", {len(kept)} kept" if kept else "")
                   + " (dry run: nothing changed)")
    else:
        typer.echo(f"removed {len(removed)} session route(s)" + (f", kept {len(kept)}" if kept else ""))


def _removal_report(report: Any, as_json: bool, *, subject: str, **fields: Any) -> None:
    data = report.as_dict()
    if as_json:
        print_json({**data, **fields})
        return
    counts = data["counts"]
    print_table([{"kind": kind, "rows": n} for kind, n in counts.items()], ["kind", "rows"])
    verb = "would remove" if report.dry_run else "removed"
    typer.echo(f"{subject}: {verb} {len(report.sessions)} session(s) whole, trimmed {len(report.trimmed_sessions)} "
               f"shared session(s), {sum(counts.values())} row(s) and file(s) in all"
               + (" (dry run: nothing changed)" if report.dry_run else ""))


@sessions_app.command("delete")
def delete_cmd(
    session_id: str = typer.Argument(..., help="the session id", callback=_stored_form),
    dry_run: bool = typer.Option(False, "--dry-run", help="count what would be removed; change nothing"),
    yes: bool = typer.Option(False, "--yes", "-y", help="do not ask for confirmation"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
) -> None:
    """Delete one session: its transcript, index rows, obligations and, if current, its route."""
    _refuse_empty("hermes-gateway sessions delete SESSION_ID", ("session id", session_id))

    async def work(store: SessionStore):
        preview = await store.delete_session(session_id, dry_run=True)
        if preview is None or dry_run:
            return preview
        _confirm(f"Delete session {session_id} ({preview.counts.get('messages', 0)} message(s))?", yes)
        return await store.delete_session(session_id)

    report = _run(work, write=True, removes=True)
    if report is None:
        raise fail(f"no session with id {session_id!r}")
    _forget_restart_counts(report)
    _removal_report(report, as_json, subject=f"session {session_id}")


@sessions_app.command("erase-user")
def erase_user_cmd(
    platform: str = typer.Argument(..., help="the platform id, e.g. telegram", callback=_stored_form),
    user_id: str = typer.Argument(..., help="the person's user id on that platform (any of their aliases)",
                                   callback=_stored_form),
    dry_run: bool = typer.Option(False, "--dry-run", help="count what would be removed; change nothing"),
    yes: bool = typer.Option(False, "--yes", "-y", help="do not ask for confirmation"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
) -> None:
    """Erase one person's data (docs/operations.md §5).

    Their sessions, transcript rows (index included), intake, ledger rows, aliases and mirror
    entries go; in shared sessions only their turns. Exit code 1 when nothing of theirs is stored
    (said on stderr; `--json`: `found` false)."""
    # An empty id would only ever find nothing (exit 1, "nothing of  user ''"), which reads as
    # "this person has no data" when the command line is what is wrong.
    _refuse_empty("hermes-gateway sessions erase-user PLATFORM USER_ID", ("platform", platform), ("user id", user_id))

    async def work(store: SessionStore):
        preview = await store.erase_user(platform, user_id, dry_run=True)
        if dry_run:
            return preview
        if not any(preview.counts.values()):  # nothing of theirs: nothing to confirm, nothing removed
            return replace(preview, dry_run=False)
        _confirm(f"Erase {platform} user {user_id}: {len(preview.sessions)} session(s) and "
                 f"{sum(preview.counts.values())} row(s) and file(s)?", yes, names_a_person=True)
        with progress(f"erasing {platform} user data", None):
            return await store.erase_user(platform, user_id)

    report = _run(work, write=True, removes=True)
    if not any(report.counts.values()):
        # A mistyped id or platform must not read as "erased": zero counts and exit 0 would.
        # The line goes to stderr with --json too (stdout stays the report): an exit 1 in a
        # script's log must come with its reason, as every other failing command's does.
        if as_json:
            print_json({**report.as_dict(), "found": False})
        typer.echo(f"hermes-gateway: nothing of {platform} user {user_id!r} is stored (no session, message, "
                   "intake row or alias of theirs): nothing to erase", err=True)
        raise typer.Exit(EXIT_NOTHING_FOUND)
    _forget_restart_counts(report)
    _removal_report(report, as_json, subject=f"{platform} user {user_id}", found=True)


def _forget_restart_counts(report: Any) -> None:
    """Drop the removed session keys from `restart_counts.json` (docs/behaviour.md §6)."""
    if report.dry_run or not report.keys:
        return
    from ..recovery import load_restart_counts, save_restart_counts

    config = load_cli_config_or_exit(logging_on=False)
    counts = load_restart_counts(config.home)
    if set(report.keys) & set(counts):
        save_restart_counts(config.home, {k: v for k, v in counts.items() if k not in set(report.keys)})


@sessions_app.command("import")
def import_cmd(
    path: Path = typer.Argument(..., help="an existing gateway's sessions.json, or the folder holding it"),
    replace: bool = typer.Option(False, "--replace", help="overwrite routes whose key already exists"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
) -> None:
    """Import an existing gateway's sessions.json (and legacy .jsonl transcripts beside it)."""
    from ..store.importer import import_sessions_json, read_sessions_json

    read: list[tuple[Path, dict]] = []  # the file, read before the store (and so the home) is made

    async def work(store: SessionStore):
        with progress(f"importing {path}", None):
            return await import_sessions_json(store, path, replace=replace, read=read[0])

    report = _run(work, write=True, need_state=False, prepare=lambda: read.append(read_sessions_json(path)))
    if as_json:
        print_json(report.as_dict())
        return
    typer.echo(f"imported {report.imported} session(s), kept {report.skipped_existing} existing, "
               f"{report.messages} message(s) from {report.transcripts} legacy transcript(s)")
    for line in report.kept_newer:
        typer.echo(f"kept {line}")
    for line in report.skipped:
        typer.echo(f"skipped {line}")
    for line in report.warnings:
        typer.echo(f"warning {line}")
    if report.kept_original is not None:
        typer.echo(f"kept {report.kept_original}: the file as it was, with the skipped entries")


@sessions_app.command("reindex")
def reindex_cmd(
    force: bool = typer.Option(False, "--force", help="rebuild whatever the check says (when search misses "
                                                      "messages it should find)"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
) -> None:
    """Check the full-text index; rebuild it if damaged. Refused while a gateway runs.

    FTS5 `integrity-check` in its rank = 1 form (it also compares the index with the stored
    messages); a damaged index is rebuilt from the messages, none of which is changed.

    `--force` rebuilds it unchecked: the check passes an index missing terms (docs/operations.md §5)."""
    async def work(store: SessionStore) -> bool:
        with progress("rebuilding the full-text index" if force else "checking the full-text index", None):
            return await store.check_fts(force)

    rebuilt = _run(work, write=True)
    if as_json:
        typer.echo(json.dumps({"rebuilt": rebuilt}))
    elif rebuilt and force:
        typer.echo("full-text index rebuilt from the stored messages (--force: without checking it)")
    elif rebuilt:
        typer.echo("full-text index was damaged: rebuilt from the stored messages")
    else:
        typer.echo("full-text index is healthy: no rebuild needed")
