"""Retries and dead letters on the real control plane (issue 15): kwok fails the attempts a
test names, and the Job controller ends each attempt's Job as it would on a real cluster."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from devcluster.replica import OperatorProcess
from kube import Kube, condition, events_of, jobs_of, scheduledjob, status_of, wait_for

FAST = {"maxAttempts": 3, "backoff": {"initialSeconds": 1, "factor": 1}}


def one_off(name: str, namespace: str, **fields: Any) -> dict[str, Any]:
    """A run at once (a past runAt), with retries."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return scheduledjob(name, namespace, **{"runAt": now, "retry": FAST, **fields})


def attempts(kube: Kube, namespace: str, name: str) -> dict[int, dict[str, Any]]:
    return {
        int(job["metadata"]["labels"]["cronlease.io/attempt"]): job
        for job in jobs_of(kube, namespace, name)
    }


def ended(job: dict[str, Any]) -> str | None:
    for kind in ("Complete", "Failed"):
        if condition(job, kind) == "True":
            return kind
    return None


def test_a_run_that_fails_twice_succeeds_on_its_third_attempt(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    kube.apply(one_off("flaky", namespace, fail_attempts=[1, 2], failedJobsHistoryLimit=3))
    jobs = wait_for(
        lambda: (
            (found := attempts(kube, namespace, "flaky")).get(3)
            and ended(found[3]) == "Complete"
            and found
        ),
        40,
        "attempt 3 to succeed",
    )
    assert sorted(jobs) == [1, 2, 3]
    assert [ended(jobs[n]) for n in (1, 2)] == ["Failed", "Failed"]
    run = jobs[1]["metadata"]["name"]
    assert {job["metadata"]["labels"]["cronlease.io/run"] for job in jobs.values()} == {run}
    for number, job in jobs.items():  # every attempt's pods know which attempt they are
        pod = job["spec"]["template"]["metadata"]["annotations"]
        assert pod["cronlease.io/attempt"] == str(number)
        assert pod["cronlease.io/run"] == run
    keys = {job["spec"]["template"]["metadata"]["annotations"]["cronlease.io/idempotency-key"]
            for job in jobs.values()}  # fmt: skip
    assert len(keys) == 1  # one slot, one key, whatever the attempt
    entry = wait_for(
        lambda: next(
            (r for r in status_of(kube, namespace, "flaky").get("recentRuns") or []
             if r.get("result") == "Succeeded"),
            None,
        ),
        15,
        "the run recorded as succeeded",
    )  # fmt: skip
    assert (entry["run"], entry["attempts"], entry["job"]) == (run, 3, jobs[3]["metadata"]["name"])
    reasons = {event["reason"] for event in events_of(kube, namespace, "flaky")}
    assert {"RunRetrying", "RunSucceeded"} <= reasons
    wait_for(
        lambda: (
            not any(job["metadata"].get("finalizers") for job in jobs_of(kube, namespace, "flaky"))
        ),
        15,
        "every attempt released once the run ended",
    )


def test_a_run_whose_attempts_all_fail_is_kept_as_a_dead_letter(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    kube.apply(one_off("doomed", namespace, result="Failed", failedJobsHistoryLimit=0))
    letter = wait_for(
        lambda: next(
            (job for job in jobs_of(kube, namespace, "doomed")
             if job["metadata"]["labels"].get("cronlease.io/dead-letter") == "true"),
            None,
        ),
        40,
        "the dead letter",
    )  # fmt: skip
    assert letter["metadata"]["labels"]["cronlease.io/attempt"] == "3"
    listed = kube.items("jobs", namespace, "cronlease.io/dead-letter=true")
    assert [job["metadata"]["name"] for job in listed] == [letter["metadata"]["name"]]
    (dead,) = wait_for(
        lambda: status_of(kube, namespace, "doomed").get("deadLetters"), 15, "deadLetters"
    )
    assert (dead["job"], dead["attempts"], dead["reason"]) == (
        letter["metadata"]["name"],
        3,
        "AttemptsExhausted",
    )
    assert "DeadLettered" in {event["reason"] for event in events_of(kube, namespace, "doomed")}
    # History limit 0 removes the earlier attempts; the dead letter stays, held until its
    # retention passes (no TTL can take it sooner; deleting the ScheduledJob releases it).
    wait_for(
        lambda: (
            [job["metadata"]["name"] for job in jobs_of(kube, namespace, "doomed")]
            == [letter["metadata"]["name"]]
        ),
        20,
        "only the dead letter left",
    )
    kept = kube.get("job", letter["metadata"]["name"], namespace)
    assert kept is not None
    assert kept["metadata"].get("finalizers") == ["cronlease.io/slot-record"]
    kube.run("delete", "scheduledjob", "doomed", "-n", namespace, "--wait=false")
    wait_for(
        lambda: not jobs_of(kube, namespace, "doomed"), 20, "the dead letter released and gone"
    )


def test_a_failure_the_pod_failure_policy_calls_final_is_not_retried(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    sj = one_off("final", namespace, result="Failed", exit_code=42)
    sj["spec"]["jobTemplate"]["spec"]["podFailurePolicy"] = {
        "rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}]
    }
    kube.apply(sj)
    (dead,) = wait_for(
        lambda: status_of(kube, namespace, "final").get("deadLetters"), 30, "deadLetters"
    )
    assert (dead["attempts"], dead["reason"]) == (1, "PodFailurePolicy")
    assert sorted(attempts(kube, namespace, "final")) == [1]
