"""A tool an e2e test runs (bench.py, chaos.py) starts operators of its own. When the test gives up
on it, at its own timeout or at pytest-timeout's, those operators must go with it: an orphan keeps
the leader Lease and the next test's replicas never lead (it happened: an e2e run killed bench.py,
and the chaos and fence tests after it failed)."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest

from devcluster.processes import run_tool


def _tool(pid_file: Path, then: str) -> list[str]:
    """A tool that starts a long-lived child (as bench.py starts its operator), writes down its
    pid, then runs `then`."""
    code = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
        f"{then}\n"
    )
    return [sys.executable, "-c", code]


def _gone(pid_file: Path, timeout: float = 10) -> bool:
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


class Interrupted(Exception):
    pass


@pytest.fixture
def alarm() -> Iterator[None]:
    """An exception raised in the caller 3 s on, while it waits: what pytest-timeout does."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise Interrupted

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.alarm(3)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_a_tool_that_times_out_leaves_no_child_behind(tmp_path: Path) -> None:
    pid_file = tmp_path / "child"
    result = run_tool(_tool(pid_file, "time.sleep(120)"), dict(os.environ), timeout=3, grace=2)
    assert result.returncode != 0
    assert "timed out after 3 s" in result.stderr
    assert _gone(pid_file), "the tool's child outlived it"


def test_a_tool_interrupted_while_its_caller_waits_leaves_no_child_behind(
    tmp_path: Path, alarm: None
) -> None:
    pid_file = tmp_path / "child"
    with pytest.raises(Interrupted):
        run_tool(_tool(pid_file, "time.sleep(120)"), dict(os.environ), timeout=60, grace=2)
    assert _gone(pid_file), "the tool's child outlived it"


def test_a_tool_that_ends_gives_its_output_and_leaves_no_child_behind(tmp_path: Path) -> None:
    pid_file = tmp_path / "child"
    result = run_tool(_tool(pid_file, "print('done')"), dict(os.environ), timeout=30)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "done\n"
    assert _gone(pid_file), "the tool's child outlived it"
