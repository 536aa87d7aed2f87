"""The bounded pool of workers over a queue that bursts wait in (cronlease.shell.workpool)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

import pytest

from cronlease.shell.workpool import WorkPool


async def test_at_most_size_workers_take_every_item_first_in_first_out() -> None:
    started: list[int] = []
    running = peak = 0
    gate = asyncio.Event()

    async def work(item: int) -> None:
        nonlocal running, peak
        started.append(item)
        running += 1
        peak = max(peak, running)
        await gate.wait()
        running -= 1

    pool = WorkPool(3, work)
    for item in range(20):
        pool.put(item)
    await asyncio.sleep(0)
    assert (started, len(pool)) == ([0, 1, 2], 17)  # the rest wait as items
    gate.set()
    await asyncio.wait_for(pool.drain(), 5)
    assert started == list(range(20))
    assert peak == 3


async def test_an_item_alone_does_not_wait_behind_a_busy_worker() -> None:
    blocked, done = asyncio.Event(), asyncio.Event()

    async def work(item: str) -> None:
        if item == "slow":
            await blocked.wait()
        else:
            done.set()

    pool = WorkPool(2, work)
    pool.put("slow")
    await asyncio.sleep(0)
    pool.put("quick")
    await asyncio.wait_for(done.wait(), 1)
    blocked.set()
    await pool.drain()


async def test_a_failing_item_is_logged_and_the_worker_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    worked: list[int] = []

    async def work(item: int) -> None:
        if item == 1:
            raise RuntimeError("a bug")
        worked.append(item)

    pool = WorkPool(1, work)
    for item in range(3):
        pool.put(item)
    await asyncio.wait_for(pool.drain(), 5)
    assert worked == [0, 2]
    assert "a bug" in caplog.text


async def test_held_spans_a_worker_life_from_its_first_item_to_its_last() -> None:
    """What the scheduler's actors rely on: while keys still wait, the pool holds on."""
    entered: list[str] = []
    holding = 0
    seen: list[int] = []

    @contextlib.contextmanager
    def held() -> Iterator[None]:
        nonlocal holding
        entered.append("enter")
        holding += 1
        try:
            yield
        finally:
            holding -= 1

    async def work(item: int) -> None:
        seen.append(holding)
        await asyncio.sleep(0)

    pool = WorkPool(1, work, held=held)
    for item in range(5):
        pool.put(item)
    await asyncio.wait_for(pool.drain(), 5)
    assert entered == ["enter"]
    assert seen == [1] * 5
    assert holding == 0
