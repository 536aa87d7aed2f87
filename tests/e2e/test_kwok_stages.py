"""kwok plays pods as their annotations say (hack/devcluster/kwok-stages.yaml): failing on chosen
attempts and with a chosen exit code, which the retry tests of issue 15 build on. Mostly plain
Jobs with the attempt written on the pod template by hand, as the operator writes it; the last
test has the operator write it."""

from __future__ import annotations

import json
from typing import Any

from devcluster.replica import OperatorProcess
from kube import Kube, condition, jobs_of, pod_template, scheduledjob, wait_for

ATTEMPT = "cronlease.io/attempt"
SUSPEND = json.dumps({"spec": {"suspend": True}})


def job(name: str, namespace: str, template: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"backoffLimit": 0, "template": template, **spec},
    }


def attempt(template: dict[str, Any], number: int) -> dict[str, Any]:
    template["metadata"]["annotations"][ATTEMPT] = str(number)
    return template


def outcome(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    """The Job once it has finished (Complete or Failed)."""

    def finished() -> dict[str, Any] | None:
        obj = kube.get("job", name, namespace)
        done = "True" in (condition(obj, "Complete"), condition(obj, "Failed"))
        return obj if done else None

    return wait_for(finished, 30, f"Job {name} to finish")


def result(job: dict[str, Any]) -> str:
    return "Complete" if condition(job, "Complete") == "True" else "Failed"


def failed_reason(job: dict[str, Any]) -> str | None:
    for item in job["status"].get("conditions", []):
        if item["type"] == "Failed" and item["status"] == "True":
            return str(item.get("reason"))
    return None


def pods_of(kube: Kube, namespace: str, name: str) -> list[dict[str, Any]]:
    return kube.items("pods", namespace, f"batch.kubernetes.io/job-name={name}")


def exit_codes(pod: dict[str, Any]) -> list[int]:
    return [s["state"]["terminated"]["exitCode"] for s in pod["status"]["containerStatuses"]]


def test_pods_fail_on_the_chosen_attempts_only(kube: Kube, namespace: str) -> None:
    for number in (1, 2, 3):
        template = attempt(pod_template(fail_attempts=(1, 2)), number)
        kube.create(job(f"attempt-{number}", namespace, template))
    results = {n: result(outcome(kube, namespace, f"attempt-{n}")) for n in (1, 2, 3)}
    assert results == {1: "Failed", 2: "Failed", 3: "Complete"}
    # A failed attempt's container exits like a failed program (1, unless an exit code is chosen).
    [pod] = pods_of(kube, namespace, "attempt-1")
    assert pod["status"]["phase"] == "Failed"
    assert exit_codes(pod) == [1]


def test_exit_code_lets_a_pod_failure_policy_fail_the_job(kube: Kube, namespace: str) -> None:
    # backoffLimit 3: without the policy matching exit code 42, the Job would make more pods.
    policy = {"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}]}
    template = attempt(pod_template(fail_attempts=(1,), exit_code=42), 1)
    kube.create(job("fatal", namespace, template, backoffLimit=3, podFailurePolicy=policy))
    failed = outcome(kube, namespace, "fatal")
    assert failed_reason(failed) == "PodFailurePolicy", failed["status"]
    [pod] = pods_of(kube, namespace, "fatal")
    assert exit_codes(pod) == [42]
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["reason"] == "Error"


def test_pods_without_the_new_annotations_end_as_before(kube: Kube, namespace: str) -> None:
    kube.create(job("plain-ok", namespace, pod_template()))
    kube.create(job("plain-bad", namespace, pod_template(result="Failed")))
    # fail-attempts applies to pods that carry an attempt: this one has none.
    kube.create(job("no-attempt", namespace, pod_template(fail_attempts=(1,))))
    names = ("plain-ok", "plain-bad", "no-attempt")
    results = {name: result(outcome(kube, namespace, name)) for name in names}
    assert results == {"plain-ok": "Complete", "plain-bad": "Failed", "no-attempt": "Complete"}
    [ok] = pods_of(kube, namespace, "plain-ok")
    [bad] = pods_of(kube, namespace, "plain-bad")
    assert (exit_codes(ok), exit_codes(bad)) == ([0], [1])
    assert failed_reason(outcome(kube, namespace, "plain-bad")) == "BackoffLimitExceeded"


def test_a_scheduled_run_is_attempt_1_to_kwok(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    kube.apply(
        scheduledjob("first", namespace, schedule="* * * * * *", fail_attempts=(1,), exit_code=42)
    )
    [first, *_] = wait_for(lambda: jobs_of(kube, namespace, "first"), 20, "a Job")
    name = first["metadata"]["name"]
    kube.run("patch", "scheduledjob", "first", "-n", namespace, "--type=merge", "-p", SUSPEND)
    assert result(outcome(kube, namespace, name)) == "Failed"
    [pod] = pods_of(kube, namespace, name)
    assert pod["metadata"]["annotations"][ATTEMPT] == "1"
    assert exit_codes(pod) == [42]
