"""Bursts prepared before their slot (cronlease.core.bodies.preparation): a prepared body is only
ever a cache of build_job for the exact run the decision at the instant plans. Table cases for what
must not match, a property for what must, and the scheduler on the fake API server: prepared ahead,
sent at the instant as it would have been built then, and never for a run the instant refuses."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta
from typing import Any

import orjson
import pytest
from builders import NAMESPACE, job_template, view
from harness import NOW, SLOT, Shell, eventually
from hypothesis import given
from hypothesis import strategies as st

from cronlease.core.bodies.jobtemplate import build_job
from cronlease.core.bodies.preparation import PreparedJobs
from cronlease.core.decide.decision import PlannedRun, ScheduledJobView
from cronlease.core.names.naming import TRIGGER_MANUAL, TRIGGER_SCHEDULE, scheduled_job_name
from cronlease.shell.keyedloop import Applied, KeyedLoop, Outcome
from cronlease.shell.kube import SCHEDULEDJOBS
from cronlease.shell.leadership import SoleLeader
from cronlease.shell.wakeups import WakeupQueue

SJ = view({"schedule": "* * * * *", "jobTemplate": job_template()})
RUN = PlannedRun(scheduled_job_name(SJ.name, SLOT, False), SLOT, TRIGGER_SCHEDULE)


def other_template() -> dict[str, Any]:
    template = job_template()
    template["spec"]["backoffLimit"] = 9
    return template


# What differs between the prepared body and the run at the instant: each must build afresh.
MISMATCHES: list[tuple[str, ScheduledJobView, PlannedRun, str, int]] = [
    ("another attempt", SJ, dataclasses.replace(RUN, attempt=2), "leader-a", 3),
    ("another trigger", SJ, dataclasses.replace(RUN, trigger=TRIGGER_MANUAL), "leader-a", 3),
    ("a jittered start", SJ, dataclasses.replace(RUN, start=SLOT + timedelta(1)), "leader-a", 3),
    ("retries turned on", SJ, dataclasses.replace(RUN, max_attempts=3), "leader-a", 3),
    (
        "an edited template",
        dataclasses.replace(SJ, spec={**SJ.spec, "jobTemplate": other_template()}),
        RUN,
        "leader-a",
        3,
    ),
    ("a ScheduledJob recreated", dataclasses.replace(SJ, uid="uid-new"), RUN, "leader-a", 3),
    ("a new term", SJ, RUN, "leader-a", 4),
    ("another leader", SJ, RUN, "leader-b", 3),
]


@pytest.mark.parametrize(
    ("sj", "run", "leader", "token"),
    [case[1:] for case in MISMATCHES],
    ids=[case[0] for case in MISMATCHES],
)
def test_a_body_prepared_for_another_run_is_not_taken(
    sj: ScheduledJobView, run: PlannedRun, leader: str, token: int
) -> None:
    prepared = PreparedJobs()
    assert prepared.put(SJ, RUN, "leader-a", 3)
    assert prepared.take(sj, run, leader, token) is None
    assert len(prepared) == 0  # taken or not, gone: a second try builds its own


@given(
    attempt=st.integers(1, 5),
    trigger=st.sampled_from([TRIGGER_SCHEDULE, TRIGGER_MANUAL]),
    token=st.integers(0, 2**31 - 1),
    leader=st.text(min_size=1, max_size=20),
    backoff=st.integers(0, 10),
)
def test_a_prepared_body_is_exactly_the_body_built_at_the_instant(
    attempt: int, trigger: str, token: int, leader: str, backoff: int
) -> None:
    template = job_template()
    template["spec"]["backoffLimit"] = backoff
    sj = dataclasses.replace(SJ, spec={**SJ.spec, "jobTemplate": template})
    run = dataclasses.replace(RUN, attempt=attempt, trigger=trigger)
    prepared = PreparedJobs()
    prepared.put(sj, run, leader, token)
    # The instant's view is a fresh copy of an equal object, as the model hands it out.
    fresh = dataclasses.replace(sj, spec=orjson.loads(orjson.dumps(sj.spec)))
    assert prepared.take(fresh, run, leader, token) == orjson.dumps(
        build_job(fresh, run, leader, token)
    )


def test_bodies_beyond_the_limit_are_not_kept_and_stale_ones_are_dropped() -> None:
    prepared = PreparedJobs(limit=2)
    runs = [dataclasses.replace(RUN, job_name=f"j{i}", slot=SLOT + timedelta(i)) for i in range(3)]
    assert [prepared.put(SJ, run, "a", 0) for run in runs] == [True, True, False]
    prepared.drop_stale(SLOT + timedelta(minutes=1))  # the first run's minute is over
    assert len(prepared) == 1
    assert prepared.take(SJ, runs[1], "a", 0) is not None


# The scheduler: prepared ahead, taken at the instant.

AHEAD = SLOT - timedelta(seconds=1)


async def prepare(shell: Shell, *names: str) -> None:
    """Prepared a second before the slot; the shell's decisions are then at the slot's NOW."""
    shell.now = AHEAD
    await shell.scheduler.prepare([((NAMESPACE, name), SLOT.timestamp()) for name in names])
    shell.now = NOW


def edit(shell: Shell, name: str, spec: dict[str, Any]) -> None:
    """A user's edit, and the model's copy of it, as the watch would deliver it."""
    shell.server.edit(*SCHEDULEDJOBS, NAMESPACE, name, {"spec": spec})
    edited = shell.server.get(*SCHEDULEDJOBS, NAMESPACE, name)
    assert edited is not None
    shell.model.upsert_scheduledjob(edited)


def posted_jobs(shell: Shell) -> int:
    return len(shell.created_jobs())


async def test_a_prepared_job_is_created_at_its_instant_as_it_would_have_been_built() -> None:
    shell = Shell()
    shell.create("backup")
    unprepared = Shell()
    unprepared.create("backup")
    await prepare(shell, "backup")
    assert len(shell.applier.prepared) == 1
    assert posted_jobs(shell) == 0  # nothing is created ahead
    await shell.apply("backup")
    await unprepared.apply("backup")
    assert len(shell.applier.prepared) == 0  # taken
    made, built = shell.jobs(), unprepared.jobs()
    assert len(made) == 1
    for job in (*made, *built):  # what differs between two fake servers
        for volatile in ("uid", "resourceVersion", "creationTimestamp"):
            job["metadata"].pop(volatile)
        job["metadata"]["ownerReferences"][0].pop("uid")
    assert made == built


async def test_a_run_the_instant_refuses_is_never_created_from_its_prepared_body() -> None:
    shell = Shell()
    shell.create("backup")
    await prepare(shell, "backup")
    edit(shell, "backup", {"suspend": True})
    await shell.apply("backup")
    assert posted_jobs(shell) == 0


async def test_a_template_edited_after_preparing_is_the_one_created() -> None:
    shell = Shell()
    shell.create("backup")
    await prepare(shell, "backup")
    edit(shell, "backup", {"jobTemplate": other_template()})
    await shell.apply("backup")
    [job] = shell.jobs()
    assert job["spec"]["backoffLimit"] == 9


async def test_preparing_stops_when_the_instant_comes_and_never_writes() -> None:
    shell = Shell()
    for index in range(100):
        shell.create(f"b{index:03d}")
    times = iter([AHEAD] * 40 + [SLOT] * 1000)
    shell.scheduler._clock = lambda: next(times)
    due = [((NAMESPACE, f"b{index:03d}"), SLOT.timestamp()) for index in range(100)]
    await shell.scheduler.prepare(due)
    assert 0 < len(shell.applier.prepared) < 100  # the rest are built by their reconciles
    assert posted_jobs(shell) == 0


async def test_the_loop_prepares_keys_lead_seconds_before_they_fall_due() -> None:
    now = [100.0]
    wakeups: WakeupQueue[str] = WakeupQueue(clock=lambda: now[0])
    prepared: list[list[tuple[str, float]]] = []
    reconciled: list[str] = []

    async def prepare_keys(keys: list[tuple[str, float]]) -> None:
        prepared.append(keys)

    async def reconcile(key: str) -> Applied:
        reconciled.append(key)
        return Applied(Outcome.DONE)

    loop: KeyedLoop[str, Applied] = KeyedLoop(
        "test", wakeups, SoleLeader("a"), reconcile, 4, prepare=prepare_keys, lead=2.0
    )
    wakeups.notify("later", 105.0)
    wakeups.notify("soon", 101.5)
    running = asyncio.create_task(loop.run())
    await eventually(lambda: bool(prepared))
    assert prepared == [[("soon", 101.5)]]  # within 2 s; "later" is not yet
    assert reconciled == []  # prepared is not due
    now[0] = 103.5
    wakeups.notify("now")  # wakes the loop
    await eventually(lambda: reconciled == ["now", "soon"] or reconciled == ["soon", "now"])
    await eventually(lambda: len(prepared) == 2)
    assert prepared[1] == [("later", 105.0)]
    running.cancel()
