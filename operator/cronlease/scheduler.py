"""The one scheduler loop (design decision 2): orchestration only.

The leader pops the ScheduledJobs that are due from the wake-up queue and reconciles each, one
reconcile per object at a time: decide (cronlease.reconcile, off the loop for a long catch-up),
apply (cronlease.applier), and plan the next wake-up from the outcome. The model wakes an object
whenever its ScheduledJob or one of its Jobs changes.

At a burst thousands fall due at once. They wait as keys in a queue, worked by as many actors
as the applier has acting slots (decide, delete, create); what each leaves to write waits as a
record in a second queue, worked by as many writers as it has writing slots. A waiting
reconcile costs its key or its record, not a task with its frames (design note 103).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from cronlease import backoff
from cronlease.applier import Applied, Applier, FollowUp, Outcome
from cronlease.decision import Decision, ScheduledJobView
from cronlease.kube import ApiError, KubeApi
from cronlease.leadership import Leadership
from cronlease.model import Key, Model
from cronlease.naming import parse_time
from cronlease.reconcile import decide
from cronlease.requestplan import plan_waiting
from cronlease.runrequest import RunRequestView
from cronlease.wakeups import WakeupQueue
from cronlease.workpool import WorkPool

log = logging.getLogger(__name__)
T = TypeVar("T")

# A cursor this far behind means a long catch-up, decided in a worker thread.
LONG_CATCH_UP = timedelta(minutes=10)


class Scheduler:
    def __init__(
        self,
        api: KubeApi,
        leadership: Leadership,
        model: Model,
        wakeups: WakeupQueue[Key],
        listed: asyncio.Event,
        namespaces: tuple[str, ...] = (),
        max_concurrency: int = 64,
        applier: Applier | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.api = api
        self.leadership = leadership
        self.model = model
        self.wakeups = wakeups
        # Set once the watches' first listings are in the model (cronlease.modelwatch).
        self._listed = listed
        self.namespaces = namespaces
        self.applier = applier or Applier(api, leadership, model, max_concurrency)
        self._clock = clock  # "now" for decisions (tests pass their own)
        self._in_flight: set[Key] = set()  # from its start until its writes are done
        # Pending creations hold status writes back (cronlease.applier.CreationsFirst): an
        # actor counts as one from before its first key to after its last, so the keys still
        # queued count too, not only those being decided.
        self._actors = WorkPool(
            self.applier.acting_slots, self._act_one, held=self.applier.creations.creating
        )
        self._writers = WorkPool(self.applier.writing_slots, self._write_one)
        self._rerun: set[Key] = set()
        self._failures: dict[Key, int] = {}
        self._seeded = False

    async def run(self) -> None:
        while True:
            await self.leadership.wait_leading()
            if not self._seeded:
                await self._seed()
            for key in self._by_priority(self.wakeups.pop_due()):
                self._start(key)
            await self.wakeups.wait()

    async def _seed(self) -> None:
        """Fill the model's RunRequests once before the first decision.

        The ScheduledJobs and Jobs come from our own watches, whose first listings are awaited
        first (`listed`). kopf keeps RunRequests current on every replica but has no public
        signal for "initial listing done", so they are listed here. Without all three a new
        leader could decide on a partial model (Forbid, or a request that looks cancelled).
        """
        await self._listed.wait()
        for attempt in itertools.count(1):
            try:
                with self.model.reading():  # kopf may deliver a deletion meanwhile
                    for namespace in self.namespaces or ("",):
                        await self._seed_requests(namespace)
                break
            except Exception as error:  # 429 while the CRD settles, a dropped connection
                delay = backoff.SEEDING.delay(attempt)
                log.warning("seeding the model: %s; retrying in %.1f s", error, delay)
                await asyncio.sleep(delay)
        self._seeded = True
        log.info("model seeded with %d ScheduledJobs", self.model.scheduledjob_count)

    async def _seed_requests(self, namespace: str) -> None:
        """A request missing from the model would look cancelled: its Jobs released before it
        has recorded them. Without the RunRequest CRD (CRDs managed outside the chart, not yet
        upgraded) there are none, and scheduling must not wait for it."""
        try:
            async for items, _ in self.api.list_runrequests(namespace):
                for item in items:
                    self.model.upsert_runrequest(item)
        except ApiError as error:
            if error.status != 404:
                raise
            log.warning("no RunRequest resource (%s): replay and backfill are off", error.message)

    def _by_priority(self, keys: list[Key]) -> list[Key]:
        """The ScheduledJobs due together, highest spec.priority first (in the order they fell
        due within a priority). The actors take the keys first in, first out: at a burst, the
        Jobs of higher priorities are created first."""
        return sorted(keys, key=lambda key: -self.model.scheduledjob_priority(key))

    def _start(self, key: Key) -> None:
        if key in self._in_flight:
            self._rerun.add(key)  # decided again once the reconcile in flight ends
            return
        self._in_flight.add(key)
        self._actors.put(key)

    async def _act_one(self, key: Key) -> None:
        acted = await self._guarded(key, self._act(key))
        if isinstance(acted, Applied):
            self._done(key, acted)
        else:
            self._writers.put((key, acted))

    async def _write_one(self, item: tuple[Key, FollowUp]) -> None:
        key, after = item
        self._done(key, await self._guarded(key, self.applier.follow_up(after)))

    async def _guarded(self, key: Key, work: Awaitable[T]) -> T | Applied:
        try:
            return await work
        except Exception as error:  # a bug must never stop the loop: back off, log it whole
            log.exception("%s/%s: reconcile failed", *key)
            return Applied(Outcome.RETRY, error=f"{type(error).__name__}: {error}")
        except BaseException:  # cancelled (a stop): no longer in flight
            self._in_flight.discard(key)
            raise

    def _done(self, key: Key, applied: Applied) -> None:
        self._in_flight.discard(key)
        self._plan(key, applied)

    async def reconcile(self, key: Key) -> Applied:
        """One reconcile of the ScheduledJob `key`, its writes included (tests)."""
        acted = await self._act(key)
        return acted if isinstance(acted, Applied) else await self.applier.follow_up(acted)

    async def _act(self, key: Key) -> Applied | FollowUp:
        """Decide on the ScheduledJob `key` and create (or release the Jobs it leaves behind, if
        gone); what is left to write, if anything."""
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
            waiting = plan_waiting(key[1], self._requests(*key))
            return await self.applier.apply_requests(waiting)
        # Read in the acting slot: thousands of reconciles wait for one at a burst.
        return await self.applier.act(lambda: self.model.scheduledjob(key), self.decide)

    def _requests(self, namespace: str, name: str) -> list[RunRequestView]:
        """The RunRequests for the ScheduledJob; one being deleted (a finalizer of someone
        else's keeps it a while) is cancelled already, as if gone."""
        return [
            RunRequestView.from_object(obj)
            for obj in self.model.runrequests_for(namespace, name)
            if not obj["metadata"].get("deletionTimestamp")
        ]

    async def decide(self, sj: ScheduledJobView) -> Decision:
        jobs = [
            *self.model.jobs_for(sj.namespace, sj.name, sj.uid),
            *self.applier.runs.jobs_for(sj.namespace, sj.name, sj.uid),  # multi-step runs
        ]
        now = self._clock()
        requests = self._requests(sj.namespace, sj.name)
        # A ScheduledJob created while no operator ran has no cursor yet: it starts at creation.
        behind = parse_time(sj.status.get("processedUntil")) or sj.created_at
        if now - behind > LONG_CATCH_UP:
            # Enumerating hours of missed slots takes CPU seconds: keep the loop responsive.
            return await asyncio.to_thread(decide, sj, jobs, now, requests)
        return decide(sj, jobs, now, requests)

    def _plan(self, key: Key, applied: Applied) -> None:
        """The next wake-up of `key`, from how its reconcile ended."""
        if applied.outcome is Outcome.RETRY:
            failures = 0 if applied.progress else self._failures.get(key, 0)
            failures = self._failures[key] = failures + 1
            delay = backoff.RECONCILE.delay(failures)
            log.warning("%s/%s: %s; retrying in %.0f s", *key, applied.error, delay)
            # A floor: changes of its own Jobs (its own creations, among them) wait for it.
            self.wakeups.back_off(key, delay)
        elif applied.outcome is Outcome.DONE:
            self._failures.pop(key, None)
        elif applied.outcome is Outcome.NOT_LEADING:
            log.info("%s/%s: not leading any more; leaving it to the new leader", *key)
        if applied.outcome in (Outcome.STALE, Outcome.NOT_LEADING) or key in self._rerun:
            # STALE: the model holds the fresh copy now. NOT_LEADING: decided again if
            # leadership comes back (the queue is only read while leading).
            self._rerun.discard(key)
            self.wakeups.notify(key)
        if applied.wake_at is not None:
            self.wakeups.notify(key, applied.wake_at)

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
        await self._actors.drain()  # before the writers: actors hand them their records
        await self._writers.drain()
        await self.applier.drain()
