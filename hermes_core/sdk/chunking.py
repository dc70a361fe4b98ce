"""Send-side chunking (platforms.md §0.4). Minimal first version; the SDK issue completes it
(paragraph/line boundaries, code fences closed and reopened, platform length units)."""

from __future__ import annotations


def chunk_text(text: str, limit: int, unit: str = "chars") -> list[str]:
    """Split `text` into pieces of at most `limit` units (`chars` only in this version)."""
    if limit <= 0:
        raise ValueError("limit must be positive")
    if not text:
        return []
    return [text[i:i + limit] for i in range(0, len(text), limit)]
