"""A follow-up still queued when its key's next slot comes is carried into that slot's reconcile
(Scheduler._carry, Applier.joined): the decision reads the status as the carried write leaves
it, and one follow-up writes both. Everything then ends as it would have had the follow-up been
written first: the status (lags included), which Jobs are held, which Events went out."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from builders import CREATED, NAMESPACE
from fakeapi import FakeApiServer
from harness import SLOT, Shell, eventually

from cronlease.core.names.naming import (
    ANNOTATION_RUN_NOW,
    ANNOTATION_SCHEDULED_AT,
    FINALIZER_SLOT_RECORD,
    parse_time,
)
from cronlease.shell.applier import Applied, FollowUp
from cronlease.shell.keyedloop import Outcome
from cronlease.shell.kube import EVENTS, SCHEDULEDJOBS

KEY = (NAMESPACE, "report")
NEXT = SLOT + timedelta(minutes=1, seconds=0.25)


def run_now(shell: Shell) -> None:
    """A run-now requested before the slot: its run is the first decision's."""
    annotation = {"metadata": {"annotations": {ANNOTATION_RUN_NOW: "t1"}}}
    shell.server.edit(*SCHEDULEDJOBS, NAMESPACE, "report", annotation)
    obj = shell.server.get(*SCHEDULEDJOBS, NAMESPACE, "report")
    assert obj is not None
    shell.model.upsert_scheduledjob(obj)


# A scenario: the spec, what happens before the first decision, and the Jobs made in the end.
SCENARIOS: dict[str, tuple[dict[str, Any], Callable[[Shell], None] | None, int]] = {
    "a slot, then the next": ({"successfulJobsHistoryLimit": 5}, None, 2),
    "Forbid, the first run still active": ({"concurrencyPolicy": "Forbid"}, None, 1),
    "a run-now, then two slots": ({}, run_now, 3),
}


def ending(shell: Shell) -> tuple[dict[str, Any], dict[str, bool], list[tuple[str, str]]]:
    """The status, whether each Job holds the slot-record finalizer, and the Events."""
    status = {k: v for k, v in shell.status("report").items() if k != "conditions"}
    held = {
        job["metadata"]["name"]: FINALIZER_SLOT_RECORD in (job["metadata"].get("finalizers") or [])
        for job in shell.jobs()
    }
    events = sorted(
        (event["reason"], event["message"]) for event in shell.server.items(*EVENTS, NAMESPACE)
    )
    return status, held, events


async def as_a_worker(shell: Shell) -> Applied | FollowUp:
    """The next decision on KEY as the keyed loop's worker makes it: counted as a creation while
    it decides (a carried follow-up it writes must not wait on it). Bounded so that such a wait
    fails here, not after the patience."""
    with shell.applier.creations.creating():
        return await asyncio.wait_for(shell.scheduler._act(KEY), timeout=5)


async def two_decisions(
    scenario: str, carry: bool, lose_next_create: bool = False
) -> tuple[Shell, dict[str, bool]]:
    """The shell after the next slot's decision and the passes it wakes, and which Jobs were
    still held right after that decision's own follow-up."""
    spec, before, _ = SCENARIOS[scenario]
    server = FakeApiServer(clock=lambda: shell.now)  # a Job is created when the test says
    shell = Shell(server, now=CREATED)
    shell.create("report", **spec)
    shell.now = SLOT + timedelta(seconds=0.25)
    if before is not None:
        before(shell)
    acted = await shell.scheduler.act_on(shell.model.scheduledjob(KEY))
    assert isinstance(acted, FollowUp)
    assert acted.status is not None
    if carry:
        assert shell.scheduler._carry(KEY, acted)
    else:
        assert (await shell.applier.follow_up(acted)).outcome is Outcome.DONE
    shell.now = NEXT  # the next slot: due again
    if lose_next_create:  # its create is made, its answer lost: retried, and adopted then
        shell.server.lose("POST", r"/jobs$")
        retried = await shell.scheduler.finish_act(await as_a_worker(shell))
        assert retried.outcome is Outcome.RETRY
    applied = await shell.scheduler.finish_act(await as_a_worker(shell))
    assert applied.outcome is Outcome.DONE
    held = ending(shell)[1]
    for _ in range(2):  # the passes its writes' echoes wake
        assert (await shell.apply("report")).outcome is Outcome.DONE
    await shell.applier.drain()
    return shell, held


@pytest.mark.parametrize("scenario", SCENARIOS)
async def test_a_carried_follow_up_ends_as_one_written_first(scenario: str) -> None:
    (written, held_written), (carried, held) = [
        await two_decisions(scenario, carry) for carry in (False, True)
    ]
    assert held == held_written  # the carried releases went with the next slot's writes
    assert ending(carried) == ending(written)
    assert len(carried.jobs()) == SCENARIOS[scenario][2]


async def test_a_carried_follow_up_is_kept_for_the_retry_of_a_decision_that_failed() -> None:
    (written, held_written), (carried, held) = [
        await two_decisions("a slot, then the next", carry, lose_next_create=True)
        for carry in (False, True)
    ]
    assert held == held_written
    assert ending(carried) == ending(written)
    assert not carried.scheduler._carried


async def test_a_carried_follow_up_is_not_written_over_a_newer_object() -> None:
    """The ScheduledJob's status changed after the carried follow-up was decided (someone wrote
    processedUntil past the next slot): the carried write would have been refused (409), so the
    next decision is made on what is persisted, as after one. Decided on the carried status, it
    would have moved processedUntil back and run the next slot."""
    shell = Shell(now=SLOT + timedelta(seconds=0.25))
    shell.create("report")
    acted = await shell.scheduler.act_on(shell.model.scheduledjob(KEY))
    assert isinstance(acted, FollowUp)
    written = shell.applier.as_written(acted, shell.server.get(*SCHEDULEDJOBS, NAMESPACE, "report"))
    past_next = {"status": {**written["status"], "processedUntil": "2026-01-05T08:32:00Z"}}
    shell.server.edit(*SCHEDULEDJOBS, NAMESPACE, "report", past_next)
    edited = shell.server.get(*SCHEDULEDJOBS, NAMESPACE, "report")
    assert edited is not None
    shell.model.upsert_scheduledjob(edited)
    assert not shell.applier.carries(acted, edited)
    assert shell.scheduler._carry(KEY, acted)
    shell.now = NEXT
    assert (await shell.scheduler.finish_act(await shell.scheduler._act(KEY))).outcome in (
        Outcome.DONE,
        Outcome.STALE,
    )
    assert shell.status("report")["processedUntil"] == "2026-01-05T08:32:00Z"
    scheduled = [job["metadata"]["annotations"][ANNOTATION_SCHEDULED_AT] for job in shell.jobs()]
    assert scheduled == ["2026-01-05T08:31:00Z"], "the next slot was run"


def released_unrecorded(shell: Shell) -> list[str]:
    """Jobs whose slot-record finalizer is gone while the persisted status has not recorded
    their slot: what must never be."""
    processed = parse_time(shell.status("report").get("processedUntil"))
    return [
        job["metadata"]["name"]
        for job in shell.jobs()
        if FINALIZER_SLOT_RECORD not in (job["metadata"].get("finalizers") or [])
        and (
            processed is None
            or parse_time(job["metadata"]["annotations"][ANNOTATION_SCHEDULED_AT]) > processed
        )
    ]


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [("POST", r"/jobs$", 422), ("PATCH", r"/status$", 409)],
    ids=["the next create refused as invalid", "the joined status write refused"],
)
async def test_no_carried_release_goes_out_before_the_write_that_records_its_run(
    method: str, path: str, status: int
) -> None:
    """The next decision's create is refused as invalid (it records that, from the persisted
    status, and wants nothing else), or the joined status write is refused: the first slot's
    Job stays held until a status that records it is persisted."""
    server = FakeApiServer(clock=lambda: shell.now)
    shell = Shell(server, now=CREATED)
    shell.create("report")
    shell.now = SLOT + timedelta(seconds=0.25)
    acted = await shell.scheduler.act_on(shell.model.scheduledjob(KEY))
    assert isinstance(acted, FollowUp)
    assert shell.scheduler._carry(KEY, acted)
    shell.now = NEXT
    shell.server.fail(method, path, status, "refused")
    await shell.scheduler.finish_act(await shell.scheduler._act(KEY))
    assert released_unrecorded(shell) == []
    for _ in range(3):
        await shell.apply("report")
        assert released_unrecorded(shell) == []


async def test_at_its_next_slot_a_key_does_not_wait_behind_its_queued_follow_up() -> None:
    """The keyed loop, the scheduler and the applier together, in real time: ScheduledJobs due
    every second, one writer, and every status write held. Each key's first follow-up queues
    behind the one that holds the writer; at its slot the key is reconciled all the same and
    creates its Job, the queued writes carried into that reconcile. Without carrying, no Job is
    created until the writes flow again."""
    server = FakeApiServer(clock=lambda: datetime.now(UTC))
    shell = Shell(server, clock=lambda: datetime.now(UTC), concurrency=4)  # one writer
    assert shell.applier.writing_slots == 1
    names = [f"report-{index}" for index in range(4)]
    writes = asyncio.Event()
    shell.server.hold("PATCH", r"/status$", writes)
    for name in names:
        shell.create(name, schedule="* * * * * *")

    def created() -> set[str]:
        return {job["metadata"]["ownerReferences"][0]["name"] for job in shell.jobs()}

    task = asyncio.create_task(shell.scheduler.run())
    try:
        # All but the key whose write holds the writer: theirs were still queued.
        await eventually(lambda: len(created()) >= len(names) - 1)
        assert shell.server.held == 1
        writes.set()
        await eventually(lambda: created() == set(names))
        await eventually(lambda: all("lastScheduleTime" in shell.status(n) for n in names))
    finally:
        writes.set()  # a failed test must not leave the writer held for drain() to wait on
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await shell.scheduler.drain()
