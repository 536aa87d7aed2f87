"""The bounds and policies that the spec and its steps share: spec.retry (a slot's, and each
step's default), the limits the CRD's schema states too, and the error that names a bad field.
Below both `spec` and `steps`, so that neither imports the other to reach them.
"""

from __future__ import annotations

from dataclasses import dataclass

# Bounds of spec.retry and spec.deadLetter; the CRD's schema says the same at apply.
MAX_ATTEMPTS = 10
MAX_BACKOFF_SECONDS = 86_400
MAX_FACTOR = 10.0
MAX_RETENTION_SECONDS = 31_536_000
MAX_JITTER_SECONDS = 86_400
MAX_CONSECUTIVE_FAILURES = 100
MAX_BUFFER = 1000
MAX_PRIORITY = 1_000_000
DEFAULT_BUFFER = 100
DEFAULT_RETENTION_SECONDS = 7 * 86_400


@dataclass(frozen=True)
class RetryPolicy:
    """spec.retry: attempts beyond the Job's own pod retries, with a growing delay between."""

    max_attempts: int = 1
    initial_seconds: float = 10.0
    factor: float = 2.0
    max_seconds: float = 3600.0
    # How long a dead letter (a run's last attempt, all attempts failed) is kept.
    dead_letter_retention_seconds: int = DEFAULT_RETENTION_SECONDS

    def delay(self, failed_attempt: int) -> float:
        """Seconds between the end of `failed_attempt` and the start of the next one."""
        exponent = min(failed_attempt - 1, 64)  # far beyond any max; no float overflow
        return min(self.max_seconds, self.initial_seconds * self.factor**exponent)


class SpecError(ValueError):
    """A spec the operator cannot act on; the message names the field."""
