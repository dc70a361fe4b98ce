"""Send-side chunking (docs/adapters.md §0.4): split a reply into messages the platform accepts.

Rules, in order of preference:
1. a text that fits is sent whole;
2. cut after a paragraph (a blank line outside code) when that keeps the chunk at least half full;
3. otherwise cut at a line boundary;
4. a single line longer than a chunk is cut at its last whitespace, else hard (between code points).

A cut inside a fenced code block closes the fence at the end of the chunk and reopens it, with
the same info string (language tag), at the start of the next one, so every chunk renders as
code on its own. Sizes are measured in the platform's unit: `"chars"` (code points),
`"utf16"` (UTF-16 code units: Telegram counts emoji as 2) or `"bytes"` (UTF-8: Signal).
All three measures are additive over concatenation, which the packing below relies on.
"""

from __future__ import annotations

import re
from typing import Callable, Literal

LengthUnit = Literal["chars", "utf16", "bytes"]

# CommonMark fence: up to 3 spaces of indent, 3+ backticks or tildes, then the info string.
_FENCE_OPEN = re.compile(r"^ {0,3}(?P<marker>`{3,}|~{3,})(?P<info>[^\n]*)$")


def measure(text: str, unit: str = "chars") -> int:
    """Length of `text` in `unit` (`"chars"`, `"utf16"` or `"bytes"`).

    Raises:
        ValueError: unknown unit.
    """
    return _measurer(unit)(text)


def _measurer(unit: str) -> Callable[[str], int]:
    if unit == "chars":
        return len
    if unit == "utf16":
        return lambda s: len(s.encode("utf-16-le")) // 2
    if unit == "bytes":
        return lambda s: len(s.encode("utf-8"))
    raise ValueError(f"unknown length unit {unit!r}; expected 'chars', 'utf16' or 'bytes'")


class _Fence:
    """An open code fence: its marker (for the closer) and opening line (to reopen)."""

    __slots__ = ("marker", "opener")

    def __init__(self, marker: str, opener: str):
        self.marker = marker
        self.opener = opener


def _fence_states(lines: list[str]) -> list[_Fence | None]:
    """Fence open *after* each line (None outside code)."""
    states: list[_Fence | None] = []
    fence: _Fence | None = None
    for line in lines:
        body = line.rstrip("\n")
        if fence is None:
            match = _FENCE_OPEN.match(body)
            # A backtick fence's info string may not contain backticks (CommonMark).
            if match and not (match["marker"][0] == "`" and "`" in match["info"]):
                fence = _Fence(match["marker"], body.lstrip(" "))
        else:
            stripped = body.strip()
            if (stripped and set(stripped) == {fence.marker[0]}
                    and len(stripped) >= len(fence.marker)):
                fence = None
        states.append(fence)
    return states


def _split_long(line: str, budget: int, size: Callable[[str], int]) -> list[str]:
    """Cut one over-long line into pieces of at most `budget` units, preferring whitespace."""
    pieces: list[str] = []
    rest = line
    while size(rest) > budget:
        # Longest prefix (in code points) that fits: binary search, units are monotonic.
        lo, hi = 1, len(rest)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if size(rest[:mid]) <= budget:
                lo = mid
            else:
                hi = mid - 1
        cut = lo
        space = max(rest.rfind(" ", 0, cut), rest.rfind("\t", 0, cut))
        if space >= cut // 2 and space > 0:
            cut = space + 1  # keep the space at the end of the piece
        pieces.append(rest[:cut])
        rest = rest[cut:]
    if rest:
        pieces.append(rest)
    return pieces


def chunk_text(text: str, limit: int, unit: str = "chars") -> list[str]:
    """Split `text` into messages of at most `limit` units each (docs/adapters.md §0.4).

    Args:
        text: the full reply (markdown-ish; fenced code blocks are kept intact per chunk).
        limit: the platform's maximum per message, in `unit`s (AdapterSpec.max_message_length).
        unit: `"chars"`, `"utf16"` or `"bytes"` (AdapterSpec.length_unit).

    Returns:
        The chunks in order; `[]` for an empty or whitespace-only text; `[text]` when it fits.
        Trailing newlines at a cut are dropped; no chunk is whitespace-only. Every chunk is within
        `limit`, except that one code point larger than `limit` (an emoji under a 2-byte limit)
        is sent alone. Fences are repeated only when `limit` is at least twice their overhead.

    Raises:
        ValueError: `limit` is not positive, or `unit` is unknown.
    """
    if limit <= 0:
        raise ValueError(f"limit must be positive, got {limit}")
    size = _measurer(unit)
    if not text or not text.strip():
        return []
    if size(text) <= limit:
        return [text]

    raw_lines = text.splitlines(keepends=True)
    raw_states = _fence_states(raw_lines)
    overheads = [size(f.opener + "\n") + size("\n" + f.marker) for f in raw_states if f is not None]
    if overheads and limit < 2 * max(overheads):
        # Too small a limit to repeat fences in every chunk: cut as plain text instead.
        raw_states = [None] * len(raw_lines)
    # Pre-cut lines that cannot fit any chunk, given the fence overhead around them.
    lines: list[str] = []
    states: list[_Fence | None] = []
    before: _Fence | None = None
    for line, after in zip(raw_lines, raw_states):
        overhead = (size(before.opener + "\n") if before else 0) + \
                   (size("\n" + after.marker) if after else 0)
        budget = limit - overhead  # >= limit / 2 (see above)
        if size(line) > budget:
            pieces = _split_long(line, budget, size)
            lines.extend(pieces)
            # Only the last piece can close/open a fence; the others are inside the same state.
            states.extend([before] * (len(pieces) - 1) + [after])
        else:
            lines.append(line)
            states.append(after)
        before = after

    chunks: list[str] = []
    i, n = 0, len(lines)
    while i < n:
        start = states[i - 1] if i else None
        prefix = start.opener + "\n" if start else ""
        budget = limit - size(prefix)
        used = 0
        j = i
        para_cut, para_used = None, 0  # last paragraph boundary (index after blank line)
        while j < n:
            after = states[j]
            closer = size("\n" + after.marker) if after else 0
            if j > i and used + size(lines[j]) + closer > budget:
                break
            used += size(lines[j])
            j += 1
            if not lines[j - 1].strip() and states[j - 1] is None and j < n:
                para_cut, para_used = j, used
        if j < n and para_cut is not None and para_cut > i and para_used * 2 >= budget:
            j = para_cut
        body = prefix + "".join(lines[i:j])
        end_state = states[j - 1]
        if j < n and end_state is not None:
            body = (body if body.endswith("\n") else body + "\n") + end_state.marker
        body = body.rstrip("\n") if j < n else body
        if body.strip() and body.strip() != prefix.strip():
            chunks.append(body)
        i = j
    return chunks
