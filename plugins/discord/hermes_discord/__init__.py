"""Discord platform plugin for hermes_core (distribution `hermes-gateway-discord`).

Modules:
    payload   typed reads of Discord JSON that name the offending field (`MalformedPayload`)
    channels  `ChannelInfo`: the channel facts the mapping needs (raw payload or discord.py object)
    mapping   pure MESSAGE_CREATE → (SessionSource, MessageEvent) mapping (docs/adapters.md §2.0)
    settings  the `[platforms.discord]` model (`DiscordSettings`)
    receiver  gateway dispatch → channel resolution → mapping → `emit`, in order
    sender    replies: thread-first target, safe reply references, no pings, rate limits
    adapter   `DiscordAdapter` on discord.py 2.x (login, gateway connection, lifecycle)
    hooks     the `hermes_core.plugins` entry point (hookimpls, `HERMES_API = 1`)
"""

__version__ = "0.1.0"
