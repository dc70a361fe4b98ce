"""Hook implementations of the WhatsApp plugin (entry point `hermes_core.plugins: whatsapp`).

* `hermes_settings_schema`: `[platforms.whatsapp]` → `WhatsAppSettings`, `[platforms.whatsapp_cloud]`
  → `WhatsAppCloudSettings`.
* `hermes_platform_notes`: WhatsApp lines for the session-context prompt (seed §9, docs/behaviour.md §7).

LID ↔ phone (bridge) and phone ↔ business-scoped id (Cloud) folding for keys and pseudonyms is
the core's: the adapters report the aliases they see and the core's `hermes_canonical_identity`
follows them, then applies the WhatsApp id rule to `whatsapp` ids.
"""

from __future__ import annotations

from hermes_core.sdk import SettingsSpec, hookimpl

from .settings import WhatsAppCloudSettings, WhatsAppSettings

HERMES_API = 1
PLATFORMS = ("whatsapp", "whatsapp_cloud")


@hookimpl
def hermes_settings_schema():
    """The bridge's and the Cloud API's tables."""
    return [SettingsSpec("whatsapp", WhatsAppSettings), SettingsSpec("whatsapp_cloud", WhatsAppCloudSettings)]


@hookimpl
def hermes_platform_notes(context):
    """Context lines for WhatsApp sessions (either transport): what the agent can and cannot do."""
    source = getattr(context, "source", None)
    platform = getattr(source, "platform", None)
    if platform not in PLATFORMS:
        return None
    notes = [
        "Platform: WhatsApp. Replies are plain text with WhatsApp's own markup (*bold*, _italic_, "
        "~strike~, ```code```); Markdown headings, tables and links in brackets are shown literally. "
        "Replies longer than 4096 characters are split into several messages.",
        "You cannot read the chat's history, search it, or see media, reactions or status updates "
        "beyond what is in this conversation; quoting a message is a reply, not a thread.",
    ]
    if platform == "whatsapp_cloud":
        notes.append("This is a WhatsApp Business number: you can only answer within 24 hours of the "
                     "user's last message; after that a reply cannot be delivered.")
    if getattr(source, "chat_type", None) == "group":
        notes.append("This is a WhatsApp group: every member sees your replies. Members are mentioned "
                     "as @ followed by their number; you cannot mention people yourself.")
    return notes
