"""A run and its attempts, as the Jobs say (issue 15): pure functions, no I/O.

A run is one slot's (or one run-now's) unit of work. Its first attempt is the Job named for the
slot; each retry is another Job, labelled with the run and its attempt number. What a run has
come to is read off its latest attempt, so a new leader, knowing only the Jobs, reaches the same
verdict. Two rules keep an attempt from being made twice:
- with spec.retry set, the attempts of a run stay held by the slot-record finalizer until the
  run has ended, so none of them can vanish (TTL, a user, history cleanup) while it goes on;
- once an attempt's successor exists, the attempt is labelled cronlease.io/retried, and its
  run's Jobs are released only after that: if a later attempt is deleted afterwards (history
  cleanup, a user), the earlier one never looks like the latest failure of a live run.
Deleting the current attempt ends the run.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from cronlease.core.names.jobinfo import NOT_RETRYABLE, JobInfo, JobState
from cronlease.core.specs.policies import RetryPolicy


class RunOutcome(enum.StrEnum):
    ACTIVE = "Active"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"  # without spec.retry: history, as a CronJob's failed Job
    RETRYING = "Retrying"  # an attempt failed; the next comes after its delay
    EXHAUSTED = "Exhausted"  # every attempt failed; the dead-letter label is still to be written
    DEAD_LETTERED = "DeadLettered"
    CANCELLED = "Deleted"  # its current attempt was deleted: no further attempt
    SUPERSEDED = "Superseded"  # its later attempts are gone; it ended (recentRuns knows how)
    REPLAYED = "Replayed"  # a dead letter a RunRequest replayed: history again, not kept


ONGOING = frozenset({RunOutcome.ACTIVE, RunOutcome.RETRYING, RunOutcome.EXHAUSTED})


@dataclass(frozen=True)
class Run:
    name: str
    attempts: tuple[JobInfo, ...]  # by attempt number, the latest last

    @property
    def latest(self) -> JobInfo:
        return self.attempts[-1]

    @property
    def unmarked(self) -> tuple[JobInfo, ...]:
        """Earlier attempts still to be labelled cronlease.io/retried."""
        return tuple(job for job in self.attempts[:-1] if not job.retried)

    def holds(self, retry: RetryPolicy | None) -> bool:
        """Whether its Jobs stay held: it goes on under `retry`, or a retried attempt is still
        to be marked (whatever the spec says now)."""
        return (retry is not None and self.outcome(retry) in ONGOING) or bool(self.unmarked)

    def outcome(self, retry: RetryPolicy | None) -> RunOutcome:
        latest = self.latest
        if latest.retried:
            return RunOutcome.SUPERSEDED
        if latest.state is JobState.SUCCEEDED:
            return RunOutcome.SUCCEEDED  # whoever deletes it now (a TTL), it succeeded
        if latest.state is JobState.FAILED and (retry is None or latest.max_attempts == 0):
            return RunOutcome.FAILED  # likewise, with no attempt to come: it failed
        if latest.deleting:
            return RunOutcome.CANCELLED
        if latest.state is JobState.ACTIVE:
            return RunOutcome.ACTIVE
        if latest.replayed:
            return RunOutcome.REPLAYED
        if retry is None or latest.max_attempts == 0:
            # No retries now, or none when the run began: a failed run is history, never
            # retried or dead-lettered after the fact (a Job ending otherwise than Failed).
            return RunOutcome.FAILED
        if latest.dead_letter:
            return RunOutcome.DEAD_LETTERED
        if retryable(latest, retry):
            return RunOutcome.RETRYING
        return RunOutcome.EXHAUSTED


def retryable(failed: JobInfo, retry: RetryPolicy) -> bool:
    """Attempts left under the policy the run began with, and under today's (lowering
    maxAttempts stops runs in flight; raising it does not extend them)."""
    allowed = min(failed.max_attempts, retry.max_attempts)
    return failed.attempt < allowed and failed.failure_reason != NOT_RETRYABLE


def runs_of(jobs: Iterable[JobInfo]) -> dict[str, Run]:
    """The runs of these (trusted, owned) Jobs, by run name."""
    grouped: dict[str, list[JobInfo]] = {}
    for job in jobs:
        grouped.setdefault(job.run_name, []).append(job)
    return {
        name: Run(name, tuple(sorted(attempts, key=lambda job: (job.attempt, job.name))))
        for name, attempts in grouped.items()
    }
