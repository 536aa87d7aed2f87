"""API errors on the operator's writes: 5xx and 429 before the server acts, 409 on status, and
responses lost after the server acted. Everything is retried with backoff; no slot is lost and
none runs twice, and the status record still counts each run once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster.processes import free_port
from devcluster.replica import REPO, OperatorProcess
from kube import Kube, jobs_of, scheduled_at, scheduledjob, status_of, wait_for

JOBS = r"/apis/batch/v1/namespaces/[^/]+/jobs$"
STATUS = r"/scheduledjobs/[^/]+/status$"
RULES = [
    {"method": "POST", "path": JOBS, "action": "reject", "every": 3, "status": 500},
    {"method": "POST", "path": JOBS, "action": "reject", "every": 4, "status": 429},
    {"method": "POST", "path": JOBS, "action": "lose", "every": 3},
    {"method": "PATCH", "path": STATUS, "action": "reject", "every": 3, "status": 409},
    {"method": "PATCH", "path": STATUS, "action": "reject", "every": 4, "status": 503},
    {"method": "PATCH", "path": STATUS, "action": "lose", "every": 3},
]


def faults(url: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{url}/__faults", timeout=5) as response:
        result: list[dict[str, Any]] = json.load(response)
        return result


@pytest.fixture
def faulty_kubeconfig(
    k8s_cluster: Any, operator_kubeconfig: Path, tmp_path: Path
) -> Iterator[tuple[Path, str]]:
    """The operator's own credentials, pointed at a fault-injecting proxy in front of the server."""
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps(RULES))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "devcluster.faultproxy", "--rules", str(rules)]
    command += ["--kubeconfig", str(k8s_cluster.kubeconfig), "--listen", f"127.0.0.1:{port}"]
    env = {**os.environ, "PYTHONPATH": str(REPO / "hack")}
    with (tmp_path / "proxy.log").open("wb") as log:
        proxy = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    wait_for(lambda: _answers(url), 15, "the fault proxy")
    config = yaml.safe_load(operator_kubeconfig.read_text())
    for cluster in config["clusters"]:
        cluster["cluster"] = {"server": url}
    path = tmp_path / "faulty-kubeconfig"
    path.write_text(yaml.safe_dump(config))
    yield path, url
    proxy.terminate()
    try:
        proxy.wait(10)
    except subprocess.TimeoutExpired:
        proxy.kill()
        proxy.wait()


def _answers(url: str) -> bool:
    try:
        faults(url)
    except OSError:
        return False
    return True


def test_write_errors_are_retried_without_losing_or_doubling_a_slot(
    kube: Kube,
    namespace: str,
    operator_process: OperatorProcess,
    faulty_kubeconfig: tuple[Path, str],
    tmp_path: Path,
) -> None:
    operator_process.stop()
    kubeconfig, url = faulty_kubeconfig
    faulty = OperatorProcess(kubeconfig, tmp_path, "faulty")
    faulty.start()
    try:
        kube.apply(
            scheduledjob(
                "flaky", namespace, schedule="* * * * * *", startingDeadlineSeconds=60,
                successfulJobsHistoryLimit=100,
            )
        )  # fmt: skip
        wait_for(
            lambda: all(rule["fired"] for rule in faults(url)), 60, "every kind of fault to fire"
        )
        kube.run(
            "patch",
            "sj",
            "flaky",
            "-n",
            namespace,
            "--type=merge",
            "-p",
            '{"spec":{"suspend":true}}',
        )
        wait_for(
            lambda: status_of(kube, namespace, "flaky").get("slotsSkipped", {}).get("Suspended"),
            30,
            "the suspension to be recorded (through the faults)",
        )
    finally:
        faulty.stop()
    jobs = jobs_of(kube, namespace, "flaky")
    slots = sorted(int(scheduled_at(job).timestamp()) for job in jobs)
    assert len(slots) == len(set(slots)), "a slot ran twice"
    assert sorted(set(range(slots[0], slots[-1] + 1)) - set(slots)) == [], "a slot was lost"
    assert status_of(kube, namespace, "flaky")["runsCreated"] == len(jobs)
    log = faulty.log()
    assert "retrying in" in log
    assert "Traceback" not in log, log[-3000:]
