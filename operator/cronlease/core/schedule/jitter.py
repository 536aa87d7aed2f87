"""spec.jitterSeconds: each slot's run starts a little after the slot, by a delay that depends
only on (namespace, name, slot), so every replica and every restart computes the same one.

The delay is below the gap to the next slot, so the started instants keep the slots' order and a
slot's run never starts after the next slot: the cursor, catch-up and the concurrency policy see
the same sequence of slots as without jitter. The Job keeps the nominal slot in its name, its
annotation and CRONLEASE_SCHEDULED_AT (the idempotency key does not move); only the instant it is
created at, and the lag measured from it, move. Temporal and kubernetes/community#2440 spread
thousands of same-second schedules this way.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta

# Jitter has millisecond resolution: a burst of thousands of slots on one second spreads over
# its window instead of landing on whole seconds.
_RESOLUTION = timedelta(milliseconds=1)


def jitter(
    namespace: str, name: str, slot: datetime, jitter_seconds: int, gap: timedelta | None
) -> timedelta:
    """The delay of `slot`'s run: in [0, jitter_seconds) and below `gap` (to the next slot, None
    if there is none), uniform over (namespace, name, slot)."""
    window = timedelta(seconds=jitter_seconds)
    if gap is not None:
        window = min(window, gap - _RESOLUTION)
    steps = window // _RESOLUTION
    if steps <= 0:
        return timedelta(0)
    key = f"{namespace}/{name}/{int(slot.timestamp())}".encode()
    digest = int.from_bytes(hashlib.sha256(key).digest()[:8], "big")
    return (digest % steps) * _RESOLUTION
