"""Token usage of one agent turn (seed §2 counters)."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

from .limits import INT64_MAX

log = logging.getLogger(__name__)

_COUNTS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "total_tokens")


@dataclass(frozen=True, slots=True)
class TokenUsage:
    """Tokens (and estimated cost in USD) reported for one turn.

    `total_tokens` defaults to input + output when the backend does not report it.
    `cost_status` is `"unknown"`, `"estimated"` or `"exact"`.

    What cannot be a count is not counted: a count that is not an int in 0..`INT64_MAX` (the largest the store holds)
    (a bool, a float, 2**70, -1) becomes 0, a cost that is not a finite number ≥ 0 (NaN,
    infinity) becomes 0.0, each with a warning naming the field. The turn and its reply are
    kept, and the session's counters stay numbers that its stored entry can hold.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    total_tokens: int = 0
    estimated_cost_usd: float = 0.0
    cost_status: str = "unknown"

    def __post_init__(self) -> None:
        for name in _COUNTS:
            object.__setattr__(self, name, _count(name, getattr(self, name)))
        object.__setattr__(self, "estimated_cost_usd", _cost(self.estimated_cost_usd))
        if not self.total_tokens:
            object.__setattr__(self, "total_tokens", self.input_tokens + self.output_tokens)

    def __add__(self, other: "TokenUsage") -> "TokenUsage":
        """The usage of two requests of one turn together (counters added; the cost status is
        the weaker of the two: unknown < estimated < exact)."""
        order = ("unknown", "estimated", "exact")
        status = min(self.cost_status, other.cost_status, key=lambda s: order.index(s) if s in order else 0)
        return TokenUsage(self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens,
                          self.cache_read_tokens + other.cache_read_tokens,
                          self.cache_write_tokens + other.cache_write_tokens,
                          self.total_tokens + other.total_tokens,
                          self.estimated_cost_usd + other.estimated_cost_usd, status)


def _count(name: str, value: object) -> int:
    """`value` as a token count, or 0 (with a warning naming `name`) when it is not one."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= INT64_MAX:
        return int(value)
    log.warning("token usage field %r is %r, not a token count: counted as 0", name, value)
    return 0


def _cost(value: object) -> float:
    """`value` as a cost in USD, or 0.0 (with a warning) when it is not a finite number ≥ 0."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < math.inf:
        return float(value)
    log.warning("token usage field 'estimated_cost_usd' is %r, not a cost: counted as 0", value)
    return 0.0
