"""`hermes-gateway sessions …`: inspect and manage stored sessions.

Read-only commands (list, show, search, export) open the store without the home lock, so they
work beside a running gateway. Writing commands (prune, import, reindex) take the lock and refuse
with one clear line while a gateway holds the home. Every command but `import` refuses a home
without `state.db` ("no gateway state at …") instead of creating an empty store there. Config loading and errors are the CLI's own
(`cli/common.py`): `hermes-gateway: error: <one line>` on stderr and exit 2, never a traceback.
"""

from __future__ import annotations

import json
import sqlite3
from enum import Enum
from pathlib import Path
from typing import Any, Awaitable, Callable

import typer

from ..model import SessionEntry, format_timestamp
from ..store import HomeLockedError, SessionStore, StoreError, TranscriptReadError
from ..store.home_lock import home_is_locked
from .common import fail, load_cli_config_or_exit, quiet_terminal_logging, run_async, setup_logging

sessions_app = typer.Typer(help="Inspect and manage stored sessions.", no_args_is_help=True)

_EXPECTED = (StoreError, HomeLockedError, TranscriptReadError, sqlite3.Error, OSError, ValueError)


class ExportFormat(str, Enum):
    jsonl = "jsonl"
    md = "md"


def _run(work: Callable[[SessionStore], Awaitable[Any]], *, write: bool = False,
         need_state: bool = True) -> Any:
    """Load the config (the CLI's one loader), open the store (locked for writes), run `work`,
    close. Every failure is the CLI's one error line and exit 2.

    With `need_state` (every command but `import`) a home without `state.db` is refused before
    anything is opened: a mistyped HERMES_HOME must not get an empty store created in it."""
    # No stderr logging set-up: the commands print their own report (skipped entries included).
    config = load_cli_config_or_exit(logging_on=False)
    if need_state and not config.db_path.is_file():
        raise fail(f"no gateway state at {config.home} (state.db not found at {config.db_path})")
    # The commands print their own report: warnings go to gateway.log (writes) or nowhere
    # (reads: a read-only command writes nothing into the home), never twice on the terminal.
    if write:
        setup_logging(config.home, terminal=False)
    else:
        quiet_terminal_logging()
    if write:
        pid = home_is_locked(config.home)
        if pid is not None:
            holder = f" (pid {pid})" if pid else ""
            raise fail(f"a gateway is running on HERMES_HOME {config.home}{holder}; stop it first")

    async def main() -> Any:
        store = SessionStore(config.sessions_dir, config, lock_home=write)
        await store.open()
        try:
            return await work(store)
        finally:
            await store.close()

    return run_async(main, expected=_EXPECTED)


def _entry_row(entry: SessionEntry) -> dict[str, Any]:
    return {"session_key": entry.session_key, "session_id": entry.session_id,
            "updated_at": format_timestamp(entry.updated_at), "platform": entry.platform,
            "chat_type": entry.chat_type, "display_name": entry.display_name,
            "total_tokens": entry.total_tokens, "suspended": entry.suspended,
            "resume_pending": entry.resume_pending}


def _table(rows: list[dict[str, Any]], columns: list[str]) -> None:
    if not rows:
        typer.echo("(none)")
        return
    cells = [[("" if r.get(c) is None else str(r.get(c))) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    typer.echo("  ".join(c.upper().ljust(w) for c, w in zip(columns, widths)).rstrip())
    for row in cells:
        typer.echo("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())


@sessions_app.command("list")
def list_cmd(
    active_minutes: int = typer.Option(None, "--active-minutes", help="only sessions active in the last N minutes"),
    limit: int = typer.Option(50, "--limit", min=1, help="at most this many rows"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
) -> None:
    """List session entries, most recently active first."""
    entries = _run(lambda s: s.list_sessions(active_minutes))
    rows = [_entry_row(e) for e in entries[:limit]]
    if as_json:
        typer.echo(json.dumps(rows, ensure_ascii=False, indent=2))
    else:
        _table(rows, ["session_key", "session_id", "updated_at", "total_tokens"])


async def _resolve(store: SessionStore, key_or_id: str) -> SessionEntry | None:
    entry = await store.get_entry(key_or_id)
    if entry is None and "/" not in key_or_id and "\\" not in key_or_id and ".." not in key_or_id:
        entry = await store.lookup_by_session_id(key_or_id)
    return entry


@sessions_app.command("show")
def show_cmd(
    key_or_id: str = typer.Argument(..., help="a session key or a session id"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
) -> None:
    """Show one session entry and its transcript."""
    async def work(store: SessionStore):
        entry = await _resolve(store, key_or_id)
        if entry is None:
            return None, []
        return entry, await store.load_transcript(entry.session_id)

    entry, messages = _run(work)
    if entry is None:
        raise fail(f"no session with key or id {key_or_id!r}")
    if as_json:
        typer.echo(json.dumps({"entry": entry.to_dict(), "messages": messages}, ensure_ascii=False, indent=2))
        return
    for name, value in entry.to_dict().items():
        if name != "origin":
            typer.echo(f"{name}: {value}")
    if entry.origin is not None:
        typer.echo(f"origin: {entry.origin.description}")
    typer.echo(f"messages: {len(messages)}")
    for m in messages:
        typer.echo(f"  [{m['timestamp']}] {m['role']}: {m.get('content') or ''}")


@sessions_app.command("search")
def search_cmd(
    query: str = typer.Argument(..., help="words to find (all must match)"),
    limit: int = typer.Option(20, "--limit", min=1),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
) -> None:
    """Full-text search over every transcript."""
    results = _run(lambda s: s.search_transcripts(query, limit=limit))
    if as_json:
        typer.echo(json.dumps(results, ensure_ascii=False, indent=2))
    else:
        _table(results, ["session_id", "message_id", "snippet"])


def _markdown(session_id: str, messages: list[dict[str, Any]]) -> str:
    lines = [f"# Session {session_id}", ""]
    for m in messages:
        lines.append(f"**{m['role']}** ({m['timestamp']})")
        lines.append("")
        lines.append(m.get("content") or "")
        if m.get("tool_calls"):
            lines += ["", "```json", json.dumps(m["tool_calls"], ensure_ascii=False, indent=2), "```"]
        lines.append("")
    return "\n".join(lines)


@sessions_app.command("export")
def export_cmd(
    session_id: str = typer.Argument(..., help="the session id"),
    fmt: ExportFormat = typer.Option(ExportFormat.jsonl, "--format", help="jsonl or md"),
    output: Path = typer.Option(None, "--output", "-o", help="write to this file instead of stdout"),
) -> None:
    """Export a transcript as JSON lines or Markdown."""
    async def work(store: SessionStore):
        if await store.session_info(session_id) is None and not await store.load_transcript(session_id):
            return None
        return await store.load_transcript(session_id)

    messages = _run(work)
    if messages is None:
        raise fail(f"no session with id {session_id!r}")
    if fmt is ExportFormat.jsonl:
        text = "".join(json.dumps(m, ensure_ascii=False) + "\n" for m in messages)
    else:
        text = _markdown(session_id, messages)
    if output is None:
        typer.echo(text, nl=False)
    else:
        try:
            output.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise fail(f"cannot write {output}: {exc.strerror or exc}") from None


@sessions_app.command("prune")
def prune_cmd(
    days: float = typer.Option(..., "--days", help="remove routes idle for more than N days (<= 0: nothing)"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
) -> None:
    """Remove old session routes (transcripts stay). Refused while a gateway runs."""
    removed = _run(lambda s: s.prune_old_entries(days), write=True)
    if as_json:
        typer.echo(json.dumps({"removed": removed}))
    else:
        typer.echo(f"removed {removed} session route(s)")


@sessions_app.command("import")
def import_cmd(
    path: Path = typer.Argument(..., help="an existing gateway's sessions.json, or the folder holding it"),
    replace: bool = typer.Option(False, "--replace", help="overwrite routes whose key already exists"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
) -> None:
    """Import an existing gateway's sessions.json (and legacy .jsonl transcripts beside it)."""
    from ..store.importer import import_sessions_json

    report = _run(lambda s: import_sessions_json(s, path, replace=replace), write=True, need_state=False)
    if as_json:
        typer.echo(json.dumps(report.as_dict(), ensure_ascii=False, indent=2))
        return
    typer.echo(f"imported {report.imported} session(s), kept {report.skipped_existing} existing, "
               f"{report.messages} message(s) from {report.transcripts} legacy transcript(s)")
    for line in report.skipped:
        typer.echo(f"skipped {line}")
    for line in report.warnings:
        typer.echo(f"warning {line}")


@sessions_app.command("reindex")
def reindex_cmd(
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
) -> None:
    """Check the full-text index; rebuild it if damaged. Refused while a gateway runs.

    FTS5 `integrity-check` in its rank = 1 form (it also compares the index with the stored
    messages); a damaged index is rebuilt from the messages, none of which is changed."""
    async def work(store: SessionStore) -> bool:
        if store.degraded:
            raise StoreError(store.degraded_reason or "state.db cannot be opened; nothing to reindex")
        return await store.check_fts()

    rebuilt = _run(work, write=True)
    if as_json:
        typer.echo(json.dumps({"rebuilt": rebuilt}))
    elif rebuilt:
        typer.echo("full-text index was damaged: rebuilt from the stored messages")
    else:
        typer.echo("full-text index is healthy: no rebuild needed")
