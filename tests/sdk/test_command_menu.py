"""The SDK's command menu (what platforms advertise, e.g. Telegram `setMyCommands`) names
exactly the commands the gateway answers (docs/behaviour.md §11)."""

from hermes_core.pipeline import commands
from hermes_core.sdk import COMMAND_MENU


def test_the_menu_lists_every_command_the_pipeline_answers():
    assert [name for name, _ in COMMAND_MENU] == [command.name for command in commands.COMMANDS]


def test_menu_entries_fit_the_bot_api_limits():
    # Telegram BotCommand: command 1-32 chars of a-z, 0-9 and _; description 3-256 chars.
    for name, description in COMMAND_MENU:
        assert name.isascii() and name == name.lower() and 1 <= len(name) <= 32
        assert 3 <= len(description) <= 256
