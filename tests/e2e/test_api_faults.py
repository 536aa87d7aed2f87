"""API errors on the operator's writes: 5xx and 429 before the server acts, 409 on status, and
responses lost after the server acted. Everything is retried with backoff; no slot is lost and
none runs twice, and the status record still counts each run once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devcluster import faultproxy
from devcluster.faultproxy import FaultProxy, Rule
from devcluster.replica import OperatorProcess
from kube import Kube, jobs_of, parse_time, scheduled_at, scheduledjob, status_of, wait_for

JOBS = r"/apis/batch/v1/namespaces/[^/]+/jobs$"
STATUS = r"/scheduledjobs/[^/]+/status$"
# Traffic enough for every rule to fire within a minute while failing objects back off.
NAMES = [f"flaky-{i}" for i in range(4)]
SUSPEND = '{"spec":{"suspend":true}}'
RULES = [
    Rule("POST", JOBS, "reject", every=3, status=500),
    Rule("POST", JOBS, "reject", every=4, status=429),
    Rule("POST", JOBS, "lose", every=3),
    Rule("PATCH", STATUS, "reject", every=3, status=409),
    Rule("PATCH", STATUS, "reject", every=4, status=503),
    Rule("PATCH", STATUS, "lose", every=3),
]


@pytest.fixture
def proxy(k8s_cluster: Any, operator_kubeconfig: Path, tmp_path: Path) -> Iterator[FaultProxy]:
    """The operator's own credentials, pointed at a fault-injecting proxy in front of the server."""
    with faultproxy.running(
        Path(k8s_cluster.kubeconfig), operator_kubeconfig, RULES, tmp_path
    ) as running:
        yield running


def test_write_errors_are_retried_without_losing_or_doubling_a_slot(
    kube: Kube,
    namespace: str,
    operator_process: OperatorProcess,
    proxy: FaultProxy,
    tmp_path: Path,
) -> None:
    operator_process.stop()
    faulty = OperatorProcess(proxy.kubeconfig, tmp_path, "faulty")
    faulty.start()
    try:
        for name in NAMES:
            kube.apply(
                scheduledjob(
                    name, namespace, schedule="* * * * * *", startingDeadlineSeconds=60,
                    successfulJobsHistoryLimit=100,
                )
            )  # fmt: skip
        wait_for(
            lambda: all(rule["fired"] for rule in proxy.faults()), 60, "every kind of fault to fire"
        )
        # About two writes in three fail here, so a failing object backs off (up to a minute):
        # runs in total, not per object.
        wait_for(
            lambda: sum(len(jobs_of(kube, namespace, name)) for name in NAMES) >= 20,
            90,
            "runs through the faults",
        )
        for name in NAMES:
            kube.run("patch", "sj", name, "-n", namespace, "--type=merge", "-p", SUSPEND)
        wait_for(
            lambda: all(
                status_of(kube, namespace, name).get("slotsSkipped", {}).get("Suspended")
                for name in NAMES
            ),
            60,
            "the suspensions to be recorded (through the faults)",
        )
    finally:
        faulty.stop()
    for name in NAMES:
        # The ledger: every per-second slot after creation, up to processedUntil, has one Job or
        # is counted as skipped (a slot still failing when the suspension came is Suspended).
        jobs = jobs_of(kube, namespace, name)
        slots = sorted(int(scheduled_at(job).timestamp()) for job in jobs)
        assert len(slots) == len(set(slots)), f"{name}: a slot ran twice"
        obj = kube.get("scheduledjob", name, namespace)
        status = obj["status"]
        created = int(parse_time(obj["metadata"]["creationTimestamp"]).timestamp())
        processed = int(parse_time(status["processedUntil"]).timestamp())
        assert status["runsCreated"] == len(jobs), (name, status)
        skipped = sum(status.get("slotsSkipped", {}).values())
        assert len(jobs) + skipped == processed - created, (name, len(jobs), status)
    log = faulty.log()
    assert "retrying in" in log
    assert "Traceback" not in log, log[-3000:]
