"""backfill and replay: a RunRequest the leader carries out (the fence lets only it create
cronlease's Jobs), followed to its end with a progress line on a terminal."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from cronlease.core.decide.runrequest import MAX_TARGETS
from cronlease.core.names.naming import (
    GROUP,
    LABEL_SCHEDULEDJOB,
    REQUEST_KIND,
    VERSION,
    format_time,
)
from cronlease.kubectl.context import POLL_SECONDS, Context
from cronlease.kubectl.errors import EXIT_ERROR, EXIT_FINDING, PluginError
from cronlease.kubectl.evidence import subject_of
from cronlease.kubectl.output import Progress
from cronlease.kubectl.views import request_progress
from cronlease.kubectl.window import check_name, parse_window

_JUST_BEFORE = timedelta(milliseconds=1)  # the window's first instant is one of its slots


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
                f"{state.succeeded} succeeded, {state.failed} failed{_skipped(state.skipped)}"
            )
            time.sleep(POLL_SECONDS)
    finally:
        progress.done()
    if ctx.structured():
        ctx.emit(state.as_dict())
    else:
        ctx.print(
            f"runrequest/{name} {state.phase}: {state.total} target(s), {state.succeeded} "
            f"succeeded, {state.failed} failed{_skipped(state.skipped)}"
            f"{': ' + state.message if state.message else ''}"
        )
    # A target skipped because another request replays its run is no failure of this one. A
    # target that failed is a finding (the request did its work); a request the operator could
    # not carry out (phase Failed, `message` says why) is an error.
    if state.phase != "Complete":
        return EXIT_ERROR
    return EXIT_FINDING if state.failed else 0


def _skipped(skipped: int) -> str:
    return f", {skipped} skipped (replayed by another request)" if skipped else ""


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
