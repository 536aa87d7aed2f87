"""The commands that read or flip one thing: next, run-now, suspend and resume, history,
dead-letters, leader. Each reads with `client.Api`, decides with the pure modules, prints, and
returns the exit code."""

from __future__ import annotations

import secrets
from typing import Any

from cronlease.core.decide.pausing import PAUSED
from cronlease.core.names.naming import (
    ANNOTATION_RESUME,
    ANNOTATION_RUN_NOW,
    GROUP,
    LABEL_DEAD_LETTER,
    LABEL_SCHEDULEDJOB,
    RUN_KIND,
    format_time,
    manual_job_name,
    parse_time,
)
from cronlease.core.schedule.cron import Schedule, ScheduleError
from cronlease.core.schedule.schedules import ScheduleSet
from cronlease.kubectl.context import Context, wait
from cronlease.kubectl.errors import PluginError
from cronlease.kubectl.evidence import subject_of
from cronlease.kubectl.firing import DST_RULE, MAX_COUNT, has_dst, next_firings
from cronlease.kubectl.output import age, relative, table
from cronlease.kubectl.views import dead_letters, history, leader
from cronlease.kubectl.window import check_name, parse_instant

# --- next --------------------------------------------------------------------------------------


def cmd_next(
    ctx: Context,
    name: str | None,
    expressions: list[str],
    zone: str | None,
    count: int,
    after_text: str | None,
) -> int:
    if not 1 <= count <= MAX_COUNT:
        raise PluginError(f"-c: must be 1 to {MAX_COUNT}")
    now = ctx.clock()
    after = parse_instant(after_text, now, "--from") if after_text else now
    if name is not None:
        if expressions:
            raise PluginError("give a ScheduledJob's name or --schedule, not both")
        check_name(name)
        subject = subject_of(ctx.api.scheduled_job(ctx.ns, name))
        schedule = subject.spec.schedule
        if schedule is None:
            assert subject.spec.run_at is not None
            ctx.print(f"runAt {format_time(subject.spec.run_at)}: one run, no schedule")
            return 0
    else:
        if not expressions:
            raise PluginError("give a ScheduledJob's name, or --schedule EXPR")
        try:
            if len(expressions) == 1:
                schedule = Schedule.parse(expressions[0], zone or "UTC", now)
            else:
                schedule = ScheduleSet.parse_all(expressions, zone or "UTC", now)
        except ScheduleError as error:
            raise PluginError(f"invalid: {error}") from None
    firings = next_firings(schedule, after, count)
    if ctx.structured():
        ctx.emit(
            {
                "schedule": schedule.expression,
                "timeZone": schedule.time_zone,
                "dstRule": DST_RULE if has_dst(schedule.time_zone, after) else None,
                "next": [
                    {"utc": format_time(f.slot), "local": f.local.isoformat(), "note": f.note}
                    for f in firings
                ],
            }
        )
        return 0
    ctx.print(f"schedule: {schedule.expression}   timeZone: {schedule.time_zone}")
    if has_dst(schedule.time_zone, after):
        ctx.print(f"DST rule: {DST_RULE}")
    rows = [
        [
            f.local.strftime("%Y-%m-%d %H:%M:%S %Z"),
            format_time(f.slot),
            relative(f.slot, now),
            f.note,
        ]
        for f in firings
    ]
    ctx.print(table([f"LOCAL ({schedule.time_zone})", "UTC", "WHEN", "NOTE"], rows))
    return 0


# --- run-now, suspend, resume ------------------------------------------------------------------


def cmd_run_now(ctx: Context, name: str) -> int:
    check_name(name)
    ctx.api.scheduled_job(ctx.ns, name)  # a clear "not found" before any write
    token = f"{int(ctx.clock().timestamp())}-{secrets.token_hex(3)}"
    ctx.api.patch_scheduled_job(
        ctx.ns, name, {"metadata": {"annotations": {ANNOTATION_RUN_NOW: token}}}
    )
    job_name = manual_job_name(name, token)

    def acknowledged() -> dict[str, Any] | None:
        status = ctx.api.scheduled_job(ctx.ns, name).get("status") or {}
        return status if status.get("runNowToken") == token else None

    wait(ctx, f"the operator to take run-now {token}", acknowledged, ctx.timeout)
    job = ctx.api.job(ctx.ns, job_name)
    if job is None:
        raise PluginError(
            f"run-now {token} refused: a run is active and the concurrencyPolicy forbids "
            f"another (see `kubectl describe scheduledjob {name}`)"
        )
    if ctx.structured():
        ctx.emit(job)
    elif ctx.output == "name":
        ctx.names("job.batch", [job_name])
    else:
        ctx.print(f"job.batch/{job_name} created (run-now {token})")
    return 0


def _targets(ctx: Context, name: str | None, selector: str | None) -> list[tuple[str, str]]:
    if (name is None) == (selector is None):
        raise PluginError("give a ScheduledJob's name or -l SELECTOR")
    if name is not None:
        check_name(name)
        ctx.api.scheduled_job(ctx.ns, name)
        return [(ctx.ns, name)]
    found = ctx.api.scheduled_jobs(ctx.scope, selector or "")
    if not found:
        raise PluginError(f"no scheduledjob matches {selector!r}")
    return [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in found]


def cmd_suspend(ctx: Context, name: str | None, selector: str | None, suspend: bool) -> int:
    for namespace, target in _targets(ctx, name, selector):
        patch: dict[str, Any] = {"spec": {"suspend": suspend}}
        paused = False
        if not suspend:
            conditions = (ctx.api.scheduled_job(namespace, target).get("status") or {}).get(
                "conditions"
            ) or []
            paused = any(
                isinstance(c, dict) and c.get("type") == PAUSED and c.get("status") == "True"
                for c in conditions
            )
            if paused:  # a pause on failure is lifted by a new resume token, never the spec
                token = f"{int(ctx.clock().timestamp())}-{secrets.token_hex(3)}"
                patch["metadata"] = {"annotations": {ANNOTATION_RESUME: token}}
        ctx.api.patch_scheduled_job(namespace, target, patch)
        if ctx.output == "name":
            ctx.names(f"scheduledjob.{GROUP}", [target])
            continue
        what = "suspended" if suspend else ("resumed (and unpaused)" if paused else "resumed")
        prefix = f"{namespace}/" if ctx.all_namespaces else ""
        ctx.print(f"scheduledjob.{GROUP}/{prefix}{target} {what}")
    return 0


def _resource(kind: str) -> str:
    """`-o name`'s resource for a run's record: a Job, or a multi-step run's Run."""
    return f"run.{GROUP}" if kind == RUN_KIND else "job.batch"


# --- history, dead-letters, leader -------------------------------------------------------------


def cmd_history(ctx: Context, name: str) -> int:
    check_name(name)
    obj = ctx.api.scheduled_job(ctx.ns, name)
    rows = history(obj, ctx.api.jobs(ctx.ns, f"{LABEL_SCHEDULEDJOB}={name}"))
    if ctx.structured():
        ctx.emit([row.as_dict() for row in rows])
        return 0
    if ctx.output == "name":
        for row in rows:
            ctx.names(_resource(row.kind), [row.job])
        return 0
    if not rows:
        ctx.print(f"No runs of scheduledjob/{name} on record.")
        return 0
    colours = [
        {"Succeeded": "green", "Failed": "red", "DeadLettered": "red", "Dead letter": "red"}.get(
            r.result, ""
        )
        for r in rows
    ]
    headers = ["RUN", "SLOT", "TRIGGER", "ATTEMPTS", "RESULT", "LAG", "FINISHED", "JOB"]
    cells = [
        [
            r.run,
            r.slot,
            r.trigger,
            str(r.attempts),
            r.result,
            "" if r.lag_seconds is None else f"{r.lag_seconds:.3f}s",
            r.finished_at,
            r.job,
        ]
        for r in rows
    ]
    if ctx.wide:
        headers += ["STARTED", "REASON", "KIND"]
        cells = [[*c, r.started_at, r.reason, r.kind] for c, r in zip(cells, rows, strict=True)]
    ctx.print(table(headers, cells, colours, ctx.colour))
    return 0


def cmd_dead_letters(ctx: Context, name: str | None) -> int:
    selector = f"{LABEL_DEAD_LETTER}=true"
    if name is not None:
        selector += f",{LABEL_SCHEDULEDJOB}={check_name(name)}"
    letters = dead_letters(ctx.api.jobs(ctx.scope, selector))
    if ctx.structured():
        ctx.emit([letter.as_dict() for letter in letters])
        return 0
    if ctx.output == "name":
        for letter in letters:
            ctx.names(_resource(letter.kind), [letter.job])
        return 0
    if not letters:
        where = "any namespace" if ctx.all_namespaces else f"namespace {ctx.ns}"
        ctx.print(f"No dead letters in {where}.")
        return 0
    headers = ["SCHEDULEDJOB", "RUN", "SLOT", "ATTEMPTS", "REASON", "FAILED", "JOB"]
    rows = [
        [d.scheduled_job, d.run, d.slot, str(d.attempts), d.reason, d.failed_at, d.job]
        for d in letters
    ]
    if ctx.all_namespaces or ctx.wide:
        headers = ["NAMESPACE", *headers]
        rows = [[d.namespace, *row] for d, row in zip(letters, rows, strict=True)]
    if ctx.wide:
        headers.append("KIND")
        rows = [[*row, d.kind] for d, row in zip(letters, rows, strict=True)]
    ctx.print(table(headers, rows))
    return 0


def cmd_leader(ctx: Context, lease_namespace: str, lease_name: str) -> int:
    check_name(lease_namespace, "namespace")
    check_name(lease_name)
    lease = ctx.api.lease(lease_namespace, lease_name)
    jobs = ctx.api.jobs(None, LABEL_SCHEDULEDJOB)
    pods = ctx.api.pods(lease_namespace, "app.kubernetes.io/name=cronlease")
    view = leader(lease, jobs, pods)
    if ctx.structured():
        ctx.emit(view.as_dict())
        return 0
    now = ctx.clock()
    ctx.print(f"Lease:    {view.lease}")
    ctx.print(f"Holder:   {view.holder or '<none: no leader>'}")
    ctx.print(f"Token:    {'' if view.token is None else view.token}  (leaseTransitions)")
    since = parse_time(view.since)
    ctx.print(f"Since:    {view.since} ({age(since, now)} ago)" if since else "Since:    <unknown>")
    renewed = parse_time(view.renewed)
    ctx.print(f"Renewed:  {view.renewed} ({age(renewed, now)} ago)" if renewed else "Renewed:  -")
    if view.pods:
        ctx.print(f"Pods:     {', '.join(view.pods)}")
    ctx.print("Replicas seen (writers of cronlease Jobs, and the holder):")
    rows = [
        [
            ("* " if r.holds_lease else "  ") + r.identity,
            "" if r.token is None else str(r.token),
            str(r.jobs),
            r.last_write,
        ]
        for r in view.replicas
    ]
    ctx.print(table(["  IDENTITY", "TOKEN", "JOBS", "LAST JOB"], rows))
    return 0
