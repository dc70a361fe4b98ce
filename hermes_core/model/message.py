"""Transcript message fields that more than one layer names (docs/behaviour.md §3 `messages`).

Kept in the model, which the agents and the store both import, so that neither imports the
other for them.
"""

from __future__ import annotations

# What reasoning models return beside the text: an agent takes these fields from a reply
# (`agents.openai_agent`), and the store keeps them as given, through rewrites, rewinds and
# compression, together as one JSON object (`messages.reasoning`), returned in this order after
# the other optional keys (`store.rows`).
REASONING_KEYS = ("reasoning", "reasoning_content", "reasoning_details", "codex_reasoning_items")
