"""Builders for the inputs of cronlease.core.decide.reconcile.decide(): a ScheduledJobView and its
JobInfos, and a World that chains decisions as the shell applies them; and for those of
cronlease.core.decide.supervision.supervise(): a RunView and its StepJobs.

Everything takes fixed, aware UTC datetimes; nothing here reads the clock.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from cronlease.core.decide.decision import Decision, DeletionReason, RequestTarget, ScheduledJobView
from cronlease.core.decide.reconcile import decide
from cronlease.core.decide.supervision import Action, RunPlan, RunView, StepJob, supervise
from cronlease.core.names.jobinfo import JobInfo, JobState
from cronlease.core.names.naming import (
    ANNOTATION_RUN_NOW,
    TRIGGER_SCHEDULE,
    format_time,
    scheduled_job_name,
)
from cronlease.core.specs.policies import RetryPolicy
from cronlease.core.specs.spec import parse_spec
from cronlease.core.specs.steps import Compensation, OnFailure, Step, Steps, snapshot

NAME = "backup"
NAMESPACE = "team-a"
UID = "uid-backup"
# A controller reference to the builders' ScheduledJob, as the operator writes it on its Jobs.
OWNER_REF = {
    "apiVersion": "cronlease.io/v1alpha1",
    "kind": "ScheduledJob",
    "name": NAME,
    "uid": UID,
    "controller": True,
}
OTHER_UID = "uid-someone-else"
HOURLY = "0 * * * *"
# Monday 2026-01-05, 08:30 UTC: the default creation time; the hourly schedule fires at 09:00.
CREATED = datetime(2026, 1, 5, 8, 30, tzinfo=UTC)


def utc(
    year: int,
    month: int,
    day: int,
    hour: int = 0,
    minute: int = 0,
    second: int = 0,
    micro: int = 0,
) -> datetime:
    return datetime(year, month, day, hour, minute, second, micro, tzinfo=UTC)


def seconds(value: float) -> timedelta:
    return timedelta(seconds=value)


def job_template() -> dict[str, Any]:
    return {
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox", "command": ["true"]}],
                }
            }
        }
    }


def spec(**fields: Any) -> dict[str, Any]:
    """An hourly spec with a valid jobTemplate; a field given as None is removed."""
    raw: dict[str, Any] = {"schedule": HOURLY, "jobTemplate": job_template()}
    raw.update(fields)
    return {key: value for key, value in raw.items() if value is not None}


def run_at_spec(run_at: datetime | str, **fields: Any) -> dict[str, Any]:
    text = format_time(run_at) if isinstance(run_at, datetime) else run_at
    return spec(schedule=None, runAt=text, **fields)


def trigger_key(raw_spec: dict[str, Any], name: str = NAME) -> str:
    return parse_spec(name, raw_spec).trigger_key


def processed(raw_spec: dict[str, Any], until: datetime, **extra: Any) -> dict[str, Any]:
    """A status saying every slot of `raw_spec` up to `until` was handled."""
    return {
        "observedSchedule": trigger_key(raw_spec),
        "processedUntil": format_time(until),
        **extra,
    }


def view(
    raw_spec: dict[str, Any] | None = None,
    *,
    status: dict[str, Any] | None = None,
    run_now: str | None = None,
    created_at: datetime = CREATED,
    name: str = NAME,
    generation: int = 1,
    uid: str = UID,
) -> ScheduledJobView:
    annotations = {ANNOTATION_RUN_NOW: run_now} if run_now is not None else {}
    return ScheduledJobView(
        name=name,
        namespace=NAMESPACE,
        uid=uid,
        generation=generation,
        created_at=created_at,
        spec=raw_spec if raw_spec is not None else spec(),
        status=status if status is not None else {},
        annotations=annotations,
    )


def job(
    name: str,
    *,
    state: JobState = JobState.ACTIVE,
    slot: datetime | None = None,
    uid: str | None = None,
    owner_uid: str | None = UID,
    trigger: str = TRIGGER_SCHEDULE,
    created_at: datetime | None = None,
    started_at: datetime | None = None,
    finished_at: datetime | None = None,
    deleting: bool = False,
    trusted: bool = True,
    held: bool = False,
    run_now_token: str | None = None,
    run: str = "",
    attempt: int = 1,
    dead_letter: bool = False,
    failure_reason: str = "",
    retried: bool = False,
    max_attempts: int = 0,
    replayed: bool = False,
    request: RequestTarget | None = None,
) -> JobInfo:
    return JobInfo(
        name=name,
        uid=uid if uid is not None else f"uid-{name}",
        owner_uid=owner_uid,
        slot=slot,
        trigger=trigger,
        created_at=created_at,
        started_at=started_at,
        finished_at=finished_at,
        state=state,
        deleting=deleting,
        namespace=NAMESPACE,
        trusted=trusted,
        held=held,
        run_now_token=run_now_token,
        run=run,
        attempt=attempt,
        dead_letter=dead_letter,
        failure_reason=failure_reason,
        retried=retried,
        max_attempts=max_attempts,
        replayed=replayed,
        request_name=request.name if request else "",
        request_uid=request.uid if request else "",
        request_index=request.index if request else -1,
    )


def slot_job(
    slot: datetime,
    *,
    state: JobState = JobState.ACTIVE,
    finished_at: datetime | None = None,
    with_seconds: bool = False,
    **fields: Any,
) -> JobInfo:
    """A Job as the operator would have created it for `slot` (named after the slot)."""
    if finished_at is None and state is not JobState.ACTIVE:
        finished_at = slot + timedelta(minutes=5)
    return job(
        scheduled_job_name(NAME, slot, with_seconds),
        state=state,
        slot=slot,
        created_at=slot,
        started_at=slot,
        finished_at=finished_at,
        **fields,
    )


def created_jobs(decision: Decision, *, with_uids: bool = True) -> list[JobInfo]:
    """The Jobs the shell creates for `decision.runs`, as the next decision sees them (active)."""
    return [
        job(
            run.job_name,
            uid=None if with_uids else "",
            slot=run.slot,
            trigger=run.trigger,
            created_at=run.slot,
            run_now_token=run.run_now_token,
            run=run.run,
            attempt=run.attempt,
            max_attempts=run.max_attempts,
            request=run.request,
        )
        for run in decision.runs
    ]


def after_apply(
    sj: ScheduledJobView,
    jobs: Sequence[JobInfo],
    decision: Decision,
    *,
    with_uids: bool = True,
) -> tuple[ScheduledJobView, list[JobInfo]]:
    """The world after the shell applied `decision`: status written, Jobs created and deleted."""
    deleted = {deletion.uid for deletion in decision.deletions}
    remaining = [existing for existing in jobs if existing.uid not in deleted]
    return (
        dataclasses.replace(sj, status=decision.status),
        remaining + created_jobs(decision, with_uids=with_uids),
    )


class World:
    """A ScheduledJob (every slot up to 08:00 of CREATED's day handled) and its Jobs, decided at
    the instants the test names and applied as the shell applies a decision: status written,
    Jobs created and deleted, a Job cancelled by CancelOther kept (deleting) until gone(). The
    test finishes Jobs between decisions."""

    def __init__(self, raw: dict[str, Any], jobs: Sequence[JobInfo] = ()) -> None:
        self.sj: ScheduledJobView = view(raw, status=processed(raw, utc(2026, 1, 5, 8)))
        self.jobs: list[JobInfo] = list(jobs)

    def decide(self, now: datetime) -> Decision:
        decision = decide(self.sj, self.jobs, now)
        cancelled = {d.uid for d in decision.deletions if d.reason is DeletionReason.CANCEL_OTHER}
        lingering = [dataclasses.replace(j, deleting=True) for j in self.jobs if j.uid in cancelled]
        self.sj, self.jobs = after_apply(self.sj, self.jobs, decision)
        self.jobs += lingering  # a foreground deletion: the Job stays until its pods are gone
        return decision

    def finish(self, state: JobState, at: datetime, slot: datetime | None = None) -> None:
        """Every unfinished Job (or only `slot`'s) ends in `state` at `at`."""
        self.jobs = [
            dataclasses.replace(job, state=state, finished_at=at)
            if not job.finished and slot in (None, job.slot)
            else job
            for job in self.jobs
        ]

    def gone(self) -> None:
        """The Jobs being deleted are gone."""
        self.jobs = [job for job in self.jobs if not job.deleting]

    def annotate(self, key: str, value: str) -> None:
        self.sj = dataclasses.replace(self.sj, annotations={**self.sj.annotations, key: value})


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    matches: list[dict[str, Any]] = [
        c for c in status.get("conditions") or [] if c.get("type") == kind
    ]
    assert len(matches) == 1, f"expected one {kind} condition, got {matches}"
    return matches[0]


def skip_counts(decision: Decision) -> dict[str, int]:
    """Skipped slots per reason, summed over the decision's SkippedSlots entries."""
    counts: dict[str, int] = {}
    for skipped in decision.skips:
        counts[skipped.reason.value] = counts.get(skipped.reason.value, 0) + skipped.count
    return counts


def event_reasons(decision: Decision) -> list[str]:
    return [event.reason for event in decision.events]


def names(items: Iterable[Any]) -> list[str]:
    """The job_name of each PlannedRun / PlannedDeletion, in order."""
    return [item.job_name for item in items]


# --- multi-step Runs (cronlease.core.decide.supervision) ------------------------------------------

# When the builders' Runs run: a finished StepJob ends then unless told otherwise.
RUN_START = datetime(2026, 12, 1, 2, 0, tzinfo=UTC)
STEP_TEMPLATE = {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}}
ONE_STEP = Steps((Step("only", STEP_TEMPLATE),), OnFailure.STOP)


def run_view(
    steps: Steps = ONE_STEP,
    status: dict[str, Any] | None = None,
    deleting: bool = False,
    *,
    generation: int = 1,
) -> RunView:
    """The Run close-1 of namespace bank, its spec a snapshot of `steps`."""
    return RunView(
        "close-1", "bank", "run-uid", snapshot(steps), status or {}, deleting, generation
    )


def step_job(
    step: str = "only",
    attempt: int = 1,
    state: JobState = JobState.ACTIVE,
    action: Action = Action.RUN,
    **fields: Any,
) -> StepJob:
    """A Job of the builders' Run for `step`, named `<step>-<action>-<attempt>`; a finished one
    ended at RUN_START unless `finished_at` says otherwise."""
    return StepJob(
        name=f"{step}-{action.value}-{attempt}",
        uid=f"uid-{step}-{action.value}-{attempt}",
        run_uid=fields.pop("run_uid", "run-uid"),
        step=step,
        action=action,
        attempt=attempt,
        state=state,
        finished_at=fields.pop("finished_at", RUN_START if state is not JobState.ACTIVE else None),
        **fields,
    )


# The bank close: three steps, the first undone when a later one fails for good.
TWICE = RetryPolicy(max_attempts=2, initial_seconds=5, factor=1)


def bank_close(
    on_failure: OnFailure = OnFailure.COMPENSATE,
    retry: RetryPolicy = TWICE,
    heartbeat: int | None = None,
) -> Steps:
    undo = Compensation(STEP_TEMPLATE, RetryPolicy(max_attempts=1))
    return Steps(
        (
            Step("snapshot", STEP_TEMPLATE, compensate=undo),
            Step("interest", STEP_TEMPLATE, ("snapshot",), retry, heartbeat_seconds=heartbeat),
            Step("publish", STEP_TEMPLATE, ("interest",)),
        ),
        on_failure,
    )


def phases(plan: RunPlan) -> dict[str, tuple[str, int]]:
    return {e["name"]: (e["phase"], e["attempt"]) for e in plan.status["steps"]}


def run_through(
    steps: Steps, jobs: list[StepJob], now: datetime, status: dict[str, Any] | None = None
) -> RunPlan:
    return supervise(run_view(steps, status), jobs, {}, now)


def status_at(steps: Steps, *entries: tuple[str, str, int], **extra: Any) -> dict[str, Any]:
    by_name = {name: (phase, attempt) for name, phase, attempt in entries}
    return {
        "phase": "Running",
        "steps": [
            {
                "name": step.name,
                "phase": by_name.get(step.name, ("Pending", 0))[0],
                "attempt": by_name.get(step.name, ("Pending", 0))[1],
                "startedAt": "2026-12-01T02:00:00Z",
                **({"order": 1} if by_name.get(step.name, ("",))[0] == "Succeeded" else {}),
            }
            for step in steps.steps
        ],
        **extra,
    }
