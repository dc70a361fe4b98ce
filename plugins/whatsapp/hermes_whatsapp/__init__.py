"""WhatsApp platform plugin for hermes_core (distribution `hermes-gateway-whatsapp`).

Two transports, two platforms (docs/adapters.md §4, §0.3 item 13):

* `whatsapp` — a local bridge process (Baileys or whatsmeow) holding a linked-device session,
  spoken to over JSON/HTTP at `bridge_url` (`WhatsAppAdapter`);
* `whatsapp_cloud` — Meta's WhatsApp Cloud API: signed webhooks in, Graph API sends out
  (`WhatsAppCloudAdapter`). Its own platform value keeps the JID canonicalisation of the key
  builder away from business-scoped user ids.

Modules:
    fields          typed access to payload fields (MalformedPayload names the field)
    jid             JID anatomy: servers, chats that are never turns, LID ↔ phone aliases
    bridge_mapping  pure bridge event → (SessionSource, MessageEvent) mapping (W1–W4)
    cloud_mapping   pure Cloud webhook → events and status reports mapping (W5–W7)
    settings        the `[platforms.whatsapp]` and `[platforms.whatsapp_cloud]` models
    bridge          the bridge's HTTP client and its `lid-mapping-*.json` session files
    bridge_adapter  `WhatsAppAdapter` (`hermes_core.adapters: whatsapp`)
    graph           the Graph API client and the reading of its errors
    webhook         the Cloud webhook listener (aiohttp): handshake and signature check
    cloud_adapter   `WhatsAppCloudAdapter` (`hermes_core.adapters: whatsapp_cloud`)
    hooks           the `hermes_core.plugins` entry point (hookimpls, `HERMES_API = 1`)
"""

__version__ = "0.1.0"
