"""The chat commands a platform's command menu advertises (Telegram `setMyCommands`, Discord
application commands, …; docs/plugins.md): `(name, description)` pairs, names without the
slash, descriptions short enough for every menu (Telegram: 3–256 characters).

The gateway answers these (docs/behaviour.md §11); `tests/sdk/test_command_menu.py` keeps this
list in step with the commands the pipeline knows.
"""

from __future__ import annotations

COMMAND_MENU: tuple[tuple[str, str], ...] = (
    ("new", "Start a new session (the old transcript is kept)"),
    ("reset", "Start a new session (same as /new)"),
    ("stop", "Stop the current reply; the next message starts a new session"),
    ("queue", "Run a message as its own turn after the current one"),
    ("status", "Session, turns, tokens and queued messages"),
    ("help", "The commands"),
)
