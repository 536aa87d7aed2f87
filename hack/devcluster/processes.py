"""Starting and stopping the control plane's processes so that none outlives `cluster-down`."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
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
    """SIGTERM the process group, then SIGKILL whatever is left after `timeout`."""
    if not is_running(pid, binary):
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not is_running(pid, binary):
                _reap(pid)
                return
            time.sleep(0.05)


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
