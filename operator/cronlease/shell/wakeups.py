"""When each ScheduledJob is next due: a heap of (instant, key), with capped sleeps.

A leaf module. The scheduler plans a wake-up per ScheduledJob (its next slot, a retry, or now
when the model changes); an earlier plan replaces a later one, except that a retry's backoff is
a floor that only a change of the object itself lifts. Sleeps are capped so that a jump of the
host clock is noticed within `cap` seconds. A paused queue (a standby's) keeps nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import time
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class WakeupQueue(Generic[K]):
    def __init__(self, cap: float = 5.0, clock: Callable[[], float] = time.time) -> None:
        self.cap = cap
        self._clock = clock
        self._heap: list[tuple[float, int, K]] = []
        self._planned: dict[K, float] = {}
        self._not_before: dict[K, float] = {}  # backoffs: no wake-up before these
        self._sequence = itertools.count()  # ties never compare keys
        self._changed = asyncio.Event()
        self._paused = False

    def pause(self) -> None:
        """Forget every plan and take none until resumed: a standby keeps no wake-up (its model
        is what a new leader derives them from)."""
        self._paused = True
        self._heap.clear()
        self._planned.clear()
        self._not_before.clear()

    def resume(self) -> None:
        self._paused = False

    @property
    def paused(self) -> bool:
        return self._paused

    def __len__(self) -> int:
        """Keys with a plan."""
        return len(self._planned)

    def notify(self, key: K, at: float | None = None) -> None:
        """Wake `key` at `at` (epoch seconds), or now; an earlier plan wins, but nothing wakes a
        key before its backoff has passed (one of its Jobs changing must not cut a retry short)."""
        when = max(self._clock() if at is None else at, self._not_before.get(key, 0.0))
        planned = self._planned.get(key)
        if planned is None or when < planned:
            self._plan(key, when)

    def changed(self, key: K) -> None:
        """The object itself changed (a user's edit, say): wake it now, backoff or not."""
        self._not_before.pop(key, None)
        self.notify(key)

    def back_off(self, key: K, delay: float) -> None:
        """Wake `key` after `delay` seconds and not before, whatever was planned, unless the
        object itself changes meanwhile."""
        if self._paused:
            return
        when = self._not_before[key] = self._clock() + delay
        self._plan(key, when)

    def _plan(self, key: K, when: float) -> None:
        if self._paused:
            return
        self._planned[key] = when
        heapq.heappush(self._heap, (when, next(self._sequence), key))
        self._changed.set()

    def pop_due(self) -> list[K]:
        """The keys due by now, each once, in the order they fell due."""
        now, due = self._clock(), []
        while self._heap and self._heap[0][0] <= now:
            when, _, key = heapq.heappop(self._heap)
            if self._planned.get(key) == when:  # else superseded by an earlier plan
                del self._planned[key]
                self._not_before.pop(key, None)
                due.append(key)
        return due

    def next_at(self) -> float | None:
        """The earliest instant a key is planned for (superseded entries dropped on the way)."""
        while self._heap:
            when, _, key = self._heap[0]
            if self._planned.get(key) == when:
                return when
            heapq.heappop(self._heap)
        return None

    def now(self) -> float:
        return self._clock()

    def planned_between(self, after: float, until: float) -> list[tuple[K, float]]:
        """The keys planned for after `after` and at or before `until`, each with its instant, in
        the order they fall due (a pass over every plan: a caller does it once per window it
        prepares, not per wake-up)."""
        found = [(key, when) for key, when in self._planned.items() if after < when <= until]
        return sorted(found, key=lambda item: item[1])

    async def wait(self, early: float = 0.0) -> None:
        """Until `early` seconds before the head is due, a new plan arrives, or `cap` seconds
        pass."""
        head = self.next_at()
        delay = self.cap if head is None else min(head - early - self._clock(), self.cap)
        self._changed.clear()
        if delay > 0:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._changed.wait()
