"""Hand the C heap's free pages back to the kernel after a burst (decision 0015; design note 102).

Every object larger than 512 bytes (a packed ScheduledJob, a response body, a page of a
listing) comes from glibc's malloc, not pymalloc. glibc gives back by itself only what is free
at the top of its heap; a burst leaves its free chunks below objects that live on (the model's),
and their pages stay resident until malloc_trim() returns them. With 5,000 ScheduledJobs that
was 16 MB of a 116 MB RSS at rest. A trim walks the free chunks: milliseconds, every TRIM_EVERY.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

# Seconds. Not aligned to the minute: some trims land inside a burst, where one costs a few ms. As
# often as idle connections close (cronlease.shell.kube.IDLE_CONNECTION): their buffers come back.
TRIM_EVERY = 5.0


def heap_trimmer() -> Callable[[], None] | None:
    """glibc's malloc_trim(0), or None where the C library has none (musl, macOS)."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int

    def trim_all() -> None:
        trim(0)  # 0: keep no padding at the top of the heap

    return trim_all


async def trim_forever(
    trim: Callable[[], None],
    every: float = TRIM_EVERY,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> None:
    while True:
        await sleep(every)
        try:
            trim()
        except Exception:  # an optional saving: never a reason for the operator to stop
            log.exception("trimming the heap failed; not trying again")
            return


async def run() -> None:
    """Trim every TRIM_EVERY for ever, if this C library can."""
    trim = heap_trimmer()
    if trim is None:
        log.info("no malloc_trim in this C library: the heap is not trimmed")
        return
    await trim_forever(trim)
