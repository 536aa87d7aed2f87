"""A queue worked by a bounded pool of tasks: at a burst, what waits is an item, not a task.

A leaf module. The scheduler's reconciles and the applier's Events used to be a task each: at a
burst of 5,000 ScheduledJobs, thousands of tasks waited for a few slots, each with its
coroutine frames (3.2 KB for a reconcile), born and freed among the model's long-lived objects
(decision 0014; design note 103). Here items wait in a deque, and at most `size` workers take
them one at a time, first in, first out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from typing import Generic, TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")


class WorkPool(Generic[T]):
    def __init__(
        self,
        size: int,
        work: Callable[[T], Awaitable[None]],
        held: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext,
    ) -> None:
        """`work` handles its own failures (a bug is logged, and the worker goes on); `held` is
        entered for each worker's whole life, from before its first item to after its last."""
        self.size = size
        self._work = work
        self._held = held
        self._queue: deque[T] = deque()
        self._busy = 0  # counted in the worker itself: a put never misses one that is ending
        self._workers: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        """Items waiting for a worker."""
        return len(self._queue)

    def put(self, item: T) -> None:
        self._queue.append(item)
        if self._busy < self.size:
            # The new worker takes its first item now: an item alone never waits behind a
            # worker busy with another.
            self._busy += 1
            task = asyncio.create_task(self._worker(self._queue.popleft()))
            self._workers.add(task)
            task.add_done_callback(self._workers.discard)

    async def _worker(self, item: T) -> None:
        try:
            with self._held():
                while True:
                    try:
                        await self._work(item)
                    except Exception:  # a bug in `work`: the item is lost, not the worker
                        log.exception("work on %r failed", item)
                    if not self._queue:
                        break
                    item = self._queue.popleft()
        finally:
            self._busy -= 1

    async def drain(self) -> None:
        """Until no item waits and no worker runs (work may put more meanwhile)."""
        while self._workers:
            await asyncio.gather(*self._workers, return_exceptions=True)
