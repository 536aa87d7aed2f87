"""What every part of decide() (cronlease.core.decide.reconcile) reads: the ScheduledJob, its
spec, its runs and the time, with the Decision and the status being built. The parts take this
one context rather than the same facts passed down one by one, as the requests' parts take
cronlease.core.decide.requestplan.RequestContext.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cronlease.core.decide.decision import Decision, ScheduledJobView
from cronlease.core.decide.runs import Run, RunOutcome, runs_of
from cronlease.core.names.jobinfo import JobInfo, JobState
from cronlease.core.specs.spec import ConcurrencyPolicy, Spec


@dataclass(slots=True)
class SlotContext:
    """The facts of one decision for a ScheduledJob with a valid spec."""

    sj: ScheduledJobView
    spec: Spec
    # The Jobs that are its runs: trusted, under its owner reference.
    owned: Sequence[JobInfo]
    # Names held by Jobs that are not its runs: a run named so is never created.
    taken: frozenset[str]
    runs: dict[str, Run]  # the runs of `owned`, by run name
    outcomes: dict[str, RunOutcome]  # what each run has come to, by run name
    # The latest attempts of the runs waiting for their next: active for the concurrency policy.
    waiting: Sequence[JobInfo]
    max_attempts: int  # what a new run may make, under spec.retry (0: no retries)
    now: datetime
    status: dict[str, Any]  # the status being written, a copy of the ScheduledJob's
    decision: Decision  # being built

    @classmethod
    def of(
        cls,
        sj: ScheduledJobView,
        spec: Spec,
        owned: Sequence[JobInfo],
        taken: frozenset[str],
        now: datetime,
    ) -> SlotContext:
        """The context of a decision at `now`, with nothing decided yet."""
        runs = runs_of(owned)
        outcomes = {name: run.outcome(spec.retry) for name, run in runs.items()}
        return cls(
            sj,
            spec,
            owned,
            taken,
            runs,
            outcomes,
            # A run waiting for its next attempt is active for the concurrency policy.
            waiting=[runs[name].latest for name, o in outcomes.items() if o is RunOutcome.RETRYING],
            max_attempts=spec.retry.max_attempts if spec.retry else 0,
            now=now,
            status=dict(sj.status),
            decision=Decision(keep_runs_held=spec.retry is not None),
        )

    def live(self, state: JobState) -> list[JobInfo]:
        """The owned Jobs in `state` that stay: neither being deleted nor planned for
        deletion."""
        doomed = {deletion.uid for deletion in self.decision.deletions}
        return [
            job
            for job in self.owned
            if job.state is state and not job.deleting and job.uid not in doomed
        ]

    def clearing(self) -> list[JobInfo]:
        """Runs being deleted that had not ended: their pods may still run (CancelOther
        waits)."""
        return [job for job in self.owned if job.deleting and job.state is JobState.ACTIVE]

    def busy(self) -> bool:
        """Whether a run goes on or is planned: an active Job, a run waiting for its next
        attempt, a run this decision starts, or under CancelOther one still being cleared."""
        return bool(
            self.live(JobState.ACTIVE)
            or self.waiting
            or self.decision.runs
            or (self.spec.concurrency_policy is ConcurrencyPolicy.CANCEL_OTHER and self.clearing())
        )


def earliest(*instants: datetime | None) -> datetime | None:
    return min((instant for instant in instants if instant is not None), default=None)
