"""The Run object of a multi-step slot (issue 17), and what a ScheduledJob's decisions read of it.

A ScheduledJob with `steps` runs each slot as a Run instead of a Job. The Run is named, labelled,
annotated, owned and held exactly as the slot's Job would be, so everything decide() promises
about slots (one run per slot, recorded before it can vanish, the concurrency policies, history)
holds unchanged: a Run is a JobInfo of kind Run. Its spec is an immutable snapshot of the steps;
its status is the supervisor's (cronlease.core.decide.supervision).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from cronlease.core.bodies.jobtemplate import run_metadata
from cronlease.core.bodies.runenv import idempotency_key
from cronlease.core.decide.decision import PlannedRun, ScheduledJobView
from cronlease.core.decide.supervision import FINISHED_RUN, RunPhase
from cronlease.core.names.jobinfo import JobInfo, JobState, job_info
from cronlease.core.names.naming import (
    FINALIZER_SUPERVISION,
    GROUP,
    RUN_KIND,
    VERSION,
    format_time,
    parse_time,
)
from cronlease.core.specs.steps import Steps, snapshot


def build_run(
    sj: ScheduledJobView, run: PlannedRun, steps: Steps, leader: str, fencing_token: int
) -> dict[str, Any]:
    metadata = run_metadata(sj, run, leader, fencing_token, {})
    metadata["finalizers"] = [*metadata["finalizers"], FINALIZER_SUPERVISION]
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": RUN_KIND,
        "metadata": metadata,
        "spec": {
            "scheduledJob": sj.name,
            "scheduledAt": format_time(run.slot),
            "trigger": run.trigger,
            "idempotencyKey": idempotency_key(sj.namespace, sj.name, run),
            **snapshot(steps),
        },
    }


def run_info(run: dict[str, Any]) -> JobInfo:
    """A Run as its ScheduledJob's decisions see it: a run that is active until its phase is
    final and its supervisor has let it go (none of its step Jobs lives: Forbid never starts the
    next run beside a step still stopping), then succeeded (every step did) or failed (whatever
    was compensated or cancelled)."""
    info = job_info(run)  # the metadata, read as a Job's; the status is a Run's own
    status = run.get("status")
    status = status if isinstance(status, dict) else {}
    phase = status.get("phase")
    state = JobState.ACTIVE
    finalizers = run["metadata"].get("finalizers")
    supervised = isinstance(finalizers, list) and FINALIZER_SUPERVISION in finalizers
    if phase in FINISHED_RUN and not supervised:
        state = JobState.SUCCEEDED if phase == RunPhase.SUCCEEDED else JobState.FAILED
    spec = run.get("spec")
    trusted = info.trusted and isinstance(spec, dict) and spec.get("scheduledJob") is not None
    return dataclasses.replace(
        info,
        state=state,
        started_at=parse_time(status.get("startedAt")),
        finished_at=parse_time(status.get("finishedAt")) if state is not JobState.ACTIVE else None,
        failure_reason=str(phase) if state is JobState.FAILED else "",
        trusted=trusted,
        kind=RUN_KIND,
    )
