"""Retry delays: exponential growth with a cap and jitter."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    initial: float = 1.0
    max: float = 3600.0
    factor: float = 2.0
    # Fraction of the delay drawn at random, so a burst of failures does not retry as one.
    jitter: float = 0.2

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait before the retry that follows failed attempt `attempt` (1-based)."""
        exponent = max(attempt - 1, 0)
        # Compare in log space first: factor ** exponent overflows for large attempts.
        base = self.max if exponent > 1000 else min(self.max, self.initial * self.factor**exponent)
        spread = base * self.jitter
        draw = (rng or random).uniform(-spread, spread)
        return float(min(self.max, max(0.0, base + draw)))
