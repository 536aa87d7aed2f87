"""adopt: a CronJob handed over to the equivalent ScheduledJob with no double and no lost run
(decision 0005; design note 90); --dry-run prints it and every difference that applies, and so
does the handover itself. Time is the API server's: where the ScheduledJob starts is capped by its
creationTimestamp (as the operator caps it), and "now" for the differences is the server's."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from cronlease.core.names.naming import (
    ANNOTATION_START_AFTER,
    GROUP,
    first_cursor,
    format_time,
    parse_time,
)
from cronlease.kubectl.context import Context, wait
from cronlease.kubectl.errors import PluginError
from cronlease.kubectl.output import dump
from cronlease.kubectl.translate import (
    ANNOTATION_ADOPTED_AFTER,
    CRONJOB_SCHEDULED_TIMESTAMP,
    Adoption,
    translate,
)
from cronlease.kubectl.window import check_name

# After the suspension, how long the CronJob controller may still act on a sync it began before it
# saw it (it wakes 100 ms after a slot; a sync takes milliseconds): decision 0005; design note 90.
SETTLE_SECONDS = 2.0
# After a dry run's manifest: what applying it does, which is not what adopt does.
DRY_RUN_NOTE = "\n".join(
    (
        "# Applied as it is, this manifest starts at its own creation: no slot from before it",
        "# runs (it carries no cronlease.io/start-after). Suspend the CronJob first; the slots",
        "# between the suspension and the apply then run under neither. `adopt` without",
        "# --dry-run hands over with none lost: it suspends the CronJob and starts after the",
        "# slot the CronJob ran last.",
    )
)


def cmd_adopt(ctx: Context, target: str, dry_run: bool, zone: str) -> int:
    kind, _, name = target.partition("/")
    if kind not in ("cronjob", "cronjobs", "cj", "cronjob.batch") or not name:
        raise PluginError(f"adopt takes cronjob/NAME, not {target!r}")
    check_name(name)
    cronjob = ctx.api.cronjob(ctx.ns, name)
    adoption = translate(cronjob, ctx.server_now(), zone)  # refuses what cronlease reads otherwise
    if dry_run:
        _print_adoption(ctx, adoption.manifest, adoption.differences, DRY_RUN_NOTE)
        return 0
    if _existing(ctx, name):
        raise PluginError(f"scheduledjob/{name} exists already in {ctx.ns}")
    as_left, job_slot, created = _take_over(ctx, cronjob, zone)
    created_at = parse_time(created["metadata"].get("creationTimestamp"))
    cursor = _first_cursor(created, created_at)
    ctx.err.write(f"scheduledjob.{GROUP}/{name} created, its cursor at {format_time(cursor)}\n")
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
    # As of the creation: the missed slots listed are those the operator catches up.
    now = created_at or ctx.server_now()
    differences = translate(as_left, now, zone, job_slot).differences
    if ctx.structured():
        _print_adoption(ctx, ctx.api.scheduled_job(ctx.ns, name), differences)
        return 0
    ctx.print(
        f"scheduledjob.{GROUP}/{name} took over from cronjob.batch/{name} "
        f"(uid {created['metadata'].get('uid', '')}): slots after {format_time(cursor)} are "
        "cronlease's; the CronJob stays suspended with its Jobs"
    )
    _print_differences(ctx, differences)
    return 0


def _take_over(
    ctx: Context, cronjob: dict[str, Any], zone: str
) -> tuple[dict[str, Any], datetime | None, dict[str, Any]]:
    """The CronJob suspended (unless its owner had), settled, and the ScheduledJob created with
    its start point: the CronJob as its owner left it, its latest Job's slot, the created
    object. If no ScheduledJob could be created, a CronJob adopt suspended is resumed."""
    name = cronjob["metadata"]["name"]
    user_suspended = (cronjob.get("spec") or {}).get("suspend") is True
    if not user_suspended:
        ctx.api.patch_cronjob(ctx.ns, name, {"spec": {"suspend": True}})
        ctx.err.write(f"cronjob.batch/{name} suspended\n")
    try:
        as_left, job_slot = _handover(ctx, cronjob, user_suspended)
        manifest = _seeded(translate(as_left, ctx.server_now(), zone, job_slot), ctx.ns)
        return as_left, job_slot, ctx.api.create_scheduled_job(ctx.ns, manifest)
    except PluginError as error:
        if user_suspended:
            raise
        # No ScheduledJob exists: nothing of cronlease runs, so the CronJob may run again.
        ctx.api.patch_cronjob(ctx.ns, name, {"spec": {"suspend": False}})
        raise PluginError(f"{error} (cronjob/{name} resumed: nothing was handed over)") from None


def _first_cursor(created: dict[str, Any], created_at: datetime | None) -> datetime:
    """The operator's first cursor of the object adopt created, by the operator's own function:
    the start point, capped at the creation, which the API server's clock stamped."""
    annotations = created["metadata"].get("annotations") or {}
    start = parse_time(annotations.get(ANNOTATION_START_AFTER))
    assert start is not None, "adopt created it with its start point"
    return start if created_at is None else first_cursor(created_at, annotations)


def _handover(
    ctx: Context, cronjob: dict[str, Any], user_suspended: bool
) -> tuple[dict[str, Any], datetime | None]:
    """Once the suspended CronJob has settled (and, under Forbid or Replace, its running Jobs
    have ended, as cronlease does not count them as its own): the CronJob as its owner left it
    (re-read, without adopt's suspension) and the slot of its latest Job, read now that it runs
    no more (decision 0005; design note 90)."""
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
    final = ctx.api.cronjob(ctx.ns, name)
    spec = dict(final.get("spec") or {})
    if not user_suspended:  # read after our own suspension: the CronJob's spec says suspended
        spec.pop("suspend", None)
    return {**final, "spec": spec}, max(_slots_of(ctx, uid), default=None)


def _seeded(handover: Adoption, namespace: str) -> dict[str, Any]:
    """The manifest with its start point, read just now: only adopt writes one, at the moment
    it creates the object (translate's module docstring says why)."""
    manifest = handover.manifest
    start = format_time(handover.start_after)
    manifest["metadata"]["annotations"][ANNOTATION_START_AFTER] = start
    manifest["metadata"]["annotations"][ANNOTATION_ADOPTED_AFTER] = start
    manifest["metadata"]["namespace"] = namespace
    return manifest


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


def _print_adoption(
    ctx: Context, manifest: dict[str, Any], differences: tuple[str, ...], note: str = ""
) -> None:
    """The ScheduledJob and the differences: one document as JSON or YAML, else the manifest as
    YAML and the differences as comments after `---`."""
    if ctx.structured():
        ctx.emit({"scheduledJob": manifest, "differences": list(differences)})
        return
    ctx.print(dump(manifest, "yaml"))
    ctx.print("---")
    if note:
        ctx.print(note)
    _print_differences(ctx, differences)


def _print_differences(ctx: Context, differences: tuple[str, ...]) -> None:
    ctx.print("# What differs from the CronJob (each applies to this one):")
    for difference in differences:
        ctx.print(f"# - {difference}")
