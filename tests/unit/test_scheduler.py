"""The scheduler loop on the fake API server, in real time with a per-second schedule."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
from fakeapi import FakeApiServer
from shell import Shell, eventually

from cronlease.scheduler import Scheduler

EVERY_SECOND = "* * * * * *"


@pytest.fixture
async def running() -> AsyncIterator[tuple[Shell, Scheduler]]:
    shell = Shell(FakeApiServer(clock=lambda: datetime.now(UTC)))
    listed = asyncio.Event()
    listed.set()  # no Jobs to list
    scheduler = Scheduler(shell.api, shell.leadership, shell.model, shell.wakeups, listed)
    task = asyncio.create_task(scheduler.run())
    yield shell, scheduler
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await scheduler.drain()


async def test_each_slot_gets_one_job_as_it_falls_due(running: tuple[Shell, Scheduler]) -> None:
    shell, _ = running
    shell.create("ticker", schedule=EVERY_SECOND)
    await eventually(lambda: len(shell.jobs()) >= 2, deadline=5)
    names = [job["metadata"]["name"] for job in shell.jobs()]
    assert len(names) == len(set(names))
    slots = sorted(int(name.rsplit("-", 1)[1]) for name in names)
    assert slots == list(range(slots[0], slots[0] + len(slots)))  # consecutive seconds, no gap


async def test_a_failed_write_is_retried_after_a_growing_backoff(
    running: tuple[Shell, Scheduler],
) -> None:
    shell, _ = running
    shell.server.fail("PATCH", r"/status$", 500, times=1000)
    shell.create("ticker", schedule=EVERY_SECOND)

    def patch_times() -> list[float]:
        calls = zip(shell.server.calls, shell.server.call_times, strict=True)
        return [at for (method, _), at in calls if method == "PATCH"]

    await eventually(lambda: len(patch_times()) >= 3, deadline=10)
    gaps = [later - earlier for earlier, later in itertools.pairwise(patch_times())]
    # 1 s, then 2 s: each attempt creates a Job for the current slot, which changes the model,
    # and that must not bring the retry forward.
    assert gaps[0] >= 0.9
    assert gaps[1] >= 1.8
