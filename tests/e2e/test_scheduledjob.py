"""ScheduledJob behaviour against the real control plane, with the operator as its own process.

Schedules are in seconds so the suite stays fast; kwok plays each pod for the duration in its
annotation. Every wait is on a condition with a deadline.
"""

from __future__ import annotations

import json
import signal
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from devcluster.replica import OperatorProcess
from kube import (
    LABEL,
    Kube,
    Watch,
    condition,
    creation_time,
    events_of,
    finished,
    is_active,
    jobs_of,
    parse_time,
    reasons,
    scheduled_at,
    scheduledjob,
    states,
    status_of,
    wait_for,
    wait_until,
)


def even_seconds(after: datetime, until: datetime) -> list[datetime]:
    """The slots of "*/2 * * * * *" in (after, until]."""
    first = int(after.timestamp()) // 2 * 2 + 2
    return [datetime.fromtimestamp(t, UTC) for t in range(first, int(until.timestamp()) + 1, 2)]


def format_slot(slot: datetime) -> str:
    return slot.strftime("%H:%M:%S")


# --- runs on schedule, exactly once per slot ---------------------------------------------------


def test_seconds_schedule_runs_each_slot_once_and_writes_status(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    kube.apply(
        scheduledjob("tick", namespace, schedule="*/2 * * * * *", successfulJobsHistoryLimit=10)
    )
    jobs = wait_for(
        lambda: (j := jobs_of(kube, namespace, "tick")) and len(j) >= 3 and j, 20, "3 Jobs"
    )
    slots = sorted(scheduled_at(job) for job in jobs)
    assert len(set(slots)) == len(slots), "one Job per slot"
    assert all(slot.second % 2 == 0 for slot in slots)
    for job in jobs:
        meta = job["metadata"]
        assert meta["name"] == f"tick-{int(scheduled_at(job).timestamp())}"
        owner = meta["ownerReferences"][0]
        assert (owner["kind"], owner["name"], owner["controller"]) == ("ScheduledJob", "tick", True)
        assert meta["labels"][LABEL] == "tick"
    status = wait_for(
        lambda: (s := status_of(kube, namespace, "tick")).get("lastSuccessfulTime") and s,
        15,
        "status",
    )
    assert status["runsCreated"] >= 3
    assert status["nextScheduleTime"] > status["lastScheduleTime"]
    assert condition({"status": status}, "Ready") == "True"
    lags = [run["lagSeconds"] for run in status["recentRuns"]]
    assert lags
    assert max(lags) < 1.0, lags
    assert "SuccessfulCreate" in reasons(kube, namespace, "tick")


def test_printer_columns(kube: Kube, namespace: str, operator: OperatorProcess) -> None:
    kube.apply(scheduledjob("cols", namespace, schedule="*/2 * * * * *", timeZone="Europe/Berlin"))
    wait_for(lambda: status_of(kube, namespace, "cols").get("lastScheduleTime"), 15, "a first run")
    table = kube.run("get", "sj", "-n", namespace).stdout.splitlines()
    assert table[0].split() == [
        "NAME",
        "SCHEDULE",
        "TIMEZONE",
        "STATUS",
        "ACTIVE",
        "LAST",
        "SCHEDULE",
        "NEXT",
        "AGE",
    ]
    assert table[1].split()[:7] == ["cols", "*/2", "*", "*", "*", "*", "*"]
    assert table[1].split()[7:9] == ["Europe/Berlin", "Scheduling"]  # STATUS: Ready's reason
    wide = kube.run("get", "sj", "-n", namespace, "-o", "wide").stdout.splitlines()
    for column in ("LAST SUCCESS", "READY", "SUSPEND"):
        assert column in wide[0]


# --- concurrency policies on live Jobs ----------------------------------------------------------


def test_allow_runs_overlapping_jobs(kube: Kube, namespace: str, operator: OperatorProcess) -> None:
    kube.apply(scheduledjob("allow", namespace, duration="6s", schedule="*/2 * * * * *"))
    wait_for(
        lambda: sum(is_active(j) for j in jobs_of(kube, namespace, "allow")) >= 2,
        20,
        "2 overlapping Jobs",
    )


def test_forbid_skips_and_records_slots_while_a_job_is_active(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    """No two Jobs are ever active at once, judged on every state the API server stored (a watch,
    replayed in order after the fact, not kubectl polls that can fall between an overlap), and
    every slot until processedUntil either ran or was recorded as skipped."""
    with Watch(kube, "jobs", namespace, f"{LABEL}=forbid") as watch:
        kube.apply(
            scheduledjob(
                "forbid",
                namespace,
                duration="7s",
                schedule="*/2 * * * * *",
                concurrencyPolicy="Forbid",
                successfulJobsHistoryLimit=10,
            )
        )
        # 3 runs of 7 s back to back, each slot meanwhile skipped: about 24 s.
        wait_for(lambda: len(finished(states(watch.events()))) >= 3, 45, "3 Jobs to finish")
    history = states(watch.stop())
    for index, present in enumerate(history):
        active = sorted(name for name, job in present.items() if is_active(job))
        assert len(active) <= 1, f"event {index}: Jobs active at once: {active}"
    assert len(history[-1]) >= 3

    status = status_of(kube, namespace, "forbid")
    assert status["slotsSkipped"].get("ConcurrencyForbid", 0) >= 2, status["slotsSkipped"]
    assert "SkippedConcurrencyForbid" in reasons(kube, namespace, "forbid")
    created = creation_time(kube.get("scheduledjob", "forbid", namespace))
    processed = parse_time(status["processedUntil"])
    ran = [j for j in jobs_of(kube, namespace, "forbid") if scheduled_at(j) <= processed]
    assert status["runsCreated"] == len(ran)
    slots = even_seconds(created, processed)
    assert len(slots) == len(ran) + sum(status.get("slotsSkipped", {}).values()), (slots, status)


def test_skipped_slots_make_one_event_with_a_count_not_one_per_decision(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    """A per-second ScheduledJob whose slots are all skipped (Forbid behind one long Job): one
    SkippedConcurrencyForbid Event counts the decisions, instead of a new Event each second."""
    kube.apply(
        scheduledjob(
            "busy", namespace, duration="600s", schedule="* * * * * *", concurrencyPolicy="Forbid"
        )
    )
    wait_for(lambda: jobs_of(kube, namespace, "busy"), 15, "the long Job")
    wait_until(datetime.now(UTC) + timedelta(seconds=20))
    events = events_of(kube, namespace, "busy")
    assert len(events) <= 4, [(e["reason"], e.get("count")) for e in events]
    [forbid] = [e for e in events if e["reason"] == "SkippedConcurrencyForbid"]
    skipped = status_of(kube, namespace, "busy")["slotsSkipped"]["ConcurrencyForbid"]
    assert 15 <= forbid["count"] <= skipped, (forbid["count"], skipped)
    assert len(jobs_of(kube, namespace, "busy")) == 1


def test_replace_deletes_the_active_job_and_starts_a_new_one(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    kube.apply(
        scheduledjob(
            "replace",
            namespace,
            duration="60s",
            schedule="*/3 * * * * *",
            concurrencyPolicy="Replace",
        )
    )
    first = wait_for(lambda: jobs_of(kube, namespace, "replace"), 15, "a first Job")[0]["metadata"][
        "name"
    ]

    def replaced() -> bool:
        names = {j["metadata"]["name"] for j in jobs_of(kube, namespace, "replace") if is_active(j)}
        return bool(names) and first not in names

    wait_for(replaced, 20, "the first Job to be replaced")
    assert "SuccessfulDelete" in reasons(kube, namespace, "replace")
    active = [j for j in jobs_of(kube, namespace, "replace") if is_active(j)]
    assert len(active) == 1


# --- deadlines, suspend, edits -----------------------------------------------------------------


def test_deadline_skip_after_operator_downtime_is_recorded(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    kube.apply(scheduledjob("late", namespace, schedule="*/2 * * * * *", startingDeadlineSeconds=0))
    wait_for(lambda: status_of(kube, namespace, "late").get("runsCreated"), 15, "a first run")
    operator.stop(signal.SIGKILL)
    stopped = datetime.now(UTC)
    created_before = {j["metadata"]["name"] for j in jobs_of(kube, namespace, "late")}
    wait_until(stopped + timedelta(seconds=5))  # at least two slots pass with nobody running
    operator.start()
    skipped = wait_for(
        lambda: status_of(kube, namespace, "late").get("slotsSkipped", {}).get("DeadlineExceeded"),
        15,
        "the missed slots to be recorded",
    )
    assert skipped >= 2
    assert "SkippedDeadlineExceeded" in reasons(kube, namespace, "late")
    # Nothing from the downtime ran late: every new Job's slot is after the restart began.
    restarted = stopped + timedelta(seconds=5)
    wait_for(
        lambda: len(jobs_of(kube, namespace, "late")) > len(created_before),
        15,
        "runs after the restart",
    )
    for job in jobs_of(kube, namespace, "late"):
        if job["metadata"]["name"] not in created_before:
            assert scheduled_at(job) >= restarted - timedelta(seconds=1), job["metadata"]["name"]


def test_deadline_zero_runs_on_time_slots(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    """CronJob with startingDeadlineSeconds: 0 never runs; ours runs every on-time slot: one Job
    for each slot from the first after creation on, none skipped while the operator runs."""
    kube.apply(
        scheduledjob(
            "zero",
            namespace,
            schedule="*/2 * * * * *",
            startingDeadlineSeconds=0,
            successfulJobsHistoryLimit=50,
        )
    )
    wait_for(lambda: len(jobs_of(kube, namespace, "zero")) >= 6, 30, "6 on-time runs")
    status = status_of(kube, namespace, "zero")
    jobs = jobs_of(kube, namespace, "zero")  # after the status: every Job it counts is here

    slots = sorted(scheduled_at(job) for job in jobs)
    assert len(set(slots)) == len(slots), f"two Jobs for one slot: {slots}"
    for job in jobs:
        assert job["metadata"]["name"] == f"zero-{int(scheduled_at(job).timestamp())}"
    created = creation_time(kube.get("scheduledjob", "zero", namespace))
    # Consecutive slots of the schedule, from the first one after creation: no gap.
    assert slots == even_seconds(created, slots[-1]), [format_slot(slot) for slot in slots]
    assert not status.get("slotsSkipped"), status.get("slotsSkipped")
    processed = parse_time(status["processedUntil"])
    assert status["runsCreated"] == len([slot for slot in slots if slot <= processed])


def test_suspend_skips_and_records_and_resume_runs_nothing_retroactively(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    kube.apply(
        scheduledjob("pause", namespace, schedule="*/2 * * * * *", successfulJobsHistoryLimit=20)
    )
    wait_for(lambda: jobs_of(kube, namespace, "pause"), 15, "a first run")
    kube.run(
        "patch", "sj", "pause", "-n", namespace, "--type=merge", "-p", '{"spec":{"suspend":true}}'
    )
    suspended = wait_for(
        lambda: (
            (s := status_of(kube, namespace, "pause"))
            and condition({"status": s}, "Suspended") == "True"
            and s
        ),
        15,
        "the suspension to be observed",
    )
    assert suspended.get("nextScheduleTime") is None
    count = len(jobs_of(kube, namespace, "pause"))
    wait_until(datetime.now(UTC) + timedelta(seconds=4))  # two slots pass while suspended
    resumed_at = datetime.now(UTC)
    kube.run(
        "patch", "sj", "pause", "-n", namespace, "--type=merge", "-p", '{"spec":{"suspend":false}}'
    )
    wait_for(lambda: len(jobs_of(kube, namespace, "pause")) > count, 15, "runs after resuming")
    skipped = status_of(kube, namespace, "pause")["slotsSkipped"]["Suspended"]
    assert skipped >= 2, skipped  # recorded at the decision after the resume at the latest
    events = [e for e in events_of(kube, namespace, "pause") if e["reason"] == "SkippedSuspended"]
    assert events, "the suspended slots are reported"
    assert {e["type"] for e in events} == {"Normal"}  # asked for: not a Warning
    after = sorted(scheduled_at(j) for j in jobs_of(kube, namespace, "pause"))[count:]
    assert all(slot >= resumed_at - timedelta(seconds=1) for slot in after), after
    assert condition({"status": status_of(kube, namespace, "pause")}, "Suspended") == "False"


def test_schedule_edit_never_runs_a_slot_retroactively(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    hour = (datetime.now(UTC) - timedelta(minutes=30)).hour
    # Daily at a time 30 minutes ago: a naive controller would see a due slot right after the edit.
    kube.apply(scheduledjob("edit", namespace, schedule="0 0 1 1 *"))
    wait_for(
        lambda: status_of(kube, namespace, "edit").get("observedSchedule"), 15, "the first decision"
    )
    kube.run(
        "patch",
        "sj",
        "edit",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        f'{{"spec":{{"schedule":"* {hour} * * *"}}}}',
    )
    wait_for(
        lambda: "ScheduleChanged" in reasons(kube, namespace, "edit"), 15, "the edit to be noticed"
    )
    assert jobs_of(kube, namespace, "edit") == []


# --- history ----------------------------------------------------------------------------------


def test_history_limits_keep_the_newest_finished_jobs(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    kube.apply(
        scheduledjob(
            "hist",
            namespace,
            schedule="*/2 * * * * *",
            successfulJobsHistoryLimit=2,
            failedJobsHistoryLimit=1,
        )
    )
    wait_for(lambda: status_of(kube, namespace, "hist").get("runsCreated", 0) >= 5, 20, "5 runs")

    def trimmed() -> list[dict[str, Any]] | None:
        finished = [j for j in jobs_of(kube, namespace, "hist") if not is_active(j)]
        return finished if len(finished) <= 2 else None

    kept = wait_for(trimmed, 10, "history to be trimmed to 2")
    newest = max(scheduled_at(j) for j in jobs_of(kube, namespace, "hist"))
    assert all(newest - scheduled_at(j) <= timedelta(seconds=6) for j in kept)
    kube.apply(
        scheduledjob(
            "hist-failed",
            namespace,
            schedule="*/2 * * * * *",
            result="Failed",
            failedJobsHistoryLimit=1,
        )
    )
    wait_for(
        lambda: status_of(kube, namespace, "hist-failed").get("runsCreated", 0) >= 3,
        20,
        "3 failing runs",
    )
    wait_for(
        lambda: len([j for j in jobs_of(kube, namespace, "hist-failed") if not is_active(j)]) == 1,
        10,
        "failed history trimmed to 1",
    )


# --- run-now and one-off runs -----------------------------------------------------------------


def test_run_now_runs_once_per_token(kube: Kube, namespace: str, operator: OperatorProcess) -> None:
    kube.apply(scheduledjob("manual", namespace, schedule="0 0 1 1 *"))
    wait_for(
        lambda: status_of(kube, namespace, "manual").get("observedSchedule"),
        15,
        "the first decision",
    )
    kube.run("annotate", "sj", "manual", "-n", namespace, "cronlease.io/run-now=first")
    jobs = wait_for(lambda: jobs_of(kube, namespace, "manual"), 10, "the manual run")
    assert len(jobs) == 1
    assert jobs[0]["metadata"]["annotations"]["cronlease.io/trigger"] == "Manual"
    wait_for(
        lambda: status_of(kube, namespace, "manual").get("runNowToken") == "first", 10, "the ack"
    )
    # Re-applying the same token does nothing; a new token runs again.
    kube.run(
        "annotate", "--overwrite", "sj", "manual", "-n", namespace, "cronlease.io/run-now=first"
    )
    kube.run(
        "annotate", "--overwrite", "sj", "manual", "-n", namespace, "cronlease.io/run-now=second"
    )
    wait_for(lambda: len(jobs_of(kube, namespace, "manual")) == 2, 10, "the second manual run")
    wait_for(
        lambda: status_of(kube, namespace, "manual").get("runNowToken") == "second", 10, "the ack"
    )
    assert len(jobs_of(kube, namespace, "manual")) == 2


def test_one_off_run_at_runs_once_then_completes(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    run_at = (datetime.now(UTC) + timedelta(seconds=3)).replace(microsecond=0)
    kube.apply(scheduledjob("once", namespace, runAt=run_at.strftime("%Y-%m-%dT%H:%M:%SZ")))
    status = status_of(kube, namespace, "once")
    jobs = wait_for(lambda: jobs_of(kube, namespace, "once"), 15, "the one-off run")
    assert scheduled_at(jobs[0]) == run_at
    created = datetime.fromisoformat(
        jobs[0]["metadata"]["creationTimestamp"].replace("Z", "+00:00")
    )
    assert created >= run_at - timedelta(seconds=1), "not before its time"
    done = wait_for(
        lambda: condition(kube.get("sj", "once", namespace), "Completed") == "True", 15, "Completed"
    )
    assert done
    status = status_of(kube, namespace, "once")
    assert status.get("nextScheduleTime") is None
    assert len(jobs_of(kube, namespace, "once")) == 1


# --- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"schedule": "61 * * * *"}, "schedule"),
        ({"schedule": "every minute"}, "schedule"),
        ({"schedule": "TZ=Europe/Berlin 0 9 * * *"}, "timeZone"),
        ({"schedule": "* * * * *", "timeZone": "Mars/Olympus"}, "timeZone"),
        (
            {"schedule": "* * * * *", "runAt": "2030-01-01T00:00:00Z"},
            "exactly one of schedule, schedules and runAt",
        ),
        ({}, "exactly one of schedule, schedules and runAt"),
        ({"schedule": "* * * * *", "startingDeadlineSeconds": -1}, "startingDeadlineSeconds"),
        ({"schedule": "* * * * *", "successfulJobsHistoryLimit": -1}, "successfulJobsHistoryLimit"),
        ({"schedule": "* * * * *", "concurrencyPolicy": "Sometimes"}, "concurrencyPolicy"),
    ],
    ids=[
        "minute-61",
        "words",
        "tz-prefix",
        "unknown-zone",
        "both",
        "neither",
        "negative-deadline",
        "negative-history",
        "bad-policy",
    ],
)
def test_bad_specs_are_rejected_at_apply(
    kube: Kube, namespace: str, crd: str, override: dict[str, Any], field: str
) -> None:
    manifest = scheduledjob("bad", namespace, **override)
    result = kube.run("apply", "-f", "-", stdin=json.dumps(manifest), check=False)
    assert result.returncode != 0
    assert field in result.stderr, result.stderr


def test_selector_and_long_name_are_rejected_at_apply(kube: Kube, namespace: str, crd: str) -> None:
    manifest = scheduledjob("sel", namespace, schedule="* * * * *")
    manifest["spec"]["jobTemplate"]["spec"]["selector"] = {"matchLabels": {"a": "b"}}
    result = kube.create(manifest, check=False)
    assert result.returncode != 0
    assert "selector" in result.stderr, result.stderr
    long = scheduledjob("x" * 53, namespace, schedule="* * * * *")
    result = kube.create(long, check=False)
    assert result.returncode != 0
    assert "52" in result.stderr, result.stderr


def test_a_schedule_that_never_fires_is_reported_not_crashed_on(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    kube.apply(scheduledjob("feb30", namespace, schedule="0 0 30 2 *"))
    kube.apply(scheduledjob("fine", namespace, schedule="*/2 * * * * *"))
    invalid = wait_for(
        lambda: condition(kube.get("sj", "feb30", namespace), "InvalidSpec") == "True",
        15,
        "InvalidSpec",
    )
    assert invalid
    warnings = [e for e in events_of(kube, namespace, "feb30") if e["type"] == "Warning"]
    assert [e["reason"] for e in warnings] == ["InvalidSpec"]
    assert "never" in warnings[0]["message"]
    # The operator keeps scheduling the valid one and is still alive.
    wait_for(lambda: len(jobs_of(kube, namespace, "fine")) >= 2, 15, "the valid neighbour to run")
    assert operator.running


# --- what the pod knows of its run ------------------------------------------------------------


def environment_of(pod: dict[str, Any], container: dict[str, Any]) -> dict[str, str]:
    """A container's CRONLEASE_* variables as the kubelet would resolve them: the downward API's
    fieldRefs read from the pod the job controller made (kwok runs no container to ask)."""
    annotations = pod["metadata"].get("annotations") or {}
    resolved = {}
    for item in container.get("env") or []:
        path = item.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath", "")
        if item["name"].startswith("CRONLEASE_") and path.startswith("metadata.annotations['"):
            resolved[item["name"]] = annotations[path.removeprefix("metadata.annotations['")[:-2]]
    return resolved


def test_the_pods_know_their_slot_run_attempt_trigger_and_key(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    kube.apply(scheduledjob("knows", namespace, schedule="*/2 * * * * *"))
    jobs = wait_for(lambda: jobs_of(kube, namespace, "knows"), 15, "a scheduled run")
    kube.run("annotate", "sj", "knows", "-n", namespace, "cronlease.io/run-now=now")
    wait_for(
        lambda: any(
            j["metadata"]["annotations"]["cronlease.io/trigger"] == "Manual"
            for j in jobs_of(kube, namespace, "knows")
        ),
        10,
        "the manual run",
    )
    jobs = jobs_of(kube, namespace, "knows")
    keys = set()
    for job in jobs:
        name = job["metadata"]["name"]
        pods = wait_for(
            lambda name=name: kube.items("pods", namespace, f"job-name={name}"), 15, "its pod"
        )
        env = environment_of(pods[0], pods[0]["spec"]["containers"][0])
        annotations = job["metadata"]["annotations"]
        assert env["CRONLEASE_SCHEDULED_AT"] == annotations["cronlease.io/scheduled-at"]
        assert env["CRONLEASE_RUN"] == name
        assert env["CRONLEASE_ATTEMPT"] == "1"
        assert env["CRONLEASE_TRIGGER"] == annotations["cronlease.io/trigger"]
        assert len(env["CRONLEASE_IDEMPOTENCY_KEY"]) == 32
        keys.add(env["CRONLEASE_IDEMPOTENCY_KEY"])
    assert len(keys) == len(jobs)  # every slot, and the run-now, its own key
