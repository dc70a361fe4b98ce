"""How the `hermes-gateway` commands print what people read: rich tables, human times, JSON.

Every command that prints a table also takes `--json` (the same rows, machine-readable, printed
with `print_json`). Tables are `rich` tables whose cells fold instead of being cut, so piping a
table into a file loses nothing; times are shown in the reader's local time zone to the second
(`2026-01-02 03:04:05`), JSON keeps the stored ISO-8601 UTC text. Progress bars (`progress`)
go to stderr and only when it is a terminal, so piped output stays clean.
"""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from datetime import datetime
from typing import Any, Iterable, Iterator, Sequence

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from ..model.text import escape_controls
from ..model.timeutil import parse_timestamp

# Width of a table that does not go to a terminal (a pipe, a file): wide enough that a session
# key and an id fit one line; longer cells fold onto the next line rather than being cut.
PIPE_WIDTH = 160


def console(*, err: bool = False) -> Console:
    """A rich console on stdout (or stderr); not a terminal → no colours, `PIPE_WIDTH` wide."""
    stream = sys.stderr if err else sys.stdout
    terminal = stream.isatty()
    return Console(file=stream, width=None if terminal else PIPE_WIDTH, no_color=not terminal,
                   highlight=False, soft_wrap=False)


def human_time(value: Any) -> str:
    """An ISO-8601 text, epoch seconds or datetime as local time to the second; "" for None,
    "-" for a value that is not a time (never an exception)."""
    if value is None or value == "":
        return ""
    try:
        moment = parse_timestamp(value)
    except (TypeError, ValueError, OverflowError):
        return "-"
    return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S") if moment else ""


def human_value(value: Any) -> str:
    """A cell: None → "", booleans → yes/no, datetimes → `human_time`, lists → comma-joined;
    text with its control, zero-width and bidi characters escaped (`escape_controls`), so stored
    names and messages cannot drive the operator's terminal (docs/behaviour.md §7)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, datetime):
        return human_time(value)
    if isinstance(value, (list, tuple)):
        return ", ".join(human_value(v) for v in value)
    return escape_controls(str(value))


def print_table(rows: Sequence[dict[str, Any]], columns: Sequence[str], *, title: str | None = None,
                times: Iterable[str] = (), empty: str = "(none)") -> None:
    """Print `rows` as an aligned table of `columns` (headers are the names with `_` → space);
    values of the `times` columns are shown with `human_time`. No rows → `empty`."""
    out = console()
    if not rows:
        out.print(empty)
        return
    time_columns = set(times)
    table = Table(title=title, show_edge=False, box=None, pad_edge=False, header_style="bold")
    for name in columns:
        table.add_column(name.replace("_", " ").upper(), overflow="fold")
    for row in rows:
        # Text cells: a stored `[word]` (a snippet's match, a sender prefix) is text, not markup.
        table.add_row(*[Text(human_time(row.get(c)) if c in time_columns else human_value(row.get(c)))
                        for c in columns])
    out.print(table)


def print_fields(fields: Sequence[tuple[str, Any]]) -> None:
    """Print `name: value` lines aligned on the colon (values through `human_value`)."""
    out = console()
    width = max((len(name) for name, _ in fields), default=0)
    for name, value in fields:
        out.print(f"{name + ':':<{width + 1}} {human_value(value)}", markup=False)


def print_json(data: Any) -> None:
    """Print `data` as indented JSON (UTF-8 kept as is)."""
    sys.stdout.write(json.dumps(data, ensure_ascii=False, indent=2, default=str) + "\n")
    sys.stdout.flush()


@contextmanager
def progress(description: str, total: int | None) -> Iterator[Any]:
    """A progress bar on stderr while the body runs; yields `advance(n=1)`. Without a terminal
    on stderr nothing is drawn (and `advance` costs nothing)."""
    if not sys.stderr.isatty():
        yield lambda n=1: None
        return
    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                   console=console(err=True), transient=True)
    with bar:
        task = bar.add_task(description, total=total)
        yield lambda n=1: bar.advance(task, n)
