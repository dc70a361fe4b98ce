"""Token usage of one agent turn (seed §2 counters)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TokenUsage:
    """Tokens (and estimated cost in USD) reported for one turn.

    `total_tokens` defaults to input + output when the backend does not report it.
    `cost_status` is `"unknown"`, `"estimated"` or `"exact"`.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    total_tokens: int = 0
    estimated_cost_usd: float = 0.0
    cost_status: str = "unknown"

    def __post_init__(self) -> None:
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
