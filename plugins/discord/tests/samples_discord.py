"""The samples of docs/adapters.md §2.1 (fixtures/*.json: gateway frame plus the channel the
adapter resolves), for the tests that drive them through the fake gateway."""

from __future__ import annotations

import json
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"


def load(name: str) -> dict:
    """A whole fixture: `{"event": …, "channel_from_cache": …, "parent_from_cache": …}`."""
    return json.loads((FIXTURES / f"{name}.json").read_text())


def sample(name: str) -> dict:
    """The `d` object of a sample's MESSAGE_CREATE (a fresh copy every call)."""
    return load(name)["event"]["d"]
