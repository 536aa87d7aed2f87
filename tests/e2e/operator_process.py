"""The operator under test, run as a separate process exactly as a user runs it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from devcluster.processes import free_port

REPO = Path(__file__).resolve().parents[2]


class OperatorProcess:
    def __init__(self, kubeconfig: Path, log_dir: Path, name: str = "operator") -> None:
        self.kubeconfig = kubeconfig
        self.log_path = log_dir / f"{name}.log"
        self.name = name
        self.process: subprocess.Popen[bytes] | None = None
        self.metrics_port = 0
        self.health_port = 0

    def start(self, *extra: str) -> None:
        assert not self.running, "already running"
        self.metrics_port, self.health_port = free_port(), free_port()
        env = {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "PYTHONPATH": str(REPO / "operator"),
            "POD_NAME": self.name,
        }
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable, "-m", "cronlease",
                    f"--metrics-bind=127.0.0.1:{self.metrics_port}",
                    f"--liveness-bind=127.0.0.1:{self.health_port}",
                    *extra,
                ],
                env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        self._wait_healthy()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def _wait_healthy(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running:
                raise RuntimeError(f"operator exited at start; see {self.log_path}")
            try:
                url = f"http://127.0.0.1:{self.health_port}/healthz"
                with urllib.request.urlopen(url, timeout=1) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"operator not healthy after {timeout} s; see {self.log_path}")

    def stop(self, sig: signal.Signals = signal.SIGTERM, timeout: float = 15) -> None:
        if self.process is None:
            return
        if self.running:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def metrics(self) -> str:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            text: str = response.read().decode()
            return text
