"""The operator as a separate process, exactly as a user runs it: for e2e tests, benchmarks and
fault injection. Leases are short so failovers take seconds."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

from cronlease.shell.leadership import ElectionConfig
from devcluster.processes import free_port

if TYPE_CHECKING:
    from devcluster.image import Image

# The operator's first log line names its Lease identity (in text and in JSON logs alike).
STARTING = re.compile(r"\bcronlease (\S+) starting;")
REPO = Path(__file__).resolve().parents[2]
RELEASE = "cronlease"  # the Helm release; also the chart's ServiceAccount name
OPERATOR_NAMESPACE = "cronlease-system"
LEASE = "cronlease-leader"
# Short leases keep failover tests fast; the ratios are roughly the production defaults'.
ELECTION = {"lease_duration": 4.0, "renew_deadline": 3.0, "retry_period": 0.5}
# What a user runs (the operator's defaults): benchmarks measure these, not the tests' short leases.
_DEFAULTS = ElectionConfig(namespace=OPERATOR_NAMESPACE)
PRODUCTION_ELECTION = {
    "lease_duration": _DEFAULTS.lease_duration,
    "renew_deadline": _DEFAULTS.renew_deadline,
    "retry_period": _DEFAULTS.retry_period,
}


class OperatorProcess:
    """One replica: `start()`, `stop(signal)`, `send(signal)`, its log, identity and metrics.
    With an `image`, the replica runs from the operator's image (devcluster.image), else from
    this checkout with the test environment's Python."""

    def __init__(
        self,
        kubeconfig: Path,
        log_dir: Path,
        name: str = "operator",
        election: dict[str, float] | None = None,
        image: Image | None = None,
    ) -> None:
        self.kubeconfig = kubeconfig
        self.image = image
        self.election = election or ELECTION
        self.log_path = log_dir / f"{name}.log"
        self.name = name
        self.process: subprocess.Popen[bytes] | None = None
        self.metrics_port = 0
        self.health_port = 0

    def start(self, *extra: str) -> None:
        assert not self.running, "already running"
        self.metrics_port, self.health_port = free_port(), free_port()
        args = [
            f"--metrics-bind=127.0.0.1:{self.metrics_port}",
            f"--liveness-bind=127.0.0.1:{self.health_port}",
            f"--lease-namespace={OPERATOR_NAMESPACE}",
            f"--lease-duration={self.election['lease_duration']}",
            f"--renew-deadline={self.election['renew_deadline']}",
            f"--retry-period={self.election['retry_period']}",
            *extra,
        ]
        if self.image is None:
            command = [sys.executable, "-m", "cronlease", *args]
            env = {
                **os.environ,
                "KUBECONFIG": str(self.kubeconfig),
                "PYTHONPATH": str(REPO / "operator"),
                "POD_NAME": self.name,
            }
        else:
            command = self.image.command(self.kubeconfig, self.name, args, self.log_path.parent)
            env = dict(os.environ)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                command, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=self.image is not None,  # a process group to clean up
            )  # fmt: skip
        self._wait_ready()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def _wait_ready(self, timeout: float = 30) -> None:
        """Until /readyz answers: the replica's watches have listed (its model is synced)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running:
                raise RuntimeError(f"operator exited at start; see {self.log_path}")
            try:
                url = f"http://127.0.0.1:{self.health_port}/readyz"
                with urllib.request.urlopen(url, timeout=1) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"operator not ready after {timeout} s; see {self.log_path}")

    @property
    def pid(self) -> int:
        """The operator's process (in an image, the entrypoint's, not buildah's)."""
        assert self.process is not None
        if self.image is None:
            return self.process.pid
        found = self.image.operator_pid(self.process.pid)
        assert found is not None, "the image's operator process is gone"
        return found

    def identity(self) -> str | None:
        """This replica's Lease identity (the pod name plus a random suffix), from the log of its
        latest start (the log is appended to across restarts)."""
        starts = STARTING.findall(self.log_path.read_text())
        return starts[-1] if starts else None

    def log(self) -> str:
        return self.log_path.read_text()

    def send(self, sig: signal.Signals) -> None:
        assert self.process is not None
        if self.image is None:
            self.process.send_signal(sig)
        elif (pid := self.image.operator_pid(self.process.pid)) is not None:
            os.kill(pid, sig)

    def stop(self, sig: signal.Signals = signal.SIGTERM, timeout: float = 15) -> None:
        if self.process is None:
            return
        if self.running:
            with contextlib.suppress(ProcessLookupError):
                self.send(sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout)
        if self.image is None:
            self.process.kill()  # a no-op once it has exited
        else:
            with contextlib.suppress(ProcessLookupError):  # buildah's processes too
                os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self.process = None

    def metrics(self) -> str:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            text: str = response.read().decode()
            return text
