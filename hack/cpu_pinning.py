"""Pinning whole processes to CPUs, for the bench's `--pin`: the control plane on one core, the
controller under test and the bench's own client on the other, as a real cluster's separate
nodes keep them, so that neither's CPU comes out of the other's."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator


def pin(pid: int, cpus: Iterable[int]) -> None:
    """Every thread `pid` has now. Linux sets affinity per thread, and a thread started later
    inherits its creator's, so a process pinned this way stays pinned, its children too."""
    wanted = set(cpus)
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(ProcessLookupError, FileNotFoundError):  # a thread that ended
            os.sched_setaffinity(int(tid), wanted)


def split(cpus: int) -> tuple[set[int], set[int]]:
    """The control plane's CPUs and the client side's: the last one for the client, the rest
    for the control plane."""
    if cpus < 2:
        raise ValueError("pinning needs at least 2 CPUs")
    return set(range(cpus - 1)), {cpus - 1}


@contextlib.contextmanager
def apart(control_plane: Iterable[int], client: int) -> Iterator[str]:
    """For the block, the `control_plane` processes on every CPU but the last and `client` (and
    what it starts meanwhile) on the last; then each gets back the CPUs it had: the control
    plane outlives the bench. Yields how the CPUs were shared, for a report."""
    shared, own = split(os.cpu_count() or 1)
    before = {pid: os.sched_getaffinity(pid) for pid in [*control_plane, client]}
    try:
        for pid in before:
            pin(pid, own if pid == client else shared)
        yield (
            f"the control plane pinned to CPU {','.join(map(str, sorted(shared)))}, "
            f"the operator and the bench's client to CPU {','.join(map(str, sorted(own)))}"
        )
    finally:
        for pid, cpus in before.items():
            with contextlib.suppress(ProcessLookupError, FileNotFoundError):  # a process gone
                pin(pid, cpus)
