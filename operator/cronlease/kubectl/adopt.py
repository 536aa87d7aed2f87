"""adopt: a CronJob handed over to the equivalent ScheduledJob with no double and no lost run
(docs/design-notes.md, item 90); --dry-run prints it and every difference that applies."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from cronlease import GROUP
from cronlease.kubectl.context import Context, wait
from cronlease.kubectl.errors import PluginError
from cronlease.kubectl.output import dump
from cronlease.kubectl.translate import (
    ANNOTATION_ADOPTED_AFTER,
    CRONJOB_SCHEDULED_TIMESTAMP,
    translate,
)
from cronlease.kubectl.window import check_name
from cronlease.naming import ANNOTATION_START_AFTER, format_time, parse_time

# After the suspension, how long the CronJob controller may still act on a sync it began before
# it saw it (it wakes 100 ms after a slot; a sync takes milliseconds): docs item 90.
SETTLE_SECONDS = 2.0


def cmd_adopt(ctx: Context, target: str, dry_run: bool, zone: str) -> int:
    kind, _, name = target.partition("/")
    if kind not in ("cronjob", "cronjobs", "cj", "cronjob.batch") or not name:
        raise PluginError(f"adopt takes cronjob/NAME, not {target!r}")
    check_name(name)
    cronjob = ctx.api.cronjob(ctx.ns, name)
    adoption = translate(cronjob, ctx.clock(), zone)  # refuses what cronlease reads differently
    if dry_run:
        _print_adoption(ctx, adoption.manifest, adoption.differences)
        return 0
    if _existing(ctx, name):
        raise PluginError(f"scheduledjob/{name} exists already in {ctx.ns}")
    user_suspended = (cronjob.get("spec") or {}).get("suspend") is True
    if not user_suspended:
        ctx.api.patch_cronjob(ctx.ns, name, {"spec": {"suspend": True}})
        ctx.err.write(f"cronjob.batch/{name} suspended\n")
    try:
        manifest, last = _handover(ctx, cronjob, zone, user_suspended)
        created = ctx.api.create_scheduled_job(ctx.ns, manifest)
    except PluginError as error:
        if user_suspended:
            raise
        # No ScheduledJob exists: nothing of cronlease runs, so the CronJob may run again.
        ctx.api.patch_cronjob(ctx.ns, name, {"spec": {"suspend": False}})
        raise PluginError(f"{error} (cronjob/{name} resumed: nothing was handed over)") from None
    ctx.err.write(f"scheduledjob.{GROUP}/{name} created, its cursor at {format_time(last)}\n")
    wait(
        ctx,
        "the operator's first decision",
        lambda: bool(
            (ctx.api.scheduled_job(ctx.ns, name).get("status") or {}).get("observedSchedule")
        ),
        ctx.timeout,
    )
    # The cursor is in status now; the annotation would only mislead a copy of this object.
    ctx.api.patch_scheduled_job(
        ctx.ns, name, {"metadata": {"annotations": {ANNOTATION_START_AFTER: None}}}
    )
    if ctx.structured():
        ctx.emit(ctx.api.scheduled_job(ctx.ns, name))
    else:
        ctx.print(
            f"scheduledjob.{GROUP}/{name} took over from cronjob.batch/{name} "
            f"(uid {created['metadata'].get('uid', '')}): slots after {format_time(last)} are "
            "cronlease's; the CronJob stays suspended with its Jobs"
        )
    return 0


def _handover(
    ctx: Context, cronjob: dict[str, Any], zone: str, user_suspended: bool
) -> tuple[dict[str, Any], datetime]:
    """Once the suspended CronJob has settled (and, under Forbid or Replace, its running Jobs
    have ended, as cronlease does not count them as its own): the ScheduledJob, its cursor at
    the slot the CronJob ran last, read now that it runs no more (docs item 90)."""
    name, uid = cronjob["metadata"]["name"], cronjob["metadata"]["uid"]
    suspended_at = time.monotonic()
    wait(
        ctx,
        "the CronJob's controller to settle",
        lambda: time.monotonic() - suspended_at >= SETTLE_SECONDS,
        SETTLE_SECONDS + 5,
    )
    policy = (cronjob.get("spec") or {}).get("concurrencyPolicy") or "Allow"
    if policy != "Allow":
        wait(
            ctx,
            f"the CronJob's running Jobs to end ({policy})",
            lambda: not _active(ctx, uid),
            ctx.timeout,
        )
    final = translate(ctx.api.cronjob(ctx.ns, name), ctx.clock(), zone)
    last = max([final.start_after, *(_slots_of(ctx, uid))])
    manifest = final.manifest
    if not user_suspended:  # read after our own suspension: the CronJob's spec says suspended
        manifest["spec"].pop("suspend", None)
    manifest["metadata"]["annotations"][ANNOTATION_START_AFTER] = format_time(last)
    manifest["metadata"]["annotations"][ANNOTATION_ADOPTED_AFTER] = format_time(last)
    manifest["metadata"]["namespace"] = ctx.ns
    return manifest, last


def _existing(ctx: Context, name: str) -> bool:
    try:
        ctx.api.scheduled_job(ctx.ns, name)
    except PluginError as error:
        if str(error).endswith("not found"):
            return False
        raise
    return True


def _owned_by(job: dict[str, Any], uid: str) -> bool:
    owners = (job.get("metadata") or {}).get("ownerReferences") or []
    return any(isinstance(o, dict) and o.get("uid") == uid for o in owners)


def _active(ctx: Context, uid: str) -> bool:
    for job in ctx.api.jobs(ctx.ns):
        if not _owned_by(job, uid):
            continue
        conditions = (job.get("status") or {}).get("conditions") or []
        done = any(
            isinstance(c, dict)
            and c.get("type") in ("Complete", "Failed")
            and c.get("status") == "True"
            for c in conditions
        )
        if not done:
            return True
    return False


def _slots_of(ctx: Context, uid: str) -> list[datetime]:
    """The slots of the CronJob's Jobs: one created after its status was written still counts."""
    slots = []
    for job in ctx.api.jobs(ctx.ns):
        if _owned_by(job, uid):
            annotations = (job.get("metadata") or {}).get("annotations") or {}
            slot = parse_time(annotations.get(CRONJOB_SCHEDULED_TIMESTAMP))
            if slot is not None:
                slots.append(slot)
    return slots


def _print_adoption(ctx: Context, manifest: dict[str, Any], differences: tuple[str, ...]) -> None:
    if ctx.output == "json":
        ctx.emit({"scheduledJob": manifest, "differences": list(differences)})
        return
    ctx.print(dump(manifest, "yaml"))
    ctx.print("---")
    ctx.print("# What differs from the CronJob (each applies to this one):")
    for difference in differences:
        ctx.print(f"# - {difference}")
