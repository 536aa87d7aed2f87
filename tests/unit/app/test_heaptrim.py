"""The heap trim: glibc's free pages below live objects go back to the kernel."""

from __future__ import annotations

import asyncio

import pytest

from cronlease.app.heaptrim import heap_trimmer, trim_forever

PAGE = 4096


def resident_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * PAGE / 2**20


def test_a_trim_returns_the_free_pages_a_burst_left_below_live_objects() -> None:
    """What a burst leaves: many malloc'd objects (over pymalloc's 512 bytes, under glibc's mmap
    threshold), most of them freed, one in 16 kept. Freeing alone returns almost nothing: a kept
    object sits on every 64 KiB. The trim returns the free pages between them."""
    trim = heap_trimmer()
    if trim is None:
        pytest.skip("no malloc_trim in this C library")
    burst = [bytes(PAGE - 64) + bytes([n % 251]) for n in range(16 * 1024)]  # 64 MiB
    kept = burst[::16]
    del burst
    before = resident_mb()
    trim()
    after = resident_mb()
    assert len(kept) == 1024
    assert before - after > 32, f"RSS {before:.0f} MB before the trim, {after:.0f} after"


async def test_the_trim_runs_once_per_period_for_ever() -> None:
    trims: list[float] = []
    clock = [0.0]

    async def sleep(seconds: float) -> None:
        clock[0] += seconds
        if clock[0] > 45:
            raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await trim_forever(lambda: trims.append(clock[0]), every=15, sleep=sleep)
    assert trims == [15, 30, 45]


async def test_a_trim_that_fails_stops_the_trimming_not_the_operator() -> None:
    trims: list[int] = []

    def trim() -> None:
        trims.append(1)
        raise OSError("no such symbol")

    async def sleep(seconds: float) -> None:
        if len(trims) > 3:
            raise asyncio.CancelledError  # still trimming: the test fails below

    await trim_forever(trim, every=15, sleep=sleep)
    assert trims == [1]
