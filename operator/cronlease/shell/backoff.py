"""The one backoff policy: exponential from `first`, doubling, capped at `cap`.

Everything that retries (a failed reconcile, a broken watch, a write the
fencing policy refused while its cache lags) waits this way, each with its own first step and cap.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Backoff:
    first: float
    cap: float

    def delay(self, failures: int) -> float:
        """The wait after `failures` consecutive failures (1 for the first)."""
        return min(self.first * 2.0 ** max(failures - 1, 0), self.cap)


# A reconcile that failed: 1 s, 2 s, ... 60 s.
RECONCILE = Backoff(1.0, 60.0)
# A watch or a listing that broke: 0.5 s, 1 s, ... 10 s (an API server restart takes seconds).
WATCH = Backoff(0.5, 10.0)
# A write the fencing policy refused although we hold the Lease: its cache lags by milliseconds.
FENCING = Backoff(0.05, 1.6)
