"""The exactly-once cursor, `status.processedUntil`, and how slots it passes without a run are
recorded: every slot at or before it was run or counted as skipped, with a reason and an Event.
"""

from __future__ import annotations

from datetime import datetime

from cronlease.core.decide.context import SlotContext
from cronlease.core.decide.decision import (
    EXPECTED_SKIPS,
    Decision,
    EventRecord,
    EventType,
    SkippedSlots,
    SkipReason,
)
from cronlease.core.names.naming import first_cursor, format_time, parse_time


def find_cursor(ctx: SlotContext) -> datetime | None:
    """Where processing resumes. A new or edited schedule starts at creation or at the edit, so an
    edit never runs a slot retroactively; a new runAt runs if it is after the cursor.

    No edit moves processedUntil back: every instant at or before it was run or recorded as
    skipped, under whatever schedule or runAt held then, and the Jobs that showed it may be gone
    (TTL, history cleanup). So a runAt reverted to an instant that ran (X, Y, X again), or set to
    a slot its schedule ran, is recorded as skipped (AlreadyProcessed), and a schedule edit by a
    leader whose clock is behind resumes from the cursor, not from its own now."""
    sj, spec, status, now, decision = ctx.sj, ctx.spec, ctx.status, ctx.now, ctx.decision
    observed = status.get("observedSchedule")
    processed = parse_time(status.get("processedUntil"))
    if observed == spec.trigger_key:
        if processed is None and spec.schedule is not None:
            return now  # a status edited by hand: resume from now rather than guess
        return processed
    status["observedSchedule"] = spec.trigger_key
    if spec.run_at is not None:
        if processed is not None and spec.run_at <= processed:
            _skip_processed(decision, spec.run_at, processed)
        return processed
    if observed is not None:
        resume = now if processed is None else max(now, processed)
        decision.events.append(
            EventRecord(
                EventType.NORMAL,
                "ScheduleChanged",
                f"schedule is now {spec.schedule.expression if spec.schedule else ''!s} "
                f"({spec.schedule.time_zone if spec.schedule else ''}); slots before "
                f"{format_time(resume)} will not run",
            )
        )
        return resume
    return first_cursor(sj.created_at, sj.annotations)


def _skip_processed(decision: Decision, run_at: datetime, processed: datetime) -> None:
    """A runAt edited to an instant the object has processed: counted once, at the edit (the
    next decisions see it processed, as after it ran), and said in words a user can act on."""
    reason = SkipReason.ALREADY_PROCESSED
    decision.skips.append(SkippedSlots(reason, 1, run_at))
    decision.events.append(
        EventRecord(
            EventType.NORMAL,
            f"Skipped{reason.value}",
            f"runAt {format_time(run_at)} not run: it is at or before processedUntil "
            f"{format_time(processed)}, and an instant this ScheduledJob processed (ran or "
            "skipped) never runs again; to run again, use the cronlease.io/run-now annotation "
            "or a RunRequest, or set runAt after processedUntil",
        )
    )


def skip(decision: Decision, reason: SkipReason, count: int, latest: datetime) -> None:
    """Record `count` slots, the newest at `latest`, as skipped for `reason`: a counter in
    status.slotsSkipped and an Event."""
    decision.skips.append(SkippedSlots(reason, count, latest))
    decision.events.append(
        EventRecord(
            EventType.NORMAL if reason in EXPECTED_SKIPS else EventType.WARNING,
            f"Skipped{reason.value}",
            f"skipped {count} slot(s) ({reason.value}); latest {format_time(latest)}",
        )
    )
