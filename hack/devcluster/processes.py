"""Starting and stopping the control plane's processes so that none outlives `cluster-down`."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path


def free_port() -> int:
    """A port nobody listens on now; the tiny window before the component binds it is accepted."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def spawn(args: Sequence[str], log_file: Path) -> subprocess.Popen[bytes]:
    """Start a daemon in its own session, so it survives the command that started it."""
    with log_file.open("ab") as log:
        return subprocess.Popen(
            list(args),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def is_running(pid: int, binary: str) -> bool:
    """True if `pid` is alive and still the program we started (pids get reused)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z" and binary.encode() in cmdline.split(b"\0", 1)[0]


def stop(pid: int, binary: str, timeout: float = 15.0) -> None:
    """SIGTERM the process group, then SIGKILL whatever of it is left after `timeout`."""
    if is_running(pid, binary):
        _stop_group(pid, timeout, reap=lambda: _reap(pid))


def _reap(pid: int) -> None:
    """Collect the exit status if we are the parent, so no zombie lingers in long test runs."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


@dataclass(frozen=True)
class Started:
    """A component just started: its command is kept so that a restart runs it the same way."""

    name: str
    command: list[str]
    process: subprocess.Popen[bytes]
    url: str


def start_component(name: str, command: list[str], log_dir: Path, url: str) -> Started:
    """Spawn one control-plane component, logging to `log_dir/<name>.log`."""
    return Started(name, command, spawn(command, log_dir / f"{name}.log"), url)


def run_tool(
    command: list[str], env: dict[str, str], timeout: float, grace: float = 15.0
) -> subprocess.CompletedProcess[str]:
    """Run a tool that starts processes of its own (bench.py and chaos.py start operators) to its
    end, its output captured, and leave nothing of it behind. It runs in a process group of its
    own: on its timeout, or when the caller is interrupted while it waits (pytest-timeout), the
    whole group gets SIGTERM, so its operators step down as they do when the tool stops them,
    then SIGKILL after `grace`. Had only the tool been killed, they would outlive it and keep the
    Lease. The output goes to files, not pipes, so a child holding them open cannot stall it."""
    with (
        tempfile.TemporaryFile("w+", errors="replace") as out,
        tempfile.TemporaryFile("w+", errors="replace") as err,
    ):
        process = subprocess.Popen(
            command, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err, text=True,
            start_new_session=True,
        )  # fmt: skip
        note = ""
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            note = f"\nrun_tool: timed out after {timeout:.0f} s; its process group was stopped\n"
        finally:
            _stop_group(process.pid, grace, reap=process.poll)
            process.wait()
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(
            command, process.returncode, out.read(), err.read() + note
        )


def _stop_group(pgid: int, grace: float, reap: Callable[[], object]) -> None:
    """SIGTERM to process group `pgid`, SIGKILL to whatever of it is left after `grace`; each
    time, wait until the whole group is gone (not the leader only: a child would outlive it).
    `reap` collects the leader if it is ours, so that a finished leader no longer counts."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return  # nothing left: no signal to a group id the kernel may since have reused
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            reap()
            if not _group_members(pgid):
                return
            time.sleep(0.05)


def _group_members(pgid: int) -> list[int]:
    """The live processes of process group `pgid` (zombies are done)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(stat.parent.name))
    return members
