"""Hook implementations of the Slack plugin (entry point `hermes_core.plugins: slack`).

* `hermes_settings_schema`: the `[platforms.slack]` table → `SlackSettings`.
* `hermes_platform_notes`: Slack lines for the session-context prompt (seed §9, docs/behaviour.md §7):
  formatting, mention syntax, what the agent cannot see, where the conversation lives.

Session keys need no Slack hook: the core's default key rule applies to the SessionSource the
mapping builds (docs/adapters.md §3.0), and Slack ids never change form. No `tryfirst`: that is
reserved for deployments.
"""

from __future__ import annotations

from hermes_core.sdk import SettingsSpec, hookimpl

from .settings import SlackSettings

HERMES_API = 1
PLATFORM = "slack"


@hookimpl
def hermes_settings_schema():
    """The `[platforms.slack]` table is validated into `SlackSettings`."""
    return [SettingsSpec(PLATFORM, SlackSettings)]


@hookimpl
def hermes_platform_notes(context):
    """Context lines for Slack sessions; None for other platforms."""
    source = getattr(context, "source", None)
    if source is None or getattr(source, "platform", None) != PLATFORM:
        return None
    notes = [
        "Platform: Slack. Replies use Slack mrkdwn: *bold*, _italic_, ~strike~, `code`, ``` blocks; "
        "long replies are split into messages of up to 4000 characters.",
        "Mention a person as <@USER_ID> (ids as they appear in messages); @here and @channel are not sent.",
        "You see only the messages addressed to you; you cannot read the channel history, pins or "
        "files unless a tool for it is loaded.",
        # The per-turn message id is neither in this prompt (which stays the same from turn to
        # turn) nor in the messages the agent gets; say so, so the agent does not invent one.
        "Message ids (Slack ts values) are not shown to you; your reply goes into the thread of the "
        "message you are answering, or inline where there is no thread.",
    ]
    chat_type = getattr(source, "chat_type", None)
    if chat_type != "dm" and getattr(source, "thread_id", None):
        notes.append("This conversation is a Slack thread; everyone who replies in it shares it.")
    elif chat_type == "group":
        notes.append("This is a group DM: answer when you are mentioned.")
    return notes
