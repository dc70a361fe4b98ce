"""Slack platform plugin for hermes_core."""
__version__ = "0.1.0"
