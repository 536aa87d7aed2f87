"""A ScheduledJob's history: `status.recentRuns` and `status.deadLetters`, what each says of a
run, and which finished Jobs stay (the history limits, a dead letter's retention).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from cronlease.core.decide.attempts import dead_letter_reason
from cronlease.core.decide.context import SlotContext, earliest
from cronlease.core.decide.decision import DeletionReason, EventRecord, EventType, PlannedDeletion
from cronlease.core.decide.runs import ONGOING, RunOutcome
from cronlease.core.names.jobinfo import JobState
from cronlease.core.names.naming import format_time

RECENT_RUNS = 10
# status.deadLetters lists at most this many (the newest); the labelled Jobs are all of them.
DEAD_LETTERS = 20
# What recentRuns says of a run, by its outcome.
RESULTS = {
    RunOutcome.ACTIVE: "Active",
    RunOutcome.SUCCEEDED: "Succeeded",
    RunOutcome.FAILED: "Failed",
    RunOutcome.RETRYING: "Retrying",
    RunOutcome.EXHAUSTED: "DeadLettered",
    RunOutcome.DEAD_LETTERED: "DeadLettered",
    RunOutcome.CANCELLED: "Deleted",
    RunOutcome.REPLAYED: "Replayed",
}
UNFINISHED = frozenset({"Active", "Retrying"})
# Sorts a Job without any timestamp as the oldest.
_THE_BEGINNING = datetime.min.replace(tzinfo=UTC)


def ended_results(ctx: SlotContext) -> list[str]:
    """The results of the runs that recentRuns listed unfinished and that have ended since, in
    the order they ended."""
    runs, outcomes = ctx.runs, ctx.outcomes
    previous: list[dict[str, Any]] = ctx.status.get("recentRuns") or []
    ended: list[tuple[datetime, str]] = []
    for entry in previous:
        name = entry.get("run") or entry.get("job", "")
        if name not in runs or outcomes[name] is RunOutcome.SUPERSEDED:
            continue
        result = RESULTS[outcomes[name]]
        if entry.get("result") in UNFINISHED and result not in UNFINISHED:
            ended.append((runs[name].latest.history_time or _THE_BEGINNING, result))
    return [result for _, result in sorted(ended, key=lambda pair: pair[0])]


def recent_runs(ctx: SlotContext) -> list[dict[str, Any]]:
    """The last runs, oldest first, each with its current attempt and result. A run that needed
    more than one attempt and then succeeded gets a RunSucceeded Event, and a run that failed
    with no retries a RunFailed Warning, once: when its entry turns from unfinished to that."""
    runs, outcomes, decision, now = ctx.runs, ctx.outcomes, ctx.decision, ctx.now
    retry = ctx.spec.retry
    previous: list[dict[str, Any]] = ctx.status.get("recentRuns") or []
    entries = []
    for entry in previous:
        entry = dict(entry)
        name = entry.get("run") or entry.get("job", "")
        run = runs.get(name)
        if run is not None and outcomes[name] is RunOutcome.SUPERSEDED:
            pass  # its later attempts are gone: the entry keeps what it said of them
        elif run is not None:
            latest = run.latest
            result = RESULTS[outcomes[name]]
            ended = entry.get("result") in UNFINISHED
            if result == "Succeeded" and ended and latest.attempt > 1:
                decision.events.append(
                    EventRecord(
                        EventType.NORMAL,
                        "RunSucceeded",
                        f"run {name} succeeded at attempt {latest.attempt}",
                    )
                )
            elif result == "Failed" and ended:  # with no attempt left to make: DeadLettered
                why = f" ({latest.failure_reason})" if latest.failure_reason else ""
                decision.events.append(
                    EventRecord(EventType.WARNING, "RunFailed", f"run {name} failed{why}")
                )
            entry["result"] = result
            entry["job"] = latest.name
            if retry is not None:
                entry.update(run=name, attempts=latest.attempt)
            if latest.finished and latest.finished_at:
                entry["finishedAt"] = format_time(latest.finished_at)
        elif entry.get("result") in UNFINISHED:
            entry["result"] = "Deleted"
        entries.append(entry)
    by_run = {entry.get("run") or entry.get("job"): entry for entry in entries}
    new = [(run, now) for run in decision.runs]
    new += [(run, job.created_at or now) for run, job in decision.recorded]
    for planned, created in sorted(new, key=lambda pair: pair[0].slot):
        listed = by_run.get(planned.run_name)
        if listed is not None and planned.attempt > 1:  # the next attempt of a listed run
            listed.update(job=planned.job_name, attempts=planned.attempt, result="Active")
            listed.pop("finishedAt", None)
            continue
        entry = {
            "slot": format_time(planned.slot),
            "job": planned.job_name,
            "trigger": planned.trigger,
            "result": "Active",
        }
        if planned.request is None:  # a request's slot is past by design: no lag to speak of
            due = planned.start or planned.slot
            entry["lagSeconds"] = round((created - due).total_seconds(), 3)
        if retry is not None:
            entry.update(run=planned.run_name, attempts=planned.attempt)
        entries.append(entry)
    # Beyond the limit, the oldest finished entries go first: an unfinished one stays until its
    # result is read (spec.pauseOnFailure counts results as entries turn finished).
    finished = [
        index for index, entry in enumerate(entries) if entry.get("result") not in UNFINISHED
    ]
    dropped = set(finished[: max(len(entries) - RECENT_RUNS, 0)])
    return [entry for index, entry in enumerate(entries) if index not in dropped][-RECENT_RUNS:]


def dead_letters(ctx: SlotContext) -> list[dict[str, Any]]:
    """status.deadLetters: the newest runs kept as dead letters, oldest first."""
    letters = []
    for name, outcome in ctx.outcomes.items():
        latest = ctx.runs[name].latest
        if outcome not in (RunOutcome.EXHAUSTED, RunOutcome.DEAD_LETTERED) or latest.slot is None:
            continue
        letter: dict[str, Any] = {
            "run": name,
            "job": latest.name,
            "slot": format_time(latest.slot),
            "attempts": latest.attempt,
            "reason": dead_letter_reason(latest),
        }
        if latest.finished_at:
            letter["failedAt"] = format_time(latest.finished_at)
        letters.append(letter)
    letters.sort(key=lambda letter: (letter.get("failedAt", ""), letter["run"]))
    return letters[-DEAD_LETTERS:]


def plan_history_cleanup(ctx: SlotContext, unrecorded: set[str]) -> frozenset[str]:
    """Keep the newest finished Jobs by completion time (falling back to start time). The
    attempts of a run still going on are not history yet, nor a request's run whose result the
    request has not recorded (`unrecorded`); a dead letter is kept until its retention passes,
    whatever the limits: held, so that no TTL takes it sooner. Returns the uids of the dead
    letters so kept."""
    spec, runs, outcomes, now, decision = ctx.spec, ctx.runs, ctx.outcomes, ctx.now, ctx.decision
    kept = {
        job.uid
        for name, outcome in outcomes.items()
        if outcome in ONGOING
        for job in runs[name].attempts
    } | unrecorded
    letters: set[str] = set()
    if spec.retry is not None:
        retention = timedelta(seconds=spec.retry.dead_letter_retention_seconds)
        for name, outcome in outcomes.items():
            latest = runs[name].latest
            if outcome is not RunOutcome.DEAD_LETTERED:
                continue
            kept.add(latest.uid)
            expires = (latest.finished_at or now) + retention
            if expires <= now:
                decision.deletions.append(
                    PlannedDeletion(
                        latest.name, latest.uid, DeletionReason.DEAD_LETTER_EXPIRED, latest.kind
                    )
                )
            else:
                letters.add(latest.uid)
                decision.wake_at = earliest(decision.wake_at, expires)
    limits = {
        JobState.SUCCEEDED: spec.successful_jobs_history_limit,
        JobState.FAILED: spec.failed_jobs_history_limit,
    }
    for state, limit in limits.items():
        finished = [job for job in ctx.live(state) if job.uid not in kept]
        finished.sort(key=lambda job: (job.history_time or _THE_BEGINNING, job.name))
        excess = finished[: max(0, len(finished) - limit)]
        decision.deletions += [
            PlannedDeletion(job.name, job.uid, DeletionReason.HISTORY_LIMIT, job.kind)
            for job in excess
        ]
    return frozenset(letters)
