"""A burst through S shard leaders and one API server, in simulated time (docs/scaling.md).

N slots are due at one instant. Each belongs to a ScheduledJob in some namespace, and each
namespace to the shard its name hashes to (`shard_of`, as docs/scaling.md proposes). A shard's
leader runs on a core of its own and handles its slots one after another: per slot it spends
that slot's decision time (the pure core, measured by the caller) plus `overhead`, the rest of
its measured cost per created Job (HTTP client, model, Event, collector), then sends the create.
It keeps at most `in_flight` creates outstanding, as the operator's acting slots do. The API
server creates Jobs one after another at `rate` per second, first come first served across
shards. A Job's lag is when its create completes, counted from the slot.

What it leaves out, on purpose: the writes after the creations (status, release, Events), which
the operator defers until a burst's creations are done (design note 12), and the Job's own
writes (its status, its pods), which come after its creation.
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from percentiles import nearest_rank


def shard_of(namespace: str, shards: int) -> int:
    """The shard that owns `namespace`: the first 8 bytes of its name's SHA-256, mod `shards`."""
    digest = hashlib.sha256(namespace.encode()).digest()
    return int.from_bytes(digest[:8], "big") % shards


@dataclass(frozen=True)
class Slot:
    namespace: str
    decide_seconds: float  # the pure core's time for this slot: decide + build the Job


@dataclass(frozen=True)
class Leader:
    overhead: float  # seconds of leader CPU per created Job beyond the decision
    in_flight: int = 64  # creates outstanding at once


def simulate(slots: Sequence[Slot], shards: int, leader: Leader, rate: float) -> list[float]:
    """Each slot's lag (seconds from the slot to its Job's creation), in no particular order."""
    queues: list[list[Slot]] = [[] for _ in range(shards)]
    for slot in slots:
        queues[shard_of(slot.namespace, shards)].append(slot)
    # Per shard: the completion times of its creates so far (for the in-flight limit), and the
    # index of its next slot. The heap orders the shards' next creates by the time they are
    # sent, so the API server serves them first come, first served.
    done: list[list[float]] = [[] for _ in range(shards)]
    ready: list[tuple[float, int]] = []
    for shard, queue in enumerate(queues):
        if queue:
            heapq.heappush(ready, (queue[0].decide_seconds + leader.overhead, shard))
    server_free = 0.0
    service = 1.0 / rate
    lags: list[float] = []
    while ready:
        sent, shard = heapq.heappop(ready)
        finished = max(sent, server_free) + service
        server_free = finished
        done[shard].append(finished)
        lags.append(finished)
        sent_so_far = len(done[shard])
        if sent_so_far == len(queues[shard]):
            continue
        # The next slot starts once the leader is free and a create slot is: the create sent
        # `in_flight` creates ago has completed.
        start = sent
        if sent_so_far >= leader.in_flight:
            start = max(start, done[shard][sent_so_far - leader.in_flight])
        following = queues[shard][sent_so_far]
        heapq.heappush(ready, (start + following.decide_seconds + leader.overhead, shard))
    return lags


def largest_burst(
    make_slots: Callable[[int], Sequence[Slot]],
    shards: int,
    leader: Leader,
    rate: float,
    p99_limit: float = 1.0,
    ceiling: int = 1_000_000,
) -> int:
    """The largest N whose p99 lag stays within `p99_limit` (a bisection: the lag grows with
    N); `ceiling` if even that does."""

    def fits(n: int) -> bool:
        return nearest_rank(simulate(make_slots(n), shards, leader, rate), 0.99) <= p99_limit

    low, high = 1, 2
    while high < ceiling and fits(high):
        low, high = high, min(ceiling, high * 2)
    if high == ceiling and fits(high):
        return ceiling
    while high - low > 1:
        middle = (low + high) // 2
        if fits(middle):
            low = middle
        else:
            high = middle
    return low
