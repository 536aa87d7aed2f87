"""Multi-step runs on the real control plane (issue 17): the bank close of the source design,
in three steps (snapshot positions -> credit interest -> publish statements). kwok plays each
step's pods; where a step has a heartbeat, the test plays its agent and renews the attempt's
Lease, or stops renewing it."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from devcluster.replica import OperatorProcess
from kube import Kube, condition, pod_template, wait_for

RETRY = {"maxAttempts": 2, "backoff": {"initialSeconds": 0}}


def step(name: str, *after: str, duration: str = "1s", **fields: Any) -> dict[str, Any]:
    result = fields.pop("result", "Succeeded")
    fail = fields.pop("fail_attempts", ())
    template = pod_template(duration, result, fail_attempts=fail)
    return {
        "name": name,
        "dependsOn": list(after),
        "jobTemplate": {"spec": {"backoffLimit": 0, "template": template}},
        **fields,
    }


def undo(result: str = "Succeeded") -> dict[str, Any]:
    template = pod_template("0s", result)
    return {"jobTemplate": {"spec": {"backoffLimit": 0, "template": template}}}


def bank_close(namespace: str, *steps: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "cronlease.io/v1alpha1",
        "kind": "ScheduledJob",
        "metadata": {"name": "nightly-close", "namespace": namespace},
        "spec": {
            "runAt": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "steps": list(steps),
            **spec,
        },
    }


def the_run(kube: Kube, namespace: str) -> dict[str, Any] | None:
    runs = kube.items("runs", namespace)
    return runs[0] if runs else None


def finished_run(kube: Kube, namespace: str, timeout: float = 60) -> dict[str, Any]:
    final = {"Succeeded", "Failed", "Compensated", "CompensationFailed"}
    return wait_for(
        lambda: (
            (run := the_run(kube, namespace))
            and (run.get("status") or {}).get("phase") in final
            and run
        ),
        timeout,
        "the run to finish",
    )


def step_jobs(kube: Kube, namespace: str) -> dict[tuple[str, str, int], dict[str, Any]]:
    return {
        (
            job["metadata"]["labels"]["cronlease.io/step"],
            job["metadata"]["labels"]["cronlease.io/action"],
            int(job["metadata"]["labels"]["cronlease.io/attempt"]),
        ): job
        for job in kube.items("jobs", namespace, "cronlease.io/step")
    }


def steps_of(run: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {entry["name"]: entry for entry in run["status"]["steps"]}


def test_the_bank_close_runs_its_three_steps_in_order_each_once(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    kube.apply(
        bank_close(
            namespace,
            step("snapshot"),
            step("apply-interest", "snapshot"),
            step("publish", "apply-interest"),
        )
    )
    run = finished_run(kube, namespace)
    assert run["status"]["phase"] == "Succeeded", run["status"]
    entries = steps_of(run)
    assert {name: (e["phase"], e["attempt"]) for name, e in entries.items()} == {
        "snapshot": ("Succeeded", 1),
        "apply-interest": ("Succeeded", 1),
        "publish": ("Succeeded", 1),
    }
    jobs = step_jobs(kube, namespace)
    assert sorted(jobs) == [
        ("apply-interest", "run", 1),
        ("publish", "run", 1),
        ("snapshot", "run", 1),
    ]
    order = ["snapshot", "apply-interest", "publish"]
    for before, after in itertools.pairwise(order):  # each starts after the one before
        done = jobs[(before, "run", 1)]["status"]["completionTime"]
        assert jobs[(after, "run", 1)]["metadata"]["creationTimestamp"] >= done
    keys = {j["spec"]["template"]["metadata"]["annotations"]["cronlease.io/idempotency-key"]
            for j in jobs.values()}  # fmt: skip
    assert len(keys) == 3  # one key per step
    assert condition(run, "Succeeded") == "True"
    sj = kube.get("scheduledjob", "nightly-close", namespace)
    assert wait_for(
        lambda: [
            r for r in (kube.get("scheduledjob", "nightly-close", namespace) or {})
            .get("status", {}).get("recentRuns") or [] if r.get("result") == "Succeeded"
        ],
        15,
        "the run recorded as succeeded by its ScheduledJob",
    )  # fmt: skip
    assert sj is not None


def stepper(kube: Kube, namespace: str) -> str:
    """The ServiceAccount of step pods that renew their attempt's Lease (the chart's heartbeat
    role, bound in the namespace)."""
    kube.run("create", "serviceaccount", "stepper", "-n", namespace)
    kube.run(
        "create", "rolebinding", "stepper-heartbeat", "--clusterrole=cronlease-heartbeat",
        f"--serviceaccount={namespace}:stepper", "-n", namespace,
    )  # fmt: skip
    return "stepper"


def as_pod_of(kube: Kube, namespace: str, pod: dict[str, Any]) -> Kube:
    """kubectl as a step's pod (of the stepper account): a token bound to it, as its sidecar's."""
    token = kube.run(
        "create", "token", "stepper", "-n", namespace, "--bound-object-kind=Pod",
        f"--bound-object-name={pod['metadata']['name']}",
        f"--bound-object-uid={pod['metadata']['uid']}",
    ).stdout.strip()  # fmt: skip
    return kube.as_token(token)


@contextmanager
def agent(kube: Kube, namespace: str, step_name: str, attempts: set[int]) -> Iterator[None]:
    """Play the step's agent: renew the heartbeat Lease of the given attempts every second, as
    the attempt's pod (only a pod of the Lease's Job may renew it)."""
    stop = threading.Event()
    renewers: dict[str, Kube] = {}

    def renew() -> None:
        while not stop.wait(1.0):
            for (name, action, attempt), job in step_jobs(kube, namespace).items():
                if name != step_name or action != "run" or attempt not in attempts:
                    continue
                lease = job["metadata"]["name"]
                if lease not in renewers:
                    pods = kube.items("pods", namespace, f"job-name={lease}")
                    if not pods:
                        continue
                    renewers[lease] = as_pod_of(kube, namespace, pods[0])
                now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
                patch = f'{{"spec":{{"renewTime":"{now}"}}}}'
                renewers[lease].run(
                    "patch", "lease", lease, "-n", namespace, "--type=merge", "-p", patch,
                    check=False,
                )  # fmt: skip

    thread = threading.Thread(target=renew, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def test_a_step_whose_heartbeat_stops_restarts_alone_as_its_next_attempt(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    interest = step(
        "apply-interest", "snapshot", duration="8s", heartbeat={"timeoutSeconds": 3}, retry=RETRY
    )
    interest["jobTemplate"]["spec"]["template"]["spec"]["serviceAccountName"] = stepper(
        kube, namespace
    )
    kube.apply(bank_close(namespace, step("snapshot"), interest, step("publish", "apply-interest")))
    with agent(kube, namespace, "apply-interest", {2}):  # attempt 1's agent is dead
        run = finished_run(kube, namespace, 90)
    assert run["status"]["phase"] == "Succeeded", run["status"]
    entries = steps_of(run)
    assert (entries["snapshot"]["attempt"], entries["apply-interest"]["attempt"]) == (1, 2)
    jobs = step_jobs(kube, namespace)
    assert [key for key in jobs if key[0] == "snapshot"] == [("snapshot", "run", 1)]  # never again
    restarts = [e for e in run["status"]["recoveryLog"] if e["action"] == "Restarted"]
    assert [(e["step"], e["attempt"], e["reason"]) for e in restarts] == [
        ("apply-interest", 2, "HeartbeatLost")
    ]


def test_a_step_that_fails_past_its_attempts_compensates_the_finished_ones_and_escalates(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    kube.apply(
        bank_close(
            namespace,
            step("snapshot", compensate=undo()),
            step("apply-interest", "snapshot", fail_attempts=(1, 2), retry=RETRY),
            step("publish", "apply-interest"),
        )
    )
    run = finished_run(kube, namespace)
    status = run["status"]
    assert status["phase"] == "Compensated", status
    assert condition(run, "Escalated") == "True"
    escalated = next(c for c in status["conditions"] if c["type"] == "Escalated")
    assert escalated["reason"] == "RetriesExhausted"
    entries = steps_of(run)
    assert entries["apply-interest"]["phase"] == "Failed"
    assert entries["publish"]["phase"] == "Skipped"
    assert entries["snapshot"]["compensation"]["phase"] == "Succeeded"
    story = [(e["action"], e.get("step", "")) for e in status["recoveryLog"]]
    assert story == [
        ("WillRestart", "apply-interest"),
        ("Restarted", "apply-interest"),
        ("GaveUp", "apply-interest"),
        ("Escalated", ""),
        ("Compensating", "snapshot"),
        ("Compensated", "snapshot"),
    ], story
    jobs = step_jobs(kube, namespace)
    assert sorted(jobs) == [
        ("apply-interest", "run", 1),
        ("apply-interest", "run", 2),
        ("snapshot", "compensate", 1),
        ("snapshot", "run", 1),
    ]


def test_a_compensation_that_fails_ends_compensation_failed_and_escalates(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    kube.apply(
        bank_close(
            namespace,
            step("snapshot", compensate=undo("Failed")),
            step("apply-interest", "snapshot", result="Failed"),
        )
    )
    run = finished_run(kube, namespace)
    status = run["status"]
    assert status["phase"] == "CompensationFailed", status
    escalated = next(c for c in status["conditions"] if c["type"] == "Escalated")
    assert escalated["reason"] == "CompensationFailed"
    assert steps_of(run)["snapshot"]["compensation"]["phase"] == "Failed"


def pod_of(kube: Kube, namespace: str, job: dict[str, Any]) -> dict[str, Any]:
    name = job["metadata"]["name"]
    return wait_for(
        lambda: next(iter(kube.items("pods", namespace, f"job-name={name}")), None),
        30,
        f"the pod of {name}",
    )


def test_the_heartbeat_sidecar_renews_its_own_attempts_lease_and_no_other_pod_can(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    """`cronlease heartbeat` keeps a step alive past its heartbeat timeout, as the step's pod
    (a token bound to it); another pod's renewal of that Lease is refused by the API server."""
    stepper(kube, namespace)
    interest = step("apply-interest", duration="20s", heartbeat={"timeoutSeconds": 8})
    other = step("audit", duration="20s")
    for each in (interest, other):
        each["jobTemplate"]["spec"]["template"]["spec"]["serviceAccountName"] = "stepper"
    kube.apply(bank_close(namespace, interest, other))
    jobs = wait_for(
        lambda: (found := step_jobs(kube, namespace)) and len(found) == 2 and found,
        30,
        "both steps' Jobs",
    )
    lease = jobs[("apply-interest", "run", 1)]["metadata"]["name"]
    as_pods = {
        name: as_pod_of(kube, namespace, pod_of(kube, namespace, jobs[(name, "run", 1)]))
        for name in ("apply-interest", "audit")
    }
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    refused = as_pods["audit"].run(
        "patch", "lease", lease, "-n", namespace, "--type=merge",
        "-p", f'{{"spec":{{"renewTime":"{now}"}}}}', check=False,
    )  # fmt: skip
    assert refused.returncode != 0
    assert "may renew only its own attempt's Lease" in refused.stderr, refused.stderr
    sidecar = as_pods["apply-interest"]
    renewer = subprocess.Popen(
        [sys.executable, "-m", "cronlease", "heartbeat", "--lease", lease, "-n", namespace],
        env={**os.environ, "KUBECONFIG": str(sidecar.kubeconfig)},
    )
    try:
        run = finished_run(kube, namespace, 90)
    finally:
        renewer.terminate()
        renewer.wait(10)
    assert run["status"]["phase"] == "Succeeded", run["status"]
    assert steps_of(run)["apply-interest"]["attempt"] == 1  # renewed past its 8 s timeout


def test_steps_cannot_be_added_to_a_scheduledjob_that_exists(
    kube: Kube, namespace: str, crd: str
) -> None:
    """A slot's run would change kind (a Job, then a Run of the same name, which never collide):
    a lost create could then run one slot twice. The CRD refuses the switch."""
    manifest = bank_close(namespace, step("snapshot"))
    template = manifest["spec"].pop("steps")[0]["jobTemplate"]
    manifest["spec"]["jobTemplate"] = template
    kube.apply(manifest)
    switched = bank_close(namespace, step("snapshot"))
    result = kube.run("apply", "-f", "-", stdin=json.dumps(switched), check=False)
    assert result.returncode != 0
    assert "steps cannot be added or removed" in result.stderr, result.stderr
