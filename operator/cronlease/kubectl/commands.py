"""One function per command: read with `client.Api`, decide with the pure modules, print. Each
returns the exit code. Waits poll with a deadline and show a progress line on a terminal."""

from __future__ import annotations

import functools
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

from cronlease import GROUP, REQUEST_KIND, VERSION
from cronlease.cron import Schedule, ScheduleError
from cronlease.kubectl.errors import PluginError
from cronlease.kubectl.evidence import gather, subject_of
from cronlease.kubectl.firing import DST_RULE, MAX_COUNT, has_dst, next_firings
from cronlease.kubectl.ledger import FAILING, Ledger, Verdict, build_ledger
from cronlease.kubectl.output import Progress, age, colour, dump, relative, table
from cronlease.kubectl.translate import (
    ANNOTATION_ADOPTED_AFTER,
    CRONJOB_SCHEDULED_TIMESTAMP,
    translate,
)
from cronlease.kubectl.views import dead_letters, history, leader, request_progress
from cronlease.kubectl.window import check_name, parse_instant, parse_window
from cronlease.naming import (
    ANNOTATION_RESUME,
    ANNOTATION_RUN_NOW,
    ANNOTATION_START_AFTER,
    LABEL_DEAD_LETTER,
    LABEL_SCHEDULEDJOB,
    format_time,
    manual_job_name,
    parse_time,
)
from cronlease.pausing import PAUSED
from cronlease.runrequest import MAX_TARGETS
from cronlease.schedules import ScheduleSet

if TYPE_CHECKING:  # the client is imported only where a command reaches a cluster (cli.connect)
    from cronlease.kubectl.client import Api

T = TypeVar("T")
POLL_SECONDS = 0.5
_JUST_BEFORE = timedelta(milliseconds=1)  # the window's first instant is one of its slots
VERDICT_COLOURS = {
    Verdict.RAN: "green",
    Verdict.DOUBLED: "red",
    Verdict.MISSING: "red",
    Verdict.SKIPPED: "yellow",
    Verdict.NO_RECORD: "yellow",
}


@dataclass
class Context:
    """What every command gets: the flags kubectl's conventions name, and where to write."""

    connect: Callable[[], Api]
    namespace: str | None
    all_namespaces: bool
    output: str
    out: TextIO
    err: TextIO
    colour: bool
    timeout: float = 120.0
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))

    @functools.cached_property
    def api(self) -> Api:
        return self.connect()

    @property
    def ns(self) -> str:
        if self.namespace is not None:
            return check_name(self.namespace, "namespace")
        return self.api.default_namespace

    @property
    def scope(self) -> str | None:
        """The namespace to list in; None for all (-A)."""
        return None if self.all_namespaces else self.ns

    def print(self, text: str) -> None:
        self.out.write(text + "\n")

    def structured(self) -> bool:
        return self.output in ("json", "yaml")

    def emit(self, data: Any) -> None:
        self.print(dump(data, self.output))


def wait(ctx: Context, what: str, probe: Callable[[], T | None], timeout: float) -> T:
    """Poll `probe` until it returns something, with a progress line; PluginError on timeout."""
    progress = Progress(ctx.err)
    deadline = time.monotonic() + timeout
    try:
        while True:
            found = probe()
            if found:
                return found
            if time.monotonic() >= deadline:
                raise PluginError(f"timed out after {timeout:.0f}s waiting for {what}")
            progress.update(f"waiting for {what}")
            time.sleep(POLL_SECONDS)
    finally:
        progress.done()


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
        what = "suspended" if suspend else ("resumed (and unpaused)" if paused else "resumed")
        prefix = f"{namespace}/" if ctx.all_namespaces else ""
        ctx.print(f"scheduledjob.{GROUP}/{prefix}{target} {what}")
    return 0


# --- history, dead-letters, leader -------------------------------------------------------------


def cmd_history(ctx: Context, name: str) -> int:
    check_name(name)
    obj = ctx.api.scheduled_job(ctx.ns, name)
    rows = history(obj, ctx.api.jobs(ctx.ns, f"{LABEL_SCHEDULEDJOB}={name}"))
    if ctx.structured():
        ctx.emit([row.as_dict() for row in rows])
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
    ctx.print(
        table(
            ["RUN", "SLOT", "TRIGGER", "ATTEMPTS", "RESULT", "LAG", "FINISHED", "JOB"],
            [
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
            ],
            colours,
            ctx.colour,
        )
    )
    return 0


def cmd_dead_letters(ctx: Context, name: str | None) -> int:
    selector = f"{LABEL_DEAD_LETTER}=true"
    if name is not None:
        selector += f",{LABEL_SCHEDULEDJOB}={check_name(name)}"
    letters = dead_letters(ctx.api.jobs(ctx.scope, selector))
    if ctx.structured():
        ctx.emit([letter.as_dict() for letter in letters])
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
    if ctx.all_namespaces:
        headers = ["NAMESPACE", *headers]
        rows = [[d.namespace, *row] for d, row in zip(letters, rows, strict=True)]
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


# --- backfill and replay -----------------------------------------------------------------------


def _request(ctx: Context, target: str, action: dict[str, Any], policy: str) -> int:
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": REQUEST_KIND,
        "metadata": {"generateName": f"{target[:40]}-{next(iter(action))}-"},
        "spec": {"scheduledJobName": target, "concurrencyPolicy": policy, **action},
    }
    created = ctx.api.create_request(ctx.ns, body)
    name = created["metadata"]["name"]
    ctx.err.write(f"runrequest.{GROUP}/{name} created\n")
    progress = Progress(ctx.err)
    deadline = time.monotonic() + ctx.timeout
    try:
        while True:
            state = request_progress(ctx.api.request(ctx.ns, name))
            if state.finished:
                break
            if time.monotonic() >= deadline:
                raise PluginError(
                    f"timed out after {ctx.timeout:.0f}s: runrequest/{name} is {state.phase} "
                    f"({state.started}/{state.total} started); it goes on without this command"
                )
            progress.update(
                f"{name}: {state.phase} {state.started}/{state.total} started, "
                f"{state.succeeded} succeeded, {state.failed} failed"
            )
            time.sleep(POLL_SECONDS)
    finally:
        progress.done()
    if ctx.structured():
        ctx.emit(state.as_dict())
    else:
        ctx.print(
            f"runrequest/{name} {state.phase}: {state.total} target(s), {state.succeeded} "
            f"succeeded, {state.failed} failed{': ' + state.message if state.message else ''}"
        )
    return 0 if state.phase == "Complete" and state.failed == 0 else 1


def cmd_backfill(ctx: Context, name: str, low: str, high: str, policy: str) -> int:
    check_name(name)
    now = ctx.clock()
    start, end = parse_window(low, high, now)
    subject = subject_of(ctx.api.scheduled_job(ctx.ns, name))
    if end > now:
        raise PluginError(f"--to {format_time(end)} is in the future: a backfill runs past slots")
    schedule = subject.spec.schedule
    if schedule is not None:
        total = schedule.count_between(start - _JUST_BEFORE, end)
        if total == 0:
            raise PluginError(f"no slot of {schedule.expression!r} in [{low}, {high}]")
        if total > MAX_TARGETS:
            raise PluginError(f"the window holds {total} slots; at most {MAX_TARGETS} per backfill")
    action = {"backfill": {"from": format_time(start), "to": format_time(end)}}
    return _request(ctx, name, action, policy)


def cmd_replay(ctx: Context, runs: list[str], dead_letters_of: str | None, policy: str) -> int:
    if dead_letters_of is not None:
        if runs:
            raise PluginError("give runs to replay, or --dead-letters NAME, not both")
        check_name(dead_letters_of)
        ctx.api.scheduled_job(ctx.ns, dead_letters_of)
        return _request(ctx, dead_letters_of, {"replay": {"deadLetters": True}}, policy)
    if not runs:
        raise PluginError("give the runs to replay (Job names), or --dead-letters NAME")
    for run in runs:
        check_name(run, "run")
    owners = set()
    for run in runs:
        job = ctx.api.job(ctx.ns, run)
        labels = ((job or {}).get("metadata") or {}).get("labels") or {}
        owner = labels.get(LABEL_SCHEDULEDJOB)
        if job is None or not owner:
            raise PluginError(f"run {run!r}: no Job of a ScheduledJob by that name in {ctx.ns}")
        owners.add(owner)
    if len(owners) != 1:
        raise PluginError(f"the runs belong to several ScheduledJobs: {', '.join(sorted(owners))}")
    return _request(ctx, owners.pop(), {"replay": {"runs": runs}}, policy)


# --- audit ---------------------------------------------------------------------------------------


def _audit_one(
    ctx: Context,
    obj: dict[str, Any],
    jobs: list[dict[str, Any]],
    events: list[dict[str, Any]],
    low: datetime,
    high: datetime,
) -> Ledger:
    subject = subject_of(obj)
    facts = gather(subject, jobs, events, low, high, ctx.clock())
    return build_ledger(facts).within(low, high)


def _ledger_data(subject_ns: str, name: str, ledger: Ledger) -> dict[str, Any]:
    return {
        "namespace": subject_ns,
        "name": name,
        "ok": ledger.ok,
        "counts": {verdict.value: count for verdict, count in sorted(ledger.counts.items())},
        "slots": [
            {
                "slot": format_time(e.slot),
                "verdict": e.verdict.value,
                "detail": e.detail,
                "jobs": [r.job for r in e.runs],
            }
            for e in ledger.entries
        ],
    }


def _summary(ledger: Ledger) -> str:
    counts = ledger.counts
    order = [
        Verdict.RAN,
        Verdict.SKIPPED,
        Verdict.NO_RECORD,
        Verdict.MISSING,
        Verdict.DOUBLED,
        Verdict.BEFORE,
        Verdict.WAITING,
        Verdict.DUE,
        Verdict.FUTURE,
    ]
    parts = [f"{counts[v]} {v.value}" for v in order if counts[v]]
    return f"{len(ledger.entries)} slot(s): {', '.join(parts) or 'none'}"


def cmd_audit(ctx: Context, name: str | None, low_text: str | None, high_text: str | None) -> int:
    now = ctx.clock()
    low, high = parse_window(low_text or "1h", high_text or "now", now)
    if name is None and not ctx.all_namespaces:
        raise PluginError("give a ScheduledJob's name, or -A for all of them")
    if name is not None:
        check_name(name)
        objects = [ctx.api.scheduled_job(ctx.ns, name)]
    else:
        objects = ctx.api.scheduled_jobs(None)
    jobs = ctx.api.jobs(None if name is None else ctx.ns)
    events = ctx.api.events(None if name is None else ctx.ns)
    results: list[tuple[dict[str, Any], Ledger | PluginError]] = []
    for obj in objects:
        try:
            results.append((obj, _audit_one(ctx, obj, jobs, events, low, high)))
        except PluginError as error:
            if name is not None:
                raise
            results.append((obj, error))
    failed = any(isinstance(r, PluginError) or not r.ok for _, r in results)
    if ctx.structured():
        data = [
            _ledger_data(o["metadata"]["namespace"], o["metadata"]["name"], r)
            if isinstance(r, Ledger)
            else {
                "namespace": o["metadata"]["namespace"],
                "name": o["metadata"]["name"],
                "ok": False,
                "error": str(r),
            }
            for o, r in results
        ]
        ctx.emit(data[0] if name is not None else data)
        return 1 if failed else 0
    if name is not None:
        ((obj, ledger),) = results
        assert isinstance(ledger, Ledger)
        ctx.print(f"scheduledjob/{name} slots from {format_time(low)} to {format_time(high)}")
        rows = [[format_time(e.slot), e.verdict.value, e.detail] for e in ledger.entries]
        colours = [VERDICT_COLOURS.get(e.verdict, "") for e in ledger.entries]
        if rows:
            ctx.print(table(["SLOT", "VERDICT", "DETAIL"], rows, colours, ctx.colour))
        line = _summary(ledger)
        ctx.print(colour(line, "green" if ledger.ok else "red", ctx.colour))
        return 0 if ledger.ok else 1
    rows = []
    for obj, result in results:
        meta = obj["metadata"]
        if isinstance(result, PluginError):
            rows.append([meta["namespace"], meta["name"], "", "", "", "", "", f"error: {result}"])
            continue
        c = result.counts
        bad = sum(c[v] for v in FAILING)
        rows.append(
            [
                meta["namespace"],
                meta["name"],
                str(len(result.entries)),
                str(c[Verdict.RAN]),
                str(c[Verdict.SKIPPED]),
                str(c[Verdict.MISSING]),
                str(c[Verdict.DOUBLED]),
                "ok" if not bad else "FAILED",
            ]
        )
    ctx.print(f"slots from {format_time(low)} to {format_time(high)}")
    ctx.print(
        table(["NAMESPACE", "NAME", "SLOTS", "RAN", "SKIPPED", "MISSING", "DOUBLED", "AUDIT"], rows)
    )
    return 1 if failed else 0


# --- adopt ---------------------------------------------------------------------------------------

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
