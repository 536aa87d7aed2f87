"""When a Job's slot-record finalizer goes, which kept it from vanishing before its run was
recorded: once nothing can run its slot again (docs/decisions/0009).
"""

from __future__ import annotations

from collections.abc import Sequence

from cronlease.core.decide.buffering import buffered
from cronlease.core.decide.decision import Decision, PlannedRelease, ScheduledJobView
from cronlease.core.names.jobinfo import JobInfo
from cronlease.core.names.naming import (
    ANNOTATION_RUN_NOW,
    REQUEST_TRIGGERS,
    TRIGGER_MANUAL,
    parse_time,
)


def plan_releases(
    sj: ScheduledJobView,
    jobs: Sequence[JobInfo],
    decision: Decision,
    settled_requests: set[str],
    ongoing: frozenset[str] = frozenset(),
    kept_held: frozenset[str] = frozenset(),
) -> None:
    """The slot-record finalizer of a Job goes once nothing can run its slot again: its run is
    recorded in the status as persisted (what this decision read, not what it will write), or
    the Job is not a run of this ScheduledJob at all (the finalizer is never ours to keep then).
    With retries, the attempts of a run that has not ended (`ongoing`) stay held: the next
    attempt is decided from them. A RunRequest's run is recorded once its request has recorded
    its result, or is gone."""
    processed = parse_time(sj.status.get("processedUntil"))
    # A slot still listed as waiting is not recorded: its run's record is the status write that
    # takes it off the list.
    waiting = set(buffered(sj.status))
    acknowledged = sj.status.get("runNowToken")
    requested = sj.annotations.get(ANNOTATION_RUN_NOW)
    for job in jobs:
        if not job.held:
            continue
        if not job.trusted or job.owner_uid != sj.uid:
            recorded = True
        elif job.run_name in ongoing or job.uid in kept_held:
            recorded = False
        elif job.trigger in REQUEST_TRIGGERS:
            recorded = job.run_name in settled_requests
        elif job.trigger == TRIGGER_MANUAL:
            # A token no longer requested is never run again; the current one once acknowledged.
            recorded = job.run_now_token in (acknowledged, None) or job.run_now_token != requested
        else:
            recorded = (
                processed is not None
                and job.slot is not None
                and job.slot <= processed
                and job.slot not in waiting
            )
        if recorded:
            decision.releases.append(PlannedRelease(job.name, job.uid, job.kind))
