"""Discord platform plugin for hermes_core (distribution `hermes-gateway-discord`)."""

__version__ = "0.1.0"
