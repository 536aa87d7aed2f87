"""The hourly ScheduledJob the decide() tables decide on (tests/unit/core/test_decide_*.py):
its slots on Monday 2026-01-05, the Jobs and views the tables share, the skip reasons as the
status writes them, and the Job name of a slot computed independently of the operator's naming.

Each table builds a ScheduledJobView, the Jobs the live model says it owns, and a fixed `now`, then
checks the Decision: planned runs and deletions, skipped slots, events, the status to write and
when to wake up. No clock, no cluster."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from builders import (
    NAME,
    OTHER_UID,
    UID,
    after_apply,
    condition,
    job,
    processed,
    run_at_spec,
    seconds,
    slot_job,
    spec,
    utc,
    view,
)

from cronlease.core.decide.decision import Decision, ScheduledJobView, SkipReason
from cronlease.core.decide.reconcile import decide
from cronlease.core.names.jobinfo import JobInfo, JobState
from cronlease.core.names.naming import (
    TRIGGER_MANUAL,
    TRIGGER_SCHEDULE,
    format_time,
)

ACTIVE, SUCCEEDED, FAILED = JobState.ACTIVE, JobState.SUCCEEDED, JobState.FAILED


SUPERSEDED = SkipReason.SUPERSEDED.value


DEADLINE = SkipReason.DEADLINE_EXCEEDED.value


FORBID = SkipReason.CONCURRENCY_FORBID.value


SUSPENDED = SkipReason.SUSPENDED.value


# Hourly slots on Monday 2026-01-05 (the builders' default schedule and creation day).
H09, H10, H11, H12, H13 = (utc(2026, 1, 5, hour) for hour in (9, 10, 11, 12, 13))


def slot_name(slot: datetime) -> str:
    """Reference implementation of a 5-field schedule's Job name: minutes since the epoch."""
    return f"{NAME}-{int(slot.timestamp()) // 60}"


def ts(instant: datetime) -> str:
    return format_time(instant)


DAILY = "0 9 * * *"


RUNNING = slot_job(H11, uid="uid-running")


RUNNING_2 = job("backup-manual", uid="uid-running-2", trigger=TRIGGER_MANUAL)


STOPPING = slot_job(H10, uid="uid-stopping", deleting=True)


DONE_OK = slot_job(H09, state=SUCCEEDED)


DONE_BAD = slot_job(utc(2026, 1, 5, 8), state=FAILED)


FOREIGN = job("other-123", uid="uid-foreign", owner_uid=OTHER_UID)


ORPHAN = job("backup-orphan", uid="uid-orphan", owner_uid=None)


IDLE_NOW = utc(2026, 1, 5, 11, 20)  # between slots: nothing scheduled is due


def run_now_view(token: str | None = "tok-1", **fields: Any) -> ScheduledJobView:
    raw = spec(**fields)
    return view(raw, status=processed(raw, H11), run_now=token)


RUN_AT = utc(2026, 1, 5, 10, 0)


def completed(decision: Decision) -> tuple[str, str]:
    found = condition(decision.status, "Completed")
    return found["status"], found["reason"]


def finished_job(
    name: str,
    state: JobState,
    *,
    finished: int | None = None,
    started: int | None = None,
    created: int | None = None,
    trigger: str = TRIGGER_SCHEDULE,
    owner_uid: str | None = UID,
    deleting: bool = False,
) -> JobInfo:
    """A Job whose timestamps are minutes after 08:00 on the test day."""

    def at(minute: int | None) -> datetime | None:
        return None if minute is None else utc(2026, 1, 5, 8) + timedelta(minutes=minute)

    return job(
        name,
        state=state,
        finished_at=at(finished),
        started_at=at(started),
        created_at=at(created),
        trigger=trigger,
        owner_uid=owner_uid,
        deleting=deleting,
    )


HISTORY_CASES = [
    pytest.param(
        {"successfulJobsHistoryLimit": 2},
        [finished_job(f"ok-{i}", SUCCEEDED, finished=10 * i) for i in (3, 1, 4, 2)],
        ["ok-1", "ok-2"],
        id="succeeded-over-limit",
    ),
    pytest.param(
        {},
        [finished_job(f"ok-{i}", SUCCEEDED, finished=i) for i in (1, 2, 3)],
        [],
        id="succeeded-default-limit-3",
    ),
    pytest.param(
        {},
        [finished_job(f"bad-{i}", FAILED, finished=i) for i in (3, 1, 2)],
        ["bad-1", "bad-2"],
        id="failed-default-limit-1",
    ),
    pytest.param(
        {"failedJobsHistoryLimit": 0, "successfulJobsHistoryLimit": 0},
        [
            finished_job("bad", FAILED, finished=1),
            finished_job("ok", SUCCEEDED, finished=2),
            finished_job("running", ACTIVE, created=0),
        ],
        ["ok", "bad"],
        id="zero-limits-spare-active",
    ),
    pytest.param(
        {"successfulJobsHistoryLimit": 1},
        [
            # finished_at, falling back to started_at, then created_at
            finished_job("by-finish", SUCCEEDED, finished=30, started=1, created=0),
            finished_job("by-start", SUCCEEDED, started=20, created=0),
            finished_job("by-creation", SUCCEEDED, created=40),
            finished_job("no-time", SUCCEEDED),
        ],
        ["no-time", "by-start", "by-finish"],
        id="fallback-ordering",
    ),
    pytest.param(
        {"successfulJobsHistoryLimit": 1},
        [
            finished_job("manual-new", SUCCEEDED, finished=50, trigger=TRIGGER_MANUAL),
            finished_job("sched-old", SUCCEEDED, finished=40),
        ],
        ["sched-old"],
        id="manual-runs-count",
    ),
    pytest.param(
        {"successfulJobsHistoryLimit": 1},
        [
            finished_job("gone", SUCCEEDED, finished=1, deleting=True),
            finished_job("foreign", SUCCEEDED, finished=2, owner_uid=OTHER_UID),
            finished_job("older", SUCCEEDED, finished=3),
            finished_job("newer", SUCCEEDED, finished=4),
        ],
        ["older"],
        id="ignores-deleting-and-foreign",
    ),
    pytest.param(
        {"successfulJobsHistoryLimit": 1, "failedJobsHistoryLimit": 1},
        [
            finished_job("ok-old", SUCCEEDED, finished=1),
            finished_job("bad-new", FAILED, finished=5),
            finished_job("ok-new", SUCCEEDED, finished=2),
            finished_job("bad-old", FAILED, finished=4),
        ],
        ["ok-old", "bad-old"],
        id="limits-per-state",
    ),
]


def recent(job_name: str, result: str, slot: datetime = H09) -> dict[str, Any]:
    return {
        "slot": ts(slot),
        "job": job_name,
        "trigger": TRIGGER_SCHEDULE,
        "result": result,
        "lagSeconds": 0.25,
    }


def scenario(name: str) -> tuple[ScheduledJobView, list[JobInfo], datetime]:
    deadline = spec(startingDeadlineSeconds=60)
    forbid = spec(concurrencyPolicy="Forbid")
    replace = spec(concurrencyPolicy="Replace")
    at = run_at_spec(RUN_AT)
    done = [finished_job(f"backup-ok-{i}", SUCCEEDED, finished=i) for i in range(5)]
    scenarios: dict[str, tuple[ScheduledJobView, list[JobInfo], datetime]] = {
        "fresh-run": (view(), [], H09 + seconds(2)),
        "fresh-idle": (view(), [], utc(2026, 1, 5, 8, 45)),
        "missed-slots": (view(status=processed(spec(), H09)), [], H12 + seconds(300)),
        "deadline-skip": (view(deadline, status=processed(deadline, H09)), [], H12 + seconds(300)),
        "suspended": (view(spec(suspend=True), status=processed(spec(), H09)), [], H12),
        "schedule-edit": (
            view(spec(schedule="30 * * * *"), status=processed(spec(), H09)),
            [],
            H12,
        ),
        "forbid": (view(forbid, status=processed(forbid, H11)), [RUNNING], H12),
        "replace": (view(replace, status=processed(replace, H11)), [RUNNING], H12),
        "history": (view(status=processed(spec(), H11)), done, IDLE_NOW),
        "run-now": (run_now_view(), [], IDLE_NOW),
        "run-at-future": (view(at), [], RUN_AT - seconds(60)),
        "run-at-past": (view(at), [], RUN_AT + seconds(60)),
        "invalid": (view(spec(schedule="0 0 30 2 *")), [], H12),
    }
    return scenarios[name]


SCENARIOS = [
    "fresh-run",
    "fresh-idle",
    "missed-slots",
    "deadline-skip",
    "suspended",
    "schedule-edit",
    "forbid",
    "replace",
    "history",
    "run-now",
    "run-at-future",
    "run-at-past",
    "invalid",
]


def twice(name: str, *, with_uids: bool) -> tuple[Decision, Decision]:
    sj, jobs, now = scenario(name)
    first = decide(sj, jobs, now)
    sj2, jobs2 = after_apply(sj, jobs, first, with_uids=with_uids)
    return first, decide(sj2, jobs2, now)


INVALID = [
    pytest.param(NAME, spec(runAt="2026-01-05T10:00:00Z"), "runAt", id="schedule-and-run-at"),
    pytest.param(NAME, spec(schedule=None), "schedule", id="neither"),
    pytest.param(NAME, spec(schedule="0 0 30 2 *"), "spec.schedule", id="never-fires"),
    pytest.param(NAME, spec(schedule="61 * * * *"), "spec.schedule", id="bad-minute"),
    pytest.param(NAME, spec(timeZone="Mars/Olympus_Mons"), "spec.timeZone", id="bad-zone"),
    pytest.param("x" * 53, spec(), "metadata.name", id="name-too-long"),
    pytest.param(
        NAME,
        spec(startingDeadlineSeconds=-1),
        "spec.startingDeadlineSeconds",
        id="negative-deadline",
    ),
    pytest.param(
        NAME,
        spec(successfulJobsHistoryLimit="3"),
        "spec.successfulJobsHistoryLimit",
        id="limit-not-int",
    ),
    pytest.param(
        NAME, spec(concurrencyPolicy="Sometimes"), "spec.concurrencyPolicy", id="bad-policy"
    ),
    pytest.param(
        NAME,
        spec(jobTemplate={"spec": {"selector": {"matchLabels": {"a": "b"}}}}),
        "spec.jobTemplate.spec.selector",
        id="selector",
    ),
    pytest.param(NAME, spec(jobTemplate=None), "spec.jobTemplate", id="no-template"),
    pytest.param(NAME, run_at_spec("tomorrow"), "spec.runAt", id="bad-run-at"),
]


BERLIN_DAILY = spec(schedule="30 2 * * *", timeZone="Europe/Berlin")


def walk(raw: dict[str, Any], start: datetime, end: datetime, step: timedelta) -> list[datetime]:
    """Decide every `step` from `start` to `end`, applying each decision; the slots run."""
    sj = view(raw, status=processed(raw, start))
    jobs: list[JobInfo] = []
    ran: list[datetime] = []
    now = start
    while now <= end:
        decision = decide(sj, jobs, now)
        assert decision.skips == [], (now, decision.skips)
        ran += [run.slot for run in decision.runs]
        sj, jobs = after_apply(sj, jobs, decision)
        now += step
    return ran
