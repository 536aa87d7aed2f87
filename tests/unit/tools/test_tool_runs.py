"""A tool an e2e test runs (bench.py, chaos.py) starts operators of its own. When the test gives up
on it, at its own timeout or at pytest-timeout's, those operators must go with it: an orphan keeps
the leader Lease and the next test's replicas never lead (it happened: an e2e run killed bench.py,
and the chaos and fence tests after it failed)."""

from __future__ import annotations

import _thread
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

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


@pytest.fixture
def interrupt() -> Iterator[None]:
    """KeyboardInterrupt raised in the caller 3 s on, while it waits, as pytest-timeout or a
    Ctrl-C would. From a timer thread, so pytest-timeout's own SIGALRM stays in place."""
    timer = threading.Timer(3, _thread.interrupt_main)
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def test_a_tool_that_times_out_leaves_no_child_behind(tmp_path: Path) -> None:
    pid_file = tmp_path / "child"
    result = run_tool(_tool(pid_file, "time.sleep(120)"), dict(os.environ), timeout=3, grace=2)
    assert result.returncode != 0
    assert "timed out after 3 s" in result.stderr
    assert _gone(pid_file), "the tool's child outlived it"


def test_a_tool_interrupted_while_its_caller_waits_leaves_no_child_behind(
    tmp_path: Path, interrupt: None
) -> None:
    pid_file = tmp_path / "child"
    with pytest.raises(KeyboardInterrupt):
        run_tool(_tool(pid_file, "time.sleep(120)"), dict(os.environ), timeout=60, grace=2)
    assert _gone(pid_file), "the tool's child outlived it"


def test_a_tool_that_ends_gives_its_output_and_leaves_no_child_behind(tmp_path: Path) -> None:
    pid_file = tmp_path / "child"
    result = run_tool(_tool(pid_file, "print('done')"), dict(os.environ), timeout=30)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "done\n"
    assert _gone(pid_file), "the tool's child outlived it"
