"""The bench's `--pin` (hack/cpu_pinning.py): every thread of a process moves, and the threads it
starts afterwards keep to the same CPUs."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from cpu_pinning import apart, pin, split

# A child with a thread started before it is pinned and one started after, each reporting its
# CPUs: affinity is per thread, so the first moves only if pin() walks every thread.
EARLY_AND_LATE_THREADS = """
import os, sys, threading
go = threading.Event()
found = {}
def report(name):
    go.wait()
    found[name] = sorted(os.sched_getaffinity(0))
early = threading.Thread(target=report, args=("early",))
early.start()
print("ready", flush=True)
sys.stdin.readline()
go.set()
late = threading.Thread(target=report, args=("late",))
late.start()
early.join()
late.join()
print(found["early"], found["late"], flush=True)
"""


@pytest.fixture
def child() -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen(
        [sys.executable, "-c", EARLY_AND_LATE_THREADS],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    yield process
    process.kill()
    process.wait()


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two CPUs to move between")
def test_every_thread_of_a_pinned_process_moves_and_later_ones_follow(
    child: subprocess.Popen[str],
) -> None:
    assert child.stdin is not None
    assert child.stdout is not None
    assert child.stdout.readline() == "ready\n"
    pin(child.pid, {1})
    child.stdin.write("go\n")
    child.stdin.flush()
    assert child.stdout.readline().split() == ["[1]", "[1]"]


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two CPUs to move between")
def test_apart_gives_each_process_its_cpus_back(child: subprocess.Popen[str]) -> None:
    """The control plane outlives the bench: after the block it runs where it ran before."""
    assert child.stdout is not None
    assert child.stdout.readline() == "ready\n"
    last = (os.cpu_count() or 1) - 1
    pin(child.pid, {last})  # somewhere neither side of the split puts it
    before = os.sched_getaffinity(0)
    with apart([child.pid], os.getpid()) as shared:
        assert os.sched_getaffinity(child.pid) == set(range(last))
        assert os.sched_getaffinity(0) == {last}
        assert shared.endswith(f"the operator and the bench's client to CPU {last}")
    assert os.sched_getaffinity(child.pid) == {last}
    assert os.sched_getaffinity(0) == before


def test_the_client_gets_the_last_cpu_and_the_control_plane_the_rest() -> None:
    assert split(2) == ({0}, {1})
    assert split(4) == ({0, 1, 2}, {3})
    with pytest.raises(ValueError, match="at least 2"):
        split(1)
