"""`hermes-gateway --help` and every command's `--help` read as written: the formatter wraps the
help text to the terminal, so a terminal wide enough shows each paragraph of a command's help,
and each option's help, on one line (no line break the source's line length put mid-sentence),
and each listing of commands shows every command's one-sentence summary on its own line."""

from __future__ import annotations

import inspect

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from hermes_core.cli.main import app

ROOT = get_command(app)


def _commands(group, path=()):
    """(path, command) of every command under `group`, the groups included."""
    for name, command in sorted(getattr(group, "commands", {}).items()):
        yield (*path, name), command
        yield from _commands(command, (*path, name))


def _help(path: tuple[str, ...]) -> list[str]:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    return result.output.splitlines()


def _as_shown(text: str) -> str:
    """Help source text as the terminal shows it: one paragraph's words, code marks dropped."""
    return " ".join(text.split()).replace("`", "")


def _on_one_line(text: str, lines: list[str]) -> bool:
    return any(_as_shown(text) in line for line in lines)


COMMANDS = [((), ROOT), *_commands(ROOT)]


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=[" ".join(p) or "hermes-gateway" for p, _ in COMMANDS])
def test_every_paragraph_of_a_commands_help_is_one_line(path, command):
    lines = _help(path)
    paragraphs = inspect.cleandoc(command.help or "").split("\n\n")
    assert paragraphs != [""], path
    for paragraph in paragraphs:
        assert _on_one_line(paragraph, lines), (path, paragraph)
    for param in command.params:
        if getattr(param, "help", None):
            assert _on_one_line(param.help, lines), (path, param.name)
    for name, sub in getattr(command, "commands", {}).items():
        summary = _as_shown(inspect.cleandoc(sub.help or "").split("\n\n")[0])
        rows = [line for line in lines if line.startswith(f"│ {name} ")]
        assert len(rows) == 1 and summary in rows[0], (path, name, rows)
        assert len(summary) < 100, (path, name)  # a summary, fitting an 80-column listing row or two


def test_the_root_listing_and_run_help_read_naturally():
    lines = _help(())
    chat = next(line for line in lines if line.startswith("│ chat "))
    assert chat.split("│")[1].split() == ["chat", *"Chat with the gateway in this terminal (the local platform).".split()]
    lines = _help(("run",))
    assert (" A stop exits 0. SIGUSR1 (or hermes-gateway restart) is a planned restart: the same drain, then exit code "
            "75 so a supervisor starts the gateway again (docs/behaviour.md §6).") in [line.rstrip() for line in lines]
    assert _help(("plugins",))[1].strip() == "Usage: hermes-gateway plugins [OPTIONS]"
