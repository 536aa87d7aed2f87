"""The shell wired to the fake API server, for unit tests: the same parts main() wires."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, ClassVar

from builders import CREATED, NAMESPACE, job_template
from fakeapi import FakeApiServer

from cronlease.shell.applier import Applied, Applier
from cronlease.shell.kube import JOBS, RUNREQUESTS, SCHEDULEDJOBS, KubeApi
from cronlease.shell.leadership import Leadership, SoleLeader
from cronlease.shell.model import Key, Model
from cronlease.shell.modelwatch import JobWatch
from cronlease.shell.scheduler import Scheduler
from cronlease.shell.wakeups import WakeupQueue

EVERY_MINUTE = "* * * * *"
# The first slot after CREATED, and a moment when it is due and on time.
SLOT = CREATED + timedelta(minutes=1)
NOW = SLOT + timedelta(seconds=0.25)


def scheduledjob(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "cronlease.io/v1alpha1",
        "kind": "ScheduledJob",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            key: value
            for key, value in {
                "schedule": EVERY_MINUTE,
                "jobTemplate": job_template(),
                **spec,
            }.items()
            if value is not None  # None removes a field
        },
    }


async def eventually(predicate: Callable[[], bool], deadline: float = 5.0) -> None:
    """Until `predicate` holds, letting the loop run; fails after `deadline` seconds. The shell
    offers no signal for every state a test waits for, so this polls, as kubectl waits do."""
    async with asyncio.timeout(deadline):
        while not predicate():  # noqa: ASYNC110
            await asyncio.sleep(0.001)


class Shell:
    """A model, a wake-up queue and an applier on one fake API server, deciding at `now`.
    Every Shell made is drained when its test ends (conftest.py): no Event posting outlives it."""

    made: ClassVar[list[Shell]] = []

    def __init__(
        self,
        server: FakeApiServer | None = None,
        leadership: Leadership | None = None,
        now: datetime = NOW,
        patience: float = 30.0,
        clock: Callable[[], datetime] | None = None,
        concurrency: int = 64,
    ) -> None:
        """Decisions happen at `now` (tests move it), or at what `clock` says if given;
        `concurrency` ScheduledJobs act at once."""
        self.server = server or FakeApiServer(clock=lambda: CREATED)
        self.api = KubeApi(self.server)
        self.leadership = leadership or SoleLeader("leader-a")
        self.wakeups: WakeupQueue[Key] = WakeupQueue()
        self.model = Model(self.wakeups.changed, on_job_change=self.wakeups.notify)
        self.applier = Applier(self.api, self.leadership, self.model, concurrency, patience)
        self.now = now
        self.applier.events.clock = lambda: self.now.timestamp()  # Events happen at `now`
        listed = asyncio.Event()
        listed.set()  # the tests feed the model themselves
        self.scheduler = Scheduler(
            self.api,
            self.leadership,
            self.model,
            self.wakeups,
            listed,
            applier=self.applier,
            clock=clock or (lambda: self.now),
        )
        Shell.made.append(self)

    def create(self, name: str, **spec: Any) -> dict[str, Any]:
        """A ScheduledJob applied by a user, and in the model as its watch would put it."""
        obj = self.server.put(scheduledjob(name, **spec))
        self.model.upsert_scheduledjob(obj)
        return obj

    def request(self, name: str, **spec: Any) -> dict[str, Any]:
        """A RunRequest applied by a user, and in the model as its watch would put it."""
        obj = self.server.put(
            {
                "apiVersion": "cronlease.io/v1alpha1",
                "kind": "RunRequest",
                "metadata": {"name": name, "namespace": NAMESPACE},
                "spec": spec,
            }
        )
        self.model.upsert_runrequest(obj)
        return obj

    def request_status(self, name: str) -> dict[str, Any]:
        obj = self.server.get(*RUNREQUESTS, NAMESPACE, name)
        assert obj is not None
        return obj.get("status") or {}

    def current(self, name: str) -> dict[str, Any]:
        obj = self.model.scheduledjob((NAMESPACE, name))
        assert obj is not None
        return obj

    async def apply(self, name: str, obj: dict[str, Any] | None = None) -> Applied:
        """One reconcile of `name` (decided on `obj`, a copy the test chose, if given)."""
        acted = await self.scheduler.act_on(obj or self.model.scheduledjob((NAMESPACE, name)))
        return await self.scheduler.finish_act(acted)

    def successor(self, leadership: Leadership | None = None) -> Shell:
        """The next leader after a crash or a handover: a cold model, filled from a listing."""
        after = Shell(self.server, leadership or SoleLeader("leader-b"), self.now)
        for job in self.jobs():
            after.model.upsert_job(job)
        for obj in self.server.items(*SCHEDULEDJOBS, NAMESPACE):
            after.model.upsert_scheduledjob(obj)
        for obj in self.server.items(*RUNREQUESTS, NAMESPACE):
            after.model.upsert_runrequest(obj)
        return after

    def created_jobs(self) -> list[str]:
        """The name of every Job ever created (the fake's history, deleted Jobs included)."""
        return [
            change.obj["metadata"]["name"]
            for _, change in self.server.history
            if change.resource == JOBS and change.event_type == "ADDED"
        ]

    def jobs(self) -> list[dict[str, Any]]:
        return self.server.items(*JOBS, NAMESPACE)

    def status(self, name: str) -> dict[str, Any]:
        obj = self.server.get(*SCHEDULEDJOBS, NAMESPACE, name)
        assert obj is not None
        return obj.get("status") or {}

    def job_watch(self) -> tuple[JobWatch, asyncio.Event]:
        listed = asyncio.Event()
        return JobWatch(self.api, self.model, (), listed), listed
