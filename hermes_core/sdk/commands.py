"""The chat commands a platform's command menu advertises (Telegram `setMyCommands`, Discord
application commands, …; docs/plugins.md): `(name, description)` pairs, names without the
slash, descriptions short enough for every menu (Telegram: 3–256 characters).

The gateway answers these (docs/behaviour.md §11); `tests/sdk/test_command_menu.py` keeps this
list in step with the commands the pipeline knows.
"""

from __future__ import annotations

COMMAND_MENU: tuple[tuple[str, str], ...] = (
    ("new", "Start a new session (the old transcript is kept), optionally titled"),
    ("reset", "The same as /new"),
    ("stop", "Stop the current reply and background work"),
    ("queue", "Run a message as its own turn after the current one"),
    ("resume", "List your recent sessions, or switch to one"),
    ("title", "Name the current session"),
    ("undo", "Remove your last turns and their replies"),
    ("retry", "Remove your last turn and send that message again"),
    ("compress", "Replace the older part of the conversation by a summary"),
    ("status", "Session key, session id, turns, tokens and queued messages"),
    ("help", "The commands"),
    ("restart", "Restart the gateway (admins only)"),
)
