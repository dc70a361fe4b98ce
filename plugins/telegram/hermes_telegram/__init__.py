"""Telegram platform plugin for hermes_core (distribution `hermes-gateway-telegram`).

Modules:
    mapping   pure raw-update → (SessionSource, MessageEvent) mapping (docs/adapters.md §1.0)
    settings  the `[platforms.telegram]` model (`TelegramSettings`)
    aliases   group → supergroup migration aliases (docs/adapters.md TG-T6)
    format    MarkdownV2 rendering of agent text
    adapter   `TelegramAdapter` on python-telegram-bot 22.x (polling and webhook)
    hooks     the `hermes_core.plugins` entry point (hookimpls, `HERMES_API = 1`)
"""

__version__ = "0.1.0"
