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
