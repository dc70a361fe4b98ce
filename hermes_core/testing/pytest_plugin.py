"""pytest11 entry point of the hermes_core test kit: fixtures for plugin authors."""

from __future__ import annotations
