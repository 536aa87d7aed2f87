"""The scheduler loop on the fake API server, in real time with a per-second schedule."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
from builders import NAMESPACE
from fakeapi import FakeApiServer
from harness import Shell, eventually

from cronlease.core.names.jobinfo import job_info
from cronlease.core.names.naming import format_time
from cronlease.shell.kube import JOBS, SCHEDULEDJOBS
from cronlease.shell.scheduler import Scheduler

EVERY_SECOND = "* * * * * *"


def scheduled_at(job: dict[str, Any]) -> datetime:
    slot = job_info(job).slot
    assert slot is not None
    return slot


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
    await eventually(lambda: len(shell.jobs()) >= 2, deadline=20)
    slots = sorted(int(scheduled_at(job).timestamp()) for job in shell.jobs())
    assert len(slots) == len(set(slots)), "a slot has two Jobs"
    assert slots == list(range(slots[0], slots[0] + len(slots)))  # consecutive seconds, no gap


async def test_a_failed_write_is_retried_after_a_growing_backoff(
    running: tuple[Shell, Scheduler],
) -> None:
    """A one-off whose Job exists but whose status write keeps failing makes no progress: its
    retries wait 1 s, then 2 s, and changes of its Job do not cut a wait short."""
    shell, _ = running
    shell.server.fail("PATCH", r"/status$", 500, times=1000)
    shell.create("once", schedule=None, runAt=format_time(datetime.now(UTC)))

    def patch_times() -> list[float]:
        calls = zip(shell.server.calls, shell.server.call_times, strict=True)
        return [at for (method, _), at in calls if method == "PATCH"]

    await eventually(lambda: len(patch_times()) >= 2, deadline=20)
    # The Job controller starts the Job: the model changes, and that must not bring the third
    # attempt forward.
    name = shell.jobs()[0]["metadata"]["name"]
    shell.server.edit(*JOBS, NAMESPACE, name, {"status": {"startTime": "2026-01-05T09:00:00Z"}})
    edited = shell.server.get(*JOBS, NAMESPACE, name)
    assert edited is not None
    shell.model.upsert_job(edited)
    await eventually(lambda: len(patch_times()) >= 3, deadline=20)
    gaps = [later - earlier for earlier, later in itertools.pairwise(patch_times())]
    assert gaps[0] >= 0.9  # 1 s (the first attempt created the Job: progress, so 1 s again)
    assert gaps[1] >= 1.8  # then 2 s
    assert len(shell.jobs()) == 1


async def test_an_edit_of_the_scheduledjob_itself_ends_a_backoff(
    running: tuple[Shell, Scheduler],
) -> None:
    shell, _ = running
    shell.server.fail("PATCH", r"/status$", 500, times=3)  # backs off 1, 2, then 4 s
    shell.create("once", schedule=None, runAt=format_time(datetime.now(UTC)))
    await eventually(lambda: shell.server.faults[0].times == 0, deadline=20)  # 4 s from now on
    shell.server.edit(*SCHEDULEDJOBS, NAMESPACE, "once", {"metadata": {"labels": {"a": "b"}}})
    edited = shell.server.get(*SCHEDULEDJOBS, NAMESPACE, "once")
    assert edited is not None
    shell.model.upsert_scheduledjob(edited)  # as the watch delivers it
    await eventually(lambda: "processedUntil" in shell.status("once"), deadline=2)


def one_slot_shell() -> Shell:
    """A shell that decides in real time, with one acting slot (and so one writing slot)."""

    def now() -> datetime:
        return datetime.now(UTC)

    return Shell(FakeApiServer(clock=now), clock=now, concurrency=1)


async def test_at_a_burst_higher_priorities_create_first() -> None:
    """Twelve ScheduledJobs due on the same second, with one acting slot: their first Jobs are
    created in spec.priority order, highest first; a bad priority counts as 0 and harms none."""
    shell = one_slot_shell()
    scheduler = shell.scheduler
    priorities = [3, -5, 100, 0, 7, 7, 42, -1, 1000, 2, "high", 9]
    # Created in this order; by priority the first slot's Jobs must come out sorted.
    for index, priority in enumerate(priorities):
        shell.create(f"p{index:02d}", schedule="*/5 * * * * *", priority=priority)
    task = asyncio.create_task(scheduler.run())
    valid = [priority for priority in priorities if isinstance(priority, int)]
    try:
        await eventually(lambda: len(shell.created_jobs()) >= len(valid), deadline=20)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await scheduler.drain()
    first = shell.created_jobs()[: len(valid)]
    assert len({name.rsplit("-", 1)[1] for name in first}) == 1, "one slot"
    order = [priorities[int(name[1:3])] for name in first]
    assert order == sorted(valid, reverse=True), first
    invalid = shell.status("p10")["conditions"]
    assert any(c["type"] == "InvalidSpec" and c["status"] == "True" for c in invalid)


async def test_a_burst_waits_as_keys_and_records_not_as_tasks() -> None:
    """Forty ScheduledJobs due on the same second with one acting slot and one writing slot: at
    most two reconciles run as tasks at any time (and four Event writers), the rest wait in the
    queues as keys, records and Events to write. Each slot still gets its one Job and its
    status, and every status write waits for the last creation (the keys still queued count as
    creations to come)."""
    shell = one_slot_shell()
    scheduler = shell.scheduler
    names = [f"b{index:02d}" for index in range(40)]
    for name in names:
        shell.create(name, schedule="*/5 * * * * *")
    peak = 0

    def recorded() -> bool:
        return all("lastScheduleTime" in shell.status(name) for name in names)

    async def watch_tasks() -> None:
        nonlocal peak
        while True:
            peak = max(peak, len(asyncio.all_tasks()) - before)
            await asyncio.sleep(0)

    watching = asyncio.create_task(watch_tasks())
    task = asyncio.create_task(scheduler.run())
    before = len(asyncio.all_tasks())  # this test's, the watcher and the loop
    try:
        await eventually(recorded, deadline=20)
    finally:
        task.cancel()
        watching.cancel()
        await asyncio.gather(task, watching, return_exceptions=True)
        await scheduler.drain()
    assert 0 < peak <= 2 + 4, peak
    first = shell.created_jobs()[: len(names)]
    assert sorted(name.rsplit("-", 1)[0] for name in first) == names  # one Job each
    assert len({name.rsplit("-", 1)[1] for name in first}) == 1, "one slot"
    calls = [(method, path) for method, path in shell.server.calls if method != "WATCH"]
    creates = [i for i, (method, path) in enumerate(calls) if method == "POST" and "/jobs" in path]
    statuses = [i for i, (method, path) in enumerate(calls) if path.endswith("/status")]
    assert max(creates[: len(names)]) < min(statuses), "a status write went before a creation"
