"""What the chaos auditor saw of each Job, and its audit of runs and their attempts (issue 15).

Pure: no I/O. bench/chaos.py feeds it every Job event it watches and the times of its faults.

A run is its first attempt (the Job named for the slot) and the retries labelled with that run
and an attempt number. Whatever faults hit it, each run must show attempts 1..k, each once
(duplicated attempts, gaps), k no more than the policy it began under allows, and no attempt
after one that succeeded or failed for good. A run ends as its latest attempt says:
- succeeded;
- failed with attempts left: its next attempt must follow, unless a user deleted the failed
  attempt (deleting a run's current attempt ends the run, cronlease/runs.py); otherwise it is a
  lost attempt;
- failed for good (attempts exhausted, or a podFailurePolicy FailJob): its Job must be labelled
  a dead letter;
- cancelled: a user deleted its current attempt;
- still going: it ended (or failed) too recently for the operator to have acted when the audit
  looked, or its latest attempt still runs.

The label and annotation names are spelled out here, not imported from the operator, so that a
rename there shows up in the audit.
"""

from __future__ import annotations

import enum
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

LABEL_SCHEDULEDJOB = "cronlease.io/scheduledjob"
LABEL_RUN = "cronlease.io/run"
LABEL_ATTEMPT = "cronlease.io/attempt"
LABEL_DEAD_LETTER = "cronlease.io/dead-letter"
ANNOTATION_SCHEDULED_AT = "cronlease.io/scheduled-at"
ANNOTATION_LEADER = "cronlease.io/leader"
ANNOTATION_FENCING_TOKEN = "cronlease.io/fencing-token"
ANNOTATION_MAX_ATTEMPTS = "cronlease.io/max-attempts"
# A RunRequest's runs (replays, backfills): their trigger, and the request and target they are for.
LABEL_TRIGGER = "cronlease.io/trigger"
REQUEST_TRIGGERS = frozenset({"Replay", "Backfill"})
ANNOTATION_REQUEST_UID = "cronlease.io/request-uid"
ANNOTATION_REQUEST_INDEX = "cronlease.io/request-index"
# The Job controller's reason for a failure a podFailurePolicy FailJob rule decided: final.
NOT_RETRYABLE = "PodFailurePolicy"
# How long after an attempt fails (as the auditor saw it) its next attempt, or its dead-letter
# label, must be there: the backoff here is at most 2 s, and the audit comes after a quiet end.
SETTLE_SECONDS = 10.0


class UserDeleted(enum.StrEnum):
    NO = ""
    RUNNING = "running"  # deleted as it appeared, before it ended
    WAITING = "waiting"  # deleted once it had failed, while its run waited for the next attempt


def parse_instant(text: Any) -> datetime | None:
    """An RFC 3339 time as the API server and the operator write it; None if it is not one."""
    if not isinstance(text, str):
        return None
    try:
        instant = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return instant if instant.tzinfo is not None else None


def _number(text: str | None, default: int) -> int:
    return int(text) if text and text.isascii() and text.isdigit() else default


def _epoch(text: Any) -> float | None:
    instant = parse_instant(text)
    return None if instant is None else instant.timestamp()


@dataclass
class Seen:
    """One Job as the auditor saw it: what it was created with, then how it ended."""

    uid: str
    name: str
    scheduledjob: str
    slot: float  # epoch seconds
    leader: str
    token: int
    arrived: float  # when the auditor first saw it (its clock, epoch seconds)
    run: str = ""
    attempt: int = 1
    max_attempts: int = 0  # the retry policy its run began under (0: none)
    created: float | None = None  # creationTimestamp (the API server's clock, whole seconds)
    ended: float | None = None  # when the auditor first saw it finished (its clock)
    succeeded: bool = False
    failure_reason: str = ""
    dead_letter: bool = False  # ever seen labelled so
    deleted: float | None = None  # deletionTimestamp (the API server's clock)
    user_deleted: UserDeleted = UserDeleted.NO
    trigger: str = ""
    request_uid: str = ""  # a RunRequest's run: the request's uid and the target's index
    request_index: int = -1

    @property
    def from_request(self) -> bool:
        """A replay's or a backfill's: its slot is a past one, already run or not, so the slot
        audit leaves it to the request audit (hack/chaos_requests.py)."""
        return bool(self.request_uid) or self.trigger in REQUEST_TRIGGERS

    @property
    def failed(self) -> bool:
        return self.ended is not None and not self.succeeded

    @property
    def retryable(self) -> bool:
        """Failed with attempts left: its run must go on, unless a user ended it."""
        return (
            self.failed
            and self.failure_reason != NOT_RETRYABLE
            and self.attempt < self.max_attempts
        )

    def observe(self, job: dict[str, Any], now: float) -> None:
        """Take what a later event of this Job says: how it ended, its labels, its deletion."""
        metadata = job.get("metadata") or {}
        if (metadata.get("labels") or {}).get(LABEL_DEAD_LETTER) == "true":
            self.dead_letter = True
        if self.deleted is None:
            self.deleted = _epoch(metadata.get("deletionTimestamp"))
        if self.ended is not None:
            return
        if job.get("kind") == "Run":  # a multi-step run: ended once its phase is final
            phase = (job.get("status") or {}).get("phase")
            if phase in RUN_ENDED:
                self.ended = now
                self.succeeded = phase == "Succeeded"
                self.failure_reason = str(phase) if phase != "Succeeded" else ""
            return
        for condition in (job.get("status") or {}).get("conditions") or []:
            if not isinstance(condition, dict) or condition.get("status") != "True":
                continue
            if condition.get("type") in ("Complete", "Failed"):
                self.ended = now
                self.succeeded = condition["type"] == "Complete"
                self.failure_reason = str(condition.get("reason") or "")


def seen(job: dict[str, Any], now: float) -> Seen | None:
    """A Job at its first sighting; None if it names no slot (not the operator's)."""
    metadata = job["metadata"]
    annotations = metadata.get("annotations") or {}
    labels = metadata.get("labels") or {}
    slot = parse_instant(annotations.get(ANNOTATION_SCHEDULED_AT))
    if slot is None:
        return None
    name = metadata.get("name", "")
    entry = Seen(
        uid=metadata["uid"],
        name=name,
        scheduledjob=labels.get(LABEL_SCHEDULEDJOB, ""),
        slot=slot.timestamp(),
        leader=annotations.get(ANNOTATION_LEADER, ""),
        token=_number(annotations.get(ANNOTATION_FENCING_TOKEN), -1),
        arrived=now,
        run=labels.get(LABEL_RUN, name),
        attempt=_number(labels.get(LABEL_ATTEMPT), 1),
        max_attempts=_number(annotations.get(ANNOTATION_MAX_ATTEMPTS), 0),
        created=_epoch(metadata.get("creationTimestamp")),
        trigger=labels.get(LABEL_TRIGGER, ""),
        request_uid=annotations.get(ANNOTATION_REQUEST_UID, ""),
        request_index=_number(annotations.get(ANNOTATION_REQUEST_INDEX), -1),
    )
    entry.observe(job, now)
    return entry


# The final phases of a multi-step Run (cronlease.io/v1alpha1), as the operator writes them.
RUN_ENDED = frozenset({"Succeeded", "Failed", "Compensated", "CompensationFailed"})


class Verdict(enum.StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # no retry policy: history, as a CronJob's failed Job
    RETRIED_OUT = "dead-lettered"
    NOT_RETRYABLE = "dead-lettered (not retryable)"
    CANCELLED_RUNNING = "cancelled: current attempt deleted while it ran"
    CANCELLED_WAITING = "cancelled: failed attempt deleted while the run waited"
    ENDED_OTHERWISE = "deleted by someone else before it ended"
    GOING = "still going at the end: its latest attempt runs"
    WAITING = "still going at the end: its latest attempt failed just before"
    LOST = "lost: failed with attempts left, no next attempt"
    UNLABELLED = "exhausted, not labelled a dead letter"


# A run that came to one of these has ended: none of its Jobs may stay held but a dead letter.
ENDED = frozenset(Verdict) - {Verdict.GOING, Verdict.WAITING, Verdict.LOST, Verdict.UNLABELLED}


def runs_of(jobs: Iterable[Seen]) -> dict[tuple[str, str], list[Seen]]:
    """Every Job seen, by (ScheduledJob, run), each run's attempts in order."""
    runs: dict[tuple[str, str], list[Seen]] = {}
    for job in jobs:
        runs.setdefault((job.scheduledjob, job.run), []).append(job)
    for attempts in runs.values():
        attempts.sort(key=lambda job: (job.attempt, job.arrived))
    return runs


def verdict(attempts: Sequence[Seen], settled_before: float) -> Verdict:
    """What a run (its attempts in order) came to; an attempt that ended after `settled_before`
    is too recent to judge what followed it."""
    latest = attempts[-1]
    if latest.user_deleted is UserDeleted.WAITING:
        return Verdict.CANCELLED_WAITING
    if latest.user_deleted is UserDeleted.RUNNING:
        return Verdict.CANCELLED_RUNNING
    if latest.ended is None:
        return Verdict.ENDED_OTHERWISE if latest.deleted is not None else Verdict.GOING
    if latest.succeeded:
        return Verdict.SUCCEEDED
    if latest.max_attempts == 0:
        return Verdict.FAILED
    if latest.dead_letter:
        if latest.failure_reason == NOT_RETRYABLE:
            return Verdict.NOT_RETRYABLE
        return Verdict.RETRIED_OUT
    if latest.ended > settled_before:
        return Verdict.WAITING
    return Verdict.LOST if latest.retryable else Verdict.UNLABELLED


def audit_runs(
    jobs: Iterable[Seen], audited_at: float, leader_faults: Sequence[float]
) -> dict[str, Any]:
    """The figures of the runs (what each came to, for runs with spec.retry only): `audited_at`
    on the auditor's clock, `leader_faults` the times a fault on the leader began (a kill, a
    pause, its Lease held)."""
    runs = runs_of(jobs)
    verdicts: dict[str, int] = {}
    succeeded_on: dict[str, int] = {}
    duplicated = gaps = over = needless = retries = by_new_leader = continued = 0
    between: set[tuple[str, str]] = set()
    durations: list[float] = []  # of the attempts of runs with retries, as the auditor saw them
    for key, attempts in runs.items():
        numbers = [job.attempt for job in attempts]
        duplicated += len(numbers) - len(set(numbers))
        gaps += len(set(range(1, max(numbers) + 1)) - set(numbers))
        first = attempts[0]
        over += max(0, max(numbers) - max(first.max_attempts, 1))
        retries += sum(1 for number in set(numbers) if number > 1)
        by_number = {job.attempt: job for job in attempts}
        for job in by_number.values():
            after = by_number.get(job.attempt + 1)
            if after is None:
                continue
            # A next attempt after a success or a final failure (as far as the auditor saw).
            if job.succeeded or (job.failed and not job.retryable):
                needless += 1
            if after.token != job.token:
                by_new_leader += 1
            if (
                job.user_deleted is UserDeleted.WAITING
                and job.deleted is not None
                and after.created is not None
                and after.created > job.deleted
            ):
                continued += 1
            # A fault on the leader began while the run waited for this next attempt.
            failed_at = job.ended or math.inf
            if job.retryable and any(failed_at < t < after.arrived for t in leader_faults):
                between.add(key)
        if not first.max_attempts:
            continue  # without spec.retry a run is one Job, which the slot audit covers
        durations += [job.ended - job.arrived for job in attempts if job.ended is not None]
        result = verdict(attempts, audited_at - SETTLE_SECONDS)
        verdicts[result.value] = verdicts.get(result.value, 0) + 1
        if result is Verdict.SUCCEEDED:
            number = str(attempts[-1].attempt)
            succeeded_on[number] = succeeded_on.get(number, 0) + 1
    return {
        "runs": len(runs),
        "retry_runs": sum(1 for attempts in runs.values() if attempts[0].max_attempts),
        "retries_created": retries,
        "duplicated_attempts": duplicated,
        "attempt_gaps": gaps,
        "attempts_over_max": over,
        "attempts_after_final": needless,
        "lost_attempts": verdicts.get(Verdict.LOST.value, 0),
        "exhausted_not_dead_lettered": verdicts.get(Verdict.UNLABELLED.value, 0),
        "next_attempt_by_new_leader": by_new_leader,
        "runs_waiting_at_leader_fault": len(between),
        "continued_after_user_delete": continued,
        "attempt_seconds_median": round(statistics.median(durations), 1) if durations else 0.0,
        "attempt_seconds_max": round(max(durations, default=0.0), 1),
        "succeeded_on_attempt": dict(sorted(succeeded_on.items())),
        "runs_by_verdict": dict(sorted(verdicts.items())),
    }
