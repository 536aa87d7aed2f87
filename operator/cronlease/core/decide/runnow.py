"""The run-now annotation, `cronlease.io/run-now`: each new value starts one run, acknowledged in
`status.runNowToken`.
"""

from __future__ import annotations

from cronlease.core.decide.admission import admit, record_if_exists
from cronlease.core.decide.context import SlotContext
from cronlease.core.decide.decision import EventRecord, EventType, PlannedRun
from cronlease.core.names.naming import ANNOTATION_RUN_NOW, TRIGGER_MANUAL, manual_job_name


def handle_run_now(ctx: SlotContext) -> None:
    """A new value of the run-now annotation starts one run, acknowledged in status."""
    sj, status, now, decision = ctx.sj, ctx.status, ctx.now, ctx.decision
    token = sj.annotations.get(ANNOTATION_RUN_NOW)
    if not token or token == status.get("runNowToken"):
        return
    if decision.runs:
        decision.wake_at = now  # one run per decision; the request is handled right after
        return
    status["runNowToken"] = token
    name = manual_job_name(sj.name, token)
    run = PlannedRun(name, now, TRIGGER_MANUAL, token, max_attempts=ctx.max_attempts)
    if record_if_exists(ctx, run):
        return
    if run.job_name in ctx.taken:
        decision.events.append(
            EventRecord(
                EventType.WARNING,
                "RunNowConflict",
                f"run-now refused: Job {run.job_name} exists and was not created by cronlease",
            )
        )
        return
    if admit(ctx, now, TRIGGER_MANUAL):
        decision.runs.append(run)
