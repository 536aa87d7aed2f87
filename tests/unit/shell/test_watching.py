"""The one list-then-watch, as the Job and ScheduledJob watches use it, on the fake API server:
listing, following, resuming from bookmarks, listing again after 410, and objects it cannot
take."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from builders import NAMESPACE, OWNER_REF
from harness import Shell, eventually, scheduledjob

from cronlease.core.bodies.runobject import run_info
from cronlease.core.names.naming import ANNOTATION_SCHEDULED_AT, LABEL_SCHEDULEDJOB
from cronlease.shell.kube import JOBS, RUNREQUESTS, RUNS, SCHEDULEDJOBS
from cronlease.shell.model import Model
from cronlease.shell.modelwatch import JobWatch, RunRequestWatch, ScheduledJobWatch
from cronlease.shell.runstore import RunStore
from cronlease.shell.runwatch import RunWatch

OWNER_UID = "uid-report"


def job(name: str, **annotations: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {LABEL_SCHEDULEDJOB: "report"},
            "annotations": annotations,
            "ownerReferences": [{**OWNER_REF, "uid": OWNER_UID}],
        },
        "spec": {},
    }


def names(shell: Shell) -> set[str]:
    return {info.name for info in shell.model.jobs_of(NAMESPACE, OWNER_UID)}


@pytest.fixture
async def watched() -> AsyncIterator[Shell]:
    """A shell whose Job watch runs, with one Job listed before it started."""
    shell = Shell()
    shell.server.put(job("listed"))
    watch, listed = shell.job_watch()
    task = asyncio.create_task(watch.run())
    async with asyncio.timeout(5):
        await listed.wait()
    yield shell
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_a_listing_then_every_change_reaches_the_model(watched: Shell) -> None:
    assert names(watched) == {"listed"}
    watched.server.put(job("added"))
    await eventually(lambda: names(watched) == {"listed", "added"})
    watched.server.remove(*JOBS, NAMESPACE, "listed")
    await eventually(lambda: names(watched) == {"added"})


async def test_a_watch_the_server_ends_resumes_from_the_last_bookmark(watched: Shell) -> None:
    await eventually(lambda: watched.server.open_watches == 1)
    watched.server.put({**job("unrelated"), "metadata": {"name": "unrelated", "namespace": "x"}})
    watched.server.bookmark()
    bookmarked = str(watched.server.version)
    watched.server.end_watches()  # after the bookmark, in the same stream
    await eventually(lambda: watched.server.open_watches == 1)
    assert watched.server.watched_from[-1] == bookmarked
    assert not any(call[0] == "GET" for call in watched.server.calls[1:])  # no second LIST


async def test_after_410_a_new_listing_settles_what_the_gap_hid(watched: Shell) -> None:
    await eventually(lambda: watched.server.open_watches == 1)
    # While no watch is open, the Job is deleted and the history compacted away.
    watched.server.end_watches()
    watched.server.remove(*JOBS, NAMESPACE, "listed")
    watched.server.put(job("created-meanwhile"))
    watched.server.compact()
    await eventually(lambda: names(watched) == {"created-meanwhile"})
    lists = [call for call in watched.server.calls if call[0] == "GET"]
    assert len(lists) == 2


async def test_a_job_the_model_cannot_read_affects_only_itself(watched: Shell) -> None:
    """A user's edit of one Job's annotation must never stop the watch for everyone else."""
    watched.server.put(job("corrupted", **{ANNOTATION_SCHEDULED_AT: "not a time"}))
    watched.server.put(job("after"))
    await eventually(lambda: "after" in names(watched))
    assert watched.server.open_watches == 1


async def test_a_watch_failing_for_a_minute_is_reported_stuck_until_it_works_again() -> None:
    """Readiness reflects a stuck watch: decisions on a model that no longer hears of its Jobs
    (403 after an RBAC change, an API server that refuses) are reported, not silent."""
    shell = Shell()
    clock = [1000.0]
    listed = asyncio.Event()
    watch = JobWatch(shell.api, shell.model, (), listed, clock=lambda: clock[0])
    shell.server.fail("GET", r"/jobs$", 403, times=1000)
    task = asyncio.create_task(watch.run())
    try:
        await eventually(lambda: len(shell.server.calls) >= 1)
        assert watch.stuck(after=60) is None  # failing, but not for long
        clock[0] += 61
        assert watch.stuck(after=60) == "the Job watch of all namespaces has failed for 61 s"
        shell.server.faults.clear()
        await eventually(listed.is_set)
        assert watch.stuck(after=60) is None
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_readiness_waits_for_every_scope_to_list_and_fails_while_a_watch_fails() -> None:
    """Not ready until each watched namespace is listed (a replica whose model misses Jobs must
    not count as a synced standby), and not ready again once a watch has failed for a while."""
    shell = Shell()
    clock = [1000.0]
    listed = asyncio.Event()
    watch = JobWatch(shell.api, shell.model, ("team-a", "team-b"), listed, clock=lambda: clock[0])
    shell.server.fail("GET", r"/namespaces/team-b/jobs$", 403, times=1000)
    assert watch.unsynced(after=5) == "the Job watch has not listed team-a, team-b yet"
    task = asyncio.create_task(watch.run())
    try:
        team_b_only = "the Job watch has not listed team-b yet"
        await eventually(lambda: watch.unsynced(after=5) == team_b_only)
        assert not listed.is_set()
        shell.server.faults.clear()
        await eventually(listed.is_set)
        assert watch.unsynced(after=5) is None
        shell.server.fail("WATCH", r"/jobs$", 403, times=1000)
        shell.server.end_watches()

        def a_second_passes_and_readiness_fails() -> bool:
            clock[0] += 1
            return watch.unsynced(after=5) is not None

        await eventually(a_second_passes_and_readiness_fails)
        assert (watch.unsynced(after=5) or "").startswith("the Job watch of team-")
        assert watch.stuck(after=60) is None  # not ready, but alive: no restart yet
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_the_scheduledjob_watch_follows_and_after_410_settles_a_deletion_it_missed() -> None:
    """A ScheduledJob deleted while no watch was open is gone from the model after the next
    listing (and its key woken, so that its held Jobs are released), not kept for ever."""
    shell = Shell()
    shell.server.put(scheduledjob("listed"))
    listed = asyncio.Event()
    watch = ScheduledJobWatch(shell.api, shell.model, (), listed)
    assert watch.unsynced(after=5) == "the ScheduledJob watch has not listed all namespaces yet"
    task = asyncio.create_task(watch.run())

    def stored(name: str) -> bool:
        return shell.model.scheduledjob((NAMESPACE, name)) is not None

    try:
        await eventually(listed.is_set)
        assert stored("listed")
        shell.server.put(scheduledjob("added"))
        await eventually(lambda: stored("added"))
        await eventually(lambda: shell.server.open_watches == 1)
        shell.wakeups.pop_due()
        shell.server.end_watches()
        shell.server.remove(*SCHEDULEDJOBS, NAMESPACE, "listed")
        shell.server.compact()
        await eventually(lambda: not stored("listed"))
        assert stored("added")
        assert (NAMESPACE, "listed") in shell.wakeups.pop_due()
        assert watch.unsynced(after=5) is None
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def runrequest(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "cronlease.io/v1alpha1",
        "kind": "RunRequest",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"scheduledJobName": "report", "replay": {"deadLetters": True}},
    }


def requested(shell: Shell) -> set[str]:
    return {obj["metadata"]["name"] for obj in shell.model.runrequests_for(NAMESPACE, "report")}


async def test_the_runrequest_watch_follows_and_after_410_settles_a_deletion_it_missed() -> None:
    """RunRequests are on the same list-then-watch as everything else: listed before a leader
    decides, followed, and a deletion missed while no watch was open settled by the relisting
    (its ScheduledJob woken, so that the request's Jobs are released)."""
    shell = Shell()
    shell.server.put(runrequest("listed"))
    listed, served = asyncio.Event(), asyncio.Event()
    served.set()
    watch = RunRequestWatch(shell.api, shell.model, (), listed, served)
    assert watch.unsynced(after=5) == "the RunRequest watch has not listed all namespaces yet"
    task = asyncio.create_task(watch.run())
    try:
        await eventually(listed.is_set)
        assert requested(shell) == {"listed"}
        shell.server.put(runrequest("added"))
        await eventually(lambda: requested(shell) == {"listed", "added"})
        await eventually(lambda: shell.server.open_watches == 1)
        shell.wakeups.pop_due()
        shell.server.end_watches()
        shell.server.remove(*RUNREQUESTS, NAMESPACE, "listed")
        shell.server.compact()
        await eventually(lambda: requested(shell) == {"added"})
        assert (NAMESPACE, "report") in shell.wakeups.pop_due()
        assert watch.unsynced(after=5) is None
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_without_the_runrequest_crd_there_are_none_until_it_is_served() -> None:
    """CRDs managed outside the chart may lag an upgrade: once the ScheduledJobs (same group)
    are served, a 404 for RunRequests lists none, so a new leader does not wait and readiness
    and liveness hold; the watch keeps trying, and once the resource is served its objects come
    in."""
    shell = Shell()
    shell.server.put(runrequest("early"))
    clock = [1000.0]
    listed, served = asyncio.Event(), asyncio.Event()
    served.set()
    watch = RunRequestWatch(shell.api, shell.model, (), listed, served, clock=lambda: clock[0])
    shell.server.fail(
        "GET", r"/runrequests$", 404, "the server could not find the resource", 0, 1000
    )
    task = asyncio.create_task(watch.run())
    try:
        await eventually(listed.is_set)
        assert requested(shell) == set()
        clock[0] += 3600
        assert watch.unsynced(after=5) is None
        assert watch.stuck(after=60) is None
        shell.server.faults.clear()
        await eventually(lambda: requested(shell) == {"early"})
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_runrequest_404_is_absence_only_once_the_group_is_served() -> None:
    """An API server still registering its custom resources answers 404 for all of them: before
    the ScheduledJobs are listed, a RunRequest 404 is an ordinary failure (nothing listed, and
    the probes count it). After absence, any other failure counts again."""
    shell = Shell()
    clock = [1000.0]
    listed, served = asyncio.Event(), asyncio.Event()
    watch = RunRequestWatch(shell.api, shell.model, (), listed, served, clock=lambda: clock[0])
    shell.server.fail("GET", r"/runrequests$", 404, "not found", 0, 1000)
    task = asyncio.create_task(watch.run())
    try:
        await eventually(lambda: len(shell.server.calls) >= 2)
        assert not listed.is_set()
        clock[0] += 61
        assert (watch.stuck(after=60) or "").startswith("the RunRequest watch of all namespaces")
        served.set()  # the ScheduledJobs are listed: the group is served, RunRequests are not
        await eventually(listed.is_set)
        assert watch.stuck(after=60) is None
        shell.server.faults.clear()
        shell.server.fail("GET", r"/runrequests$", 403, "forbidden", 0, 1000)
        await eventually(lambda: watch.stuck(after=60) is not None)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_the_run_watches_feed_both_views_and_after_410_settle_a_deletion() -> None:
    """A Run reaches the Run model its ScheduledJob's decisions read and the supervisor's store;
    `listed` waits for the Runs, the step Jobs and the heartbeat Leases; a Run deleted while no
    watch was open leaves both after the next listing."""
    shell = Shell()
    run = {**job("run-listed"), "apiVersion": "cronlease.io/v1alpha1", "kind": "Run"}
    shell.server.put(run)
    runs = Model(lambda key: None, read=run_info)
    store = RunStore(lambda key: None)
    watch = RunWatch(shell.api, runs, store, ())
    unsynced = {part.unsynced(after=5) for part in watch.watches}
    assert unsynced == {
        f"the {noun} watch has not listed all namespaces yet"
        for noun in ("Run", "step Job", "heartbeat Lease")
    }
    shell.server.fail("GET", r"/leases", 500, times=1)  # the Leases list last
    task = asyncio.create_task(watch.run())

    def seen(name: str) -> tuple[bool, bool]:
        in_model = any(info.name == name for info in runs.jobs_of(NAMESPACE, OWNER_UID))
        return in_model, store.run((NAMESPACE, name)) is not None

    try:
        await eventually(watch.listed.is_set)
        assert all(part.unsynced(after=5) is None for part in watch.watches)
        assert seen("run-listed") == (True, True)
        await eventually(lambda: shell.server.open_watches == 3)
        shell.server.end_watches()
        shell.server.remove(*RUNS, NAMESPACE, "run-listed")
        shell.server.compact()
        await eventually(lambda: seen("run-listed") == (False, False))
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
