"""Tombstones: a deletion the model has seen keeps a late copy out (a LIST page, a GET or a write's
response read before the deletion), and lasts only while such a read can still arrive
(cronlease.shell.model.Model.reading; docs/design-notes.md)."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Iterator
from typing import Any

from builders import NAMESPACE
from fakeapi import Fault
from harness import Shell, eventually
from test_watching import job, names

from cronlease.core.names.naming import FINALIZER_SLOT_RECORD, LABEL_SCHEDULEDJOB
from cronlease.shell.kube import JOBS, RUNREQUESTS
from cronlease.shell.model import Model
from cronlease.shell.modelwatch import JobWatch, RunRequestWatch

OWNER_UID = "uid-owner"
COMPLETE = {
    "startTime": "2026-01-05T09:00:00Z",
    "completionTime": "2026-01-05T09:00:02Z",
    "conditions": [{"type": "Complete", "status": "True"}],
}


def scheduledjob_at(name: str, version: int) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": NAMESPACE, "resourceVersion": str(version)}}


def last_deleted(shell: Shell) -> dict[str, Any]:
    """The object of the server's latest DELETED event, as a watch delivers it."""
    _, change = shell.server.history[-1]
    assert change.event_type == "DELETED"
    return change.obj


# The rule, on the model alone


def test_a_deletion_seen_while_no_read_is_in_flight_leaves_no_tombstone() -> None:
    """Every later read begins after it, so none can bring the deleted object back."""
    model = Model(lambda key: None)
    model.upsert_scheduledjob(scheduledjob_at("report", 5))
    model.delete_scheduledjob(scheduledjob_at("report", 6))
    assert model.sizes()["tombstones"] == 0
    with model.reading():
        model.upsert_scheduledjob(scheduledjob_at("report", 7))  # recreated
    assert model.scheduledjob((NAMESPACE, "report")) is not None


def test_a_tombstone_lasts_while_a_read_that_began_before_it_is_in_flight() -> None:
    """Reads end in any order: the oldest in flight decides, not the one that just ended."""
    model = Model(lambda key: None)
    model.upsert_scheduledjob(scheduledjob_at("report", 5))
    seeding, writing = contextlib.ExitStack(), contextlib.ExitStack()
    seeding.enter_context(model.reading())  # a GET, its answer read at version 5
    model.delete_scheduledjob(scheduledjob_at("report", 6))  # the watch's DELETED
    writing.enter_context(model.reading())  # status writes, begun after the deletion was seen
    with model.reading():
        pass
    assert model.sizes()["tombstones"] == 1  # the seeding still needs it
    model.upsert_scheduledjob(scheduledjob_at("report", 5))  # its late item: buried
    assert model.scheduledjob((NAMESPACE, "report")) is None
    seeding.close()
    assert model.sizes()["tombstones"] == 0  # the write in flight began after it
    writing.close()
    assert model.sizes()["reads"] == 0


def test_a_million_deletions_leave_the_tombstones_bounded() -> None:
    """Reads always in flight, 64 at a time, each across 6,400 deletions (a burst that never
    ends): what is kept is what the oldest read in flight may still need, never the history."""
    model = Model(lambda key: None)
    in_flight: deque[contextlib.ExitStack] = deque()
    most = 0
    for number in range(1_000_000):
        if number % 100 == 0:
            read = contextlib.ExitStack()
            read.enter_context(model.reading())
            in_flight.append(read)
            if len(in_flight) > 64:
                in_flight.popleft().close()
            most = max(most, model.sizes()["tombstones"])
        model.delete_scheduledjob(scheduledjob_at(f"sj-{number}", 1000 + number))
    assert most <= 64 * 100
    while in_flight:
        in_flight.popleft().close()
    assert model.sizes()["tombstones"] == 0


# Sizes: what a run adds, its history cleanup takes away


def run_job(
    owner: str, number: int, status: dict[str, Any] | None = None, held: bool = True
) -> dict[str, Any]:
    """The Job of `owner`'s run `number`, unversioned (Runs.stamp versions it)."""
    metadata = {
        "name": f"{owner}-{number}",
        "namespace": NAMESPACE,
        "uid": f"uid-{owner}-{number}",
        "creationTimestamp": "2026-01-05T09:00:00Z",
        "labels": {LABEL_SCHEDULEDJOB: owner},
        "finalizers": [FINALIZER_SLOT_RECORD] if held else [],
        "ownerReferences": [
            {
                "apiVersion": "cronlease.io/v1alpha1",
                "kind": "ScheduledJob",
                "name": owner,
                "uid": f"uid-{owner}",
                "controller": True,
            }
        ],
    }
    return {"metadata": metadata, "status": status or {}}


class Runs:
    """ScheduledJobs running a Job per cycle and keeping three, fed to the model as the shell
    feeds it: create responses and status writes inside reads, watch events outside, and a
    relisting now and then (a 410)."""

    HISTORY = 3

    def __init__(self, model: Model, owners: int) -> None:
        self.model, self.version = model, 1000
        self.owners = [f"sj-{index}" for index in range(owners)]
        self.live: dict[str, dict[str, Any]] = {}  # what the API server holds, by name
        self.most_tombstones = 0

    def stamp(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        stamped = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(self.version)}}
        self.live[obj["metadata"]["name"]] = stamped
        return stamped

    def watched(self, event_type: str, obj: dict[str, Any]) -> None:
        if event_type == "DELETED":
            self.live.pop(obj["metadata"]["name"])
            self.model.delete_job(obj)
            self.most_tombstones = max(self.most_tombstones, self.model.sizes()["tombstones"])
        else:
            self.model.upsert_job(obj)

    @contextlib.contextmanager
    def creating(self, owner: str, number: int) -> Iterator[None]:
        """A create in flight: its response reaches the model after whatever the test does."""
        with self.model.reading():
            created = self.stamp(run_job(owner, number))
            self.watched("ADDED", created)
            yield
            self.model.upsert_job(created)  # the create response, after its watch event

    def cycle(self, number: int) -> None:
        for index, owner in enumerate(self.owners):
            nxt = self.owners[(index + 1) % len(self.owners)]
            with self.creating(owner, number):
                old = self.live.get(f"{nxt}-{number - self.HISTORY}")
                if old is not None:  # history cleanup, seen while another create is in flight
                    self.version += 1
                    deleted = {**old, "metadata": {**old["metadata"]}}
                    deleted["metadata"]["resourceVersion"] = str(self.version)
                    self.watched("DELETED", deleted)
            self.watched("MODIFIED", self.stamp(run_job(owner, number, {"active": 1})))
            self.watched("MODIFIED", self.stamp(run_job(owner, number, COMPLETE)))
            with self.model.reading():  # the status write's response
                self.version += 1
                status = {"status": {"lastRun": number}}
                self.model.upsert_scheduledjob({**scheduledjob_at(owner, self.version), **status})
            released = run_job(owner, number, COMPLETE, held=False)  # the run is recorded
            self.watched("MODIFIED", self.stamp(released))
        if number % 7 == 0:
            self.relist()

    def relist(self) -> None:
        with self.model.reading():
            for obj in self.live.values():
                self.model.upsert_job(obj)
        listed = {(NAMESPACE, name) for name in self.live}
        self.model.forget_unlisted_jobs("", listed, str(self.version))


def test_the_models_sizes_return_to_their_baseline_after_many_runs() -> None:
    model = Model(lambda key: None)
    runs = Runs(model, owners=20)
    for number in range(Runs.HISTORY + 1):
        runs.cycle(number)
    baseline = model.sizes()
    assert baseline["jobs"] == 20 * Runs.HISTORY
    assert baseline["tombstones"] == baseline["reads"] == baseline["held"] == 0
    for number in range(Runs.HISTORY + 1, 500):
        runs.cycle(number)
    assert model.sizes() == baseline
    assert runs.most_tombstones == 1  # each deletion was buried while a create was in flight


# On the fake API server: the reads the shell makes


class Listed(asyncio.Event):
    """The Job watch's "listed" signal, noting the model's Jobs the moment the listing ends
    (before the watch that follows it can replay anything)."""

    def __init__(self, shell: Shell) -> None:
        super().__init__()
        self.shell = shell
        self.names: set[str] | None = None
        self.tombstones = -1

    def set(self) -> None:
        self.names = names(self.shell)
        self.tombstones = self.shell.model.sizes()["tombstones"]
        super().set()


async def test_a_listing_page_read_before_a_deletion_does_not_keep_the_runrequest() -> None:
    """The RunRequest watch's listing page holds a request that is deleted before the page
    arrives: the watch that follows the listing delivers the deletion, and nothing is kept."""
    shell = Shell()
    shell.server.put(
        {
            "apiVersion": "cronlease.io/v1alpha1",
            "kind": "RunRequest",
            "metadata": {"name": "now", "namespace": NAMESPACE},
            "spec": {"scheduledJobName": "report"},
        }
    )
    page = asyncio.Event()
    shell.server.hold("GET", r"/runrequests$", page, late=True)
    listed, served = asyncio.Event(), asyncio.Event()
    watch = RunRequestWatch(shell.api, shell.model, (), listed, served)
    task = asyncio.create_task(watch.run())
    try:
        await eventually(lambda: shell.server.held == 1)  # the page holds "now"
        shell.server.remove(*RUNREQUESTS, NAMESPACE, "now")
        page.set()
        await eventually(listed.is_set)
        await eventually(lambda: shell.model.runrequests_for(NAMESPACE, "report") == [])
        assert shell.model.sizes()["tombstones"] == 0
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def test_a_write_in_flight_does_not_bring_back_what_a_relisting_found_gone() -> None:
    """After a 410 the watch lists again; a ScheduledJob that listing lacks was deleted in the
    gap, at some version up to the listing's. Our status write, applied before the deletion, may
    answer after the listing: its copy is older than the listing and must stay out (else the
    model keeps a deleted ScheduledJob, which no later event will remove)."""
    model = Model(lambda key: None)
    model.upsert_scheduledjob(scheduledjob_at("report", 5))
    with model.reading():  # the status write, in flight
        model.forget_unlisted_scheduledjobs(NAMESPACE, set(), "9")  # the relisting, at 9
        model.upsert_scheduledjob(scheduledjob_at("report", 6))  # the write's response
    assert model.scheduledjob((NAMESPACE, "report")) is None
    assert model.sizes()["tombstones"] == 0


def test_a_create_in_flight_does_not_bring_back_a_job_a_relisting_found_gone() -> None:
    model = Model(lambda key: None)

    def listed_at(version: str) -> dict[str, Any]:
        obj = job("listed")
        obj["metadata"]["resourceVersion"] = version
        return obj

    model.upsert_job(listed_at("5"))
    with model.reading():  # a write whose answer holds the Job, in flight
        model.forget_unlisted_jobs(NAMESPACE, set(), "9")
        model.upsert_job(listed_at("6"))
    assert model.sizes()["jobs"] == 0


async def test_a_job_listing_in_flight_does_not_resurrect_a_deleted_job() -> None:
    """A Job's deletion reaching the model while a page that still holds it is in flight (from
    outside this list-then-watch: its own watch is not open while it lists)."""
    shell = Shell()
    shell.server.put(job("listed"))
    page = asyncio.Event()
    shell.server.hold("GET", r"/jobs$", page, late=True)
    listed = Listed(shell)
    task = asyncio.create_task(JobWatch(shell.api, shell.model, (), listed).run())
    try:
        await eventually(lambda: shell.server.held == 1)
        shell.server.remove(*JOBS, NAMESPACE, "listed")
        shell.model.delete_job(last_deleted(shell))
        page.set()
        await eventually(listed.is_set)
        assert listed.names == set()
        assert listed.tombstones == 0  # the listing is over
        await eventually(lambda: shell.server.open_watches == 1)  # replays the DELETED: no harm
        assert names(shell) == set()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_listing_that_breaks_off_ends_its_read() -> None:
    shell = Shell()
    page = asyncio.Event()
    shell.server.hold("GET", r"/jobs$", page)
    watch, _ = shell.job_watch()
    task = asyncio.create_task(watch.run())
    await eventually(lambda: shell.server.held == 1)
    assert shell.model.sizes()["reads"] == 1
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert shell.model.sizes()["reads"] == 0
    page.set()


async def test_a_slow_create_response_does_not_resurrect_a_job_the_watch_saw_deleted() -> None:
    """The Job's ADDED and DELETED reach the model before the response to its create: without
    its tombstone the response would bring back an active Job that Forbid would wait on."""
    shell = Shell()
    owner = shell.create("report")
    watch, listed = shell.job_watch()
    task = asyncio.create_task(watch.run())
    try:
        await eventually(listed.is_set)
        response = asyncio.Event()
        # The first POST is the template's dry run; the second, the create.
        shell.server.faults.append(Fault("POST", r"/jobs$", gate=response, late=True, skip=1))
        applying = asyncio.create_task(shell.apply("report"))
        await eventually(lambda: shell.server.held == 1)
        (created,) = shell.jobs()
        name = created["metadata"]["name"]
        await eventually(lambda: len(shell.model.jobs_of(NAMESPACE, owner["metadata"]["uid"])) == 1)
        shell.server.edit(*JOBS, NAMESPACE, name, {"metadata": {"finalizers": None}})
        shell.server.remove(*JOBS, NAMESPACE, name)  # by a user, say
        await eventually(lambda: not shell.model.jobs_of(NAMESPACE, owner["metadata"]["uid"]))
        response.set()
        await applying
        assert shell.model.jobs_of(NAMESPACE, owner["metadata"]["uid"]) == []
        assert shell.model.sizes()["tombstones"] == 0
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
