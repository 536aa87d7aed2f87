"""The scheduler of slots: a controller on the keyed loop (cronlease.shell.keyedloop).

The leader reconciles each ScheduledJob that is due: decide (cronlease.core.decide.reconcile, off
the loop for a long catch-up), apply (cronlease.shell.applier), and plan the next wake-up from the
outcome. The model wakes an object whenever its ScheduledJob or one of its Jobs changes.

At a burst thousands fall due at once. They wait as keys in the loop, worked by as many workers
as the applier has acting slots (decide, delete, create); what each leaves to write waits as a
record for the loop's writers, as many as the applier has writing slots. A waiting reconcile
costs its key or its record, not a task with its frames (decision 0014; design note 103).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from cronlease.core.decide.decision import Decision, ScheduledJobView
from cronlease.core.decide.reconcile import decide
from cronlease.core.decide.requestplan import plan_waiting
from cronlease.core.decide.runrequest import RunRequestView
from cronlease.core.names.jobinfo import JobInfo
from cronlease.core.names.naming import parse_time
from cronlease.core.specs.spec import steps_of
from cronlease.shell.applier import Applied, Applier, FollowUp, Outcome
from cronlease.shell.keyedloop import KeyedLoop
from cronlease.shell.kube import KubeApi
from cronlease.shell.leadership import Leadership
from cronlease.shell.model import Key, Model
from cronlease.shell.wakeups import WakeupQueue

log = logging.getLogger(__name__)

# A cursor this far behind means a long catch-up, decided in a worker thread.
LONG_CATCH_UP = timedelta(minutes=10)
# A burst is prepared this long before its instant: its Jobs' bodies built, connections opened
# (cronlease.core.bodies.preparation). Well within the time an idle connection stays open
# (cronlease.shell.kube.IDLE_CONNECTION), so those opened are still open at the instant.
PREPARE_LEAD = 2.0
# Connections are opened ahead for a burst of at least this many ScheduledJobs; for fewer, the
# connections already open will do.
WARM_AT_LEAST = 16
# Preparing yields to the event loop after this many ScheduledJobs: watch events and renewals
# of step Leases go on meanwhile.
PREPARE_BATCH = 32


class Scheduler:
    def __init__(
        self,
        api: KubeApi,
        leadership: Leadership,
        model: Model,
        wakeups: WakeupQueue[Key],
        listed: asyncio.Event,
        max_concurrency: int = 64,
        applier: Applier | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        prepare: bool = False,
    ) -> None:
        """`prepare`: get each burst ready PREPARE_LEAD seconds before its instant."""
        self.api = api
        self.leadership = leadership
        self.model = model
        # Set once the watches' first listings are in the model (cronlease.shell.modelwatch).
        self._listed = listed
        self.applier = applier or Applier(api, leadership, model, max_concurrency)
        self._clock = clock  # "now" for decisions (tests pass their own)
        # Pending creations hold status writes back (cronlease.shell.applier.CreationsFirst): a
        # worker counts as one from before its first key to after its last, so the keys still
        # queued count too, not only those being decided.
        self.loop: KeyedLoop[Key, FollowUp] = KeyedLoop(
            "scheduler",
            wakeups,
            leadership,
            self._act,
            self.applier.acting_slots,
            follow_up=self.applier.follow_up,
            writers=self.applier.writing_slots,
            keys=self._keys,
            ready=self._ready,
            order=self._by_priority,
            held=self.applier.creations.creating,
            prepare=self.prepare if prepare else None,
            lead=PREPARE_LEAD,
            carry=self._carry,
            wake_of=lambda after: after.wake_at,
        )
        # Follow-ups still queued at their key's next slot, taken into its next reconcile.
        self._carried: dict[Key, FollowUp] = {}

    async def run(self) -> None:
        await self.loop.run()

    def _keys(self) -> Iterator[Key]:
        """What a new leader reconciles: every ScheduledJob, and every one that is gone but left
        Jobs (or Runs) to release or RunRequests to answer."""
        seen: set[Key] = set()
        for key in itertools.chain(self.model.keys(), self.applier.runs.keys()):
            if key not in seen:
                seen.add(key)
                yield key

    async def _ready(self) -> None:
        """A new leader decides once the watches have listed ScheduledJobs, Jobs, Runs and
        RunRequests: on a partial model, Forbid could miss a run, or a request look cancelled."""
        await self._listed.wait()

    def _by_priority(self, keys: list[Key]) -> list[Key]:
        """The ScheduledJobs due together, highest spec.priority first (in the order they fell
        due within a priority). The actors take the keys first in, first out: at a burst, the
        Jobs of higher priorities are created first."""
        return sorted(keys, key=lambda key: -self.model.scheduledjob_priority(key))

    async def reconcile(self, key: Key) -> Applied:
        """One reconcile of the ScheduledJob `key`, its writes included (tests)."""
        return await self.finish_act(await self._act(key))

    async def finish_act(self, acted: Applied | FollowUp) -> Applied:
        """What act_on() left to write, written (tests; the loop's writers do it otherwise)."""
        return acted if isinstance(acted, Applied) else await self.applier.follow_up(acted)

    async def _act(self, key: Key) -> Applied | FollowUp:
        """Decide on the ScheduledJob `key` and create (or release the Jobs it leaves behind, if
        gone); what is left to write, if anything."""
        carried = self._carried.pop(key, None)
        if not self.model.scheduledjob_live(key):
            # Gone or going: no decision runs its slots again, its Jobs go with it (the garbage
            # collector; a foreground deletion waits for them), and none may wait on us.
            self.applier.forget(key)
            held = [
                *self.model.releasable_held_jobs(key),
                *self.applier.runs.releasable_held_jobs(key),
            ]
            released = await self.applier.release(key[0], held)
            if released.outcome is not Outcome.DONE:
                return released
            waiting = plan_waiting(key[1], self._requests(*key), self._clock())
            return await self.applier.apply_requests(waiting)
        # Read once a worker has the key: at a burst thousands wait as keys, holding no copy.
        acted = await self.act_on(self.model.scheduledjob(key), carried)
        if carried is not None and isinstance(acted, Applied):
            # Not joined (the decision failed, or its template check ended it): the carried
            # writes go now, as they would have (its status write refused if the object changed
            # since, and then none of its releases), not behind this decision's retries.
            written = await self.applier.follow_up(carried, behind_creations=False)
            if written.outcome is not Outcome.DONE:  # the next decisions record it again
                log.info("%r: carried writes not made: %s", key, written.outcome.value)
        return acted

    def _carry(self, key: Key, after: FollowUp) -> bool:
        """Take a follow-up still queued at its key's next slot into that slot's reconcile (the
        keyed loop asks). Not one with RunRequest statuses: a request's next decision reads its
        own status, which would need the same overlay as the ScheduledJob's; those wait."""
        if after.requests:
            return False
        self._carried[key] = after
        return True

    async def act_on(
        self, obj: dict[str, Any] | None, carried: FollowUp | None = None
    ) -> Applied | FollowUp:
        """Decide on the ScheduledJob `obj` (the model's copy; a test's own) and hand the
        decision to the applier, which acts on it; what is left to write, if anything. With
        `carried`, an earlier follow-up of it not yet written: the decision reads the status as
        that follow-up's write leaves it, as it would had the write been made, and its own
        follow-up writes both (Applier.joined)."""
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            return Applied(Outcome.STALE)  # gone while it waited: decided again, as gone
        if carried is not None and not self.applier.carries(carried, obj):
            carried = None  # the object changed since: that write would have been refused (409)
        seen = obj if carried is None else self.applier.as_written(carried, obj)
        sj = ScheduledJobView.from_object(seen)
        checked = await self.applier.check(sj, obj)
        if checked is not None:
            return checked
        acted = await self.applier.act(sj, obj, await self.decide(sj))
        return acted if carried is None else self.applier.joined(carried, acted)

    def _requests(self, namespace: str, name: str) -> list[RunRequestView]:
        """The RunRequests for the ScheduledJob; one being deleted (a finalizer of someone
        else's keeps it a while) is cancelled already, as if gone."""
        return [
            RunRequestView.from_object(obj)
            for obj in self.model.runrequests_for(namespace, name)
            if not obj["metadata"].get("deletionTimestamp")
        ]

    async def decide(self, sj: ScheduledJobView) -> Decision:
        now = self._clock()
        if _long_catch_up(sj, now):
            # Enumerating hours of missed slots takes CPU seconds: keep the loop responsive.
            return await asyncio.to_thread(decide, sj, *self._inputs(sj, now))
        return decide(sj, *self._inputs(sj, now))

    def _inputs(
        self, sj: ScheduledJobView, now: datetime
    ) -> tuple[list[JobInfo], datetime, list[RunRequestView]]:
        """What decide() takes besides the ScheduledJob: its runs, `now`, its RunRequests."""
        jobs = [
            *self.model.jobs_for(sj.namespace, sj.name, sj.uid),
            *self.applier.runs.jobs_for(sj.namespace, sj.name, sj.uid),  # multi-step runs
        ]
        return jobs, now, self._requests(sj.namespace, sj.name)

    # Ahead of a burst (cronlease.core.bodies.preparation)

    async def prepare(self, due: list[tuple[Key, float]]) -> None:
        """PREPARE_LEAD seconds before ScheduledJobs fall due: open connections for the burst,
        and build the body of each Job their decisions would create at their instants, in the
        order the burst creates them, until the first instant comes. Nothing is written."""
        prepared = self.applier.prepared
        prepared.drop_stale(self._clock())
        warming = None
        if len(due) >= WARM_AT_LEAST:
            connections = min(len(due), self.applier.acting_slots)
            warming = asyncio.create_task(self.api.warm(connections))
        leader, token = self.leadership.identity, self.leadership.token
        priority = self.model.scheduledjob_priority
        ordered = sorted(due, key=lambda item: (item[1], -priority(item[0])))
        for index, (key, instant) in enumerate(ordered):
            if index % PREPARE_BATCH == PREPARE_BATCH - 1:
                await asyncio.sleep(0)
            at = datetime.fromtimestamp(instant, UTC)
            if self._clock() >= at or not self.leadership.is_leading():
                break  # the burst has begun: its reconciles build what is left
            if not self._prepare_one(key, at, leader, token):
                break
        if warming is not None:
            await warming

    def _prepare_one(self, key: Key, at: datetime, leader: str, token: int) -> bool:
        """The bodies of the Jobs the ScheduledJob `key` would create at `at`; False once no
        more can be kept."""
        obj = self.model.scheduledjob(key)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            return True
        try:
            sj = ScheduledJobView.from_object(obj)
            if steps_of(sj.spec) is not None or _long_catch_up(sj, at):
                return True  # a Run's body, or a long catch-up: built at the instant
            decision = decide(sj, *self._inputs(sj, at))
        except Exception:  # its reconcile at the instant reports whatever this is
            log.debug("%r: not prepared", key, exc_info=True)
            return True
        return all(self.applier.prepared.put(sj, run, leader, token) for run in decision.runs)

    async def finish(self, grace: float) -> None:
        """A graceful stop, once run() is cancelled: the reconciles in flight complete their
        writes for up to `grace` seconds while the Lease is still ours, so that no Job is left
        holding its slot-record finalizer for a next leader that may never come (an uninstall)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(grace):
                await self.drain()

    async def drain(self) -> None:
        """Wait for the reconciles in flight, queued ones included, and their Events (tests end
        with it)."""
        await self.loop.drain()
        await self.applier.drain()


def _long_catch_up(sj: ScheduledJobView, now: datetime) -> bool:
    # A ScheduledJob created while no operator ran has no cursor yet: it starts at creation.
    behind = parse_time(sj.status.get("processedUntil")) or sj.created_at
    return now - behind > LONG_CATCH_UP
