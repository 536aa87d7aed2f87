"""The one scheduler loop (design decision 2) and the shell that applies decisions.

A heap holds each ScheduledJob's next wake-up. The loop sleeps until the head is due, capped so a
clock jump is noticed within WAKE_CAP seconds, and wakes early when the model changes. Due
ScheduledJobs are reconciled concurrently through a bounded pool, one task per object at a time,
so a burst of simultaneous slots turns into parallel Job creations.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from cronlease import metrics
from cronlease.events import post_event
from cronlease.jobinfo import job_info
from cronlease.jobtemplate import build_job
from cronlease.kube import ApiError, KubeApi
from cronlease.leadership import Leadership
from cronlease.model import Key, Model
from cronlease.naming import TRIGGER_SCHEDULE, parse_time
from cronlease.reconcile import (
    Decision,
    ObjectRef,
    PlannedDeletion,
    PlannedRun,
    ScheduledJobView,
    decide,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

WAKE_CAP = 5.0
MAX_BACKOFF = 60.0
# A cursor this far behind means a long catch-up, decided in a worker thread.
LONG_CATCH_UP = timedelta(minutes=10)
# How long status writes and Events wait for a burst of creations to drain before going anyway.
CREATIONS_FIRST_PATIENCE = 30.0


@dataclass(frozen=True, slots=True)
class StatusWrite:
    """A status merge patch, conditional on the version it was decided on. All a reconcile
    keeps while it waits for creations to drain: at 5,000 due at once, holding each object and
    its decision instead set the operator's memory high-water mark."""

    ref: ObjectRef
    version: str
    patch: dict[str, Any]


class NotLeading(Exception):
    """Raised before a write when this replica no longer holds the Lease (client-side fence)."""


class RetryLater(Exception):
    """A decision could not be applied in full; the object is retried with backoff."""


class TemplateRefused(Exception):
    """The API server refused a Job made from the template: retrying cannot help."""


class Stale(Exception):
    """The decision was made on an outdated copy of the object; decide again at once."""


# The fencing policy's refusals start with this (manifests/fencing.yaml, messageExpression).
FENCING_MESSAGE = "cronlease fencing:"
# Retries of a write refused as stale while we still hold the Lease (the policy's cache lags).
FENCING_RETRIES = 6


def is_fencing_refusal(error: ApiError) -> bool:
    return error.status in (400, 403, 422) and FENCING_MESSAGE in error.body


class CreationsFirst:
    """Holds status writes and Events back while Job creations are under way.

    At a shared slot every status write competes with the creations for the API server and for
    this process, and each one echoes back as a watch event; creations alone set the lag. A
    write waits until no ScheduledJob is deciding or creating, or `patience` seconds at most, so
    a steady stream of creations can delay status but never starve it. Losing a held write is
    harmless: a due slot whose Job exists is recorded as a run by the next decision.
    """

    def __init__(self, patience: float) -> None:
        self.patience = patience
        self._pending = 0
        self._idle = asyncio.Event()
        self._idle.set()

    @contextlib.contextmanager
    def creating(self) -> Iterator[None]:
        self._pending += 1
        self._idle.clear()
        try:
            yield
        finally:
            self._pending -= 1
            if not self._pending:
                self._idle.set()

    async def wait_turn(self) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), self.patience)


class Scheduler:
    def __init__(
        self,
        api: KubeApi,
        leadership: Leadership,
        jobs_listed: asyncio.Event,
        namespaces: tuple[str, ...] = (),
        max_concurrency: int = 64,
        test_hold_before_create: float = 0.0,
    ) -> None:
        self.api = api
        # Set by the Job watch once its first listing is in the model (cronlease.jobwatch).
        self._jobs_listed = jobs_listed
        self.leadership = leadership
        self.namespaces = namespaces
        self.model = Model(self.notify, on_job_finished=self._count_result)
        self._heap: list[tuple[float, int, Key]] = []
        self._planned: dict[Key, float] = {}
        self._sequence = itertools.count()
        self._wakeup = asyncio.Event()
        self._in_flight: set[Key] = set()
        self._rerun: set[Key] = set()
        self._failures: dict[Key, int] = {}
        # Creations set the lag, so at a burst they go first: status writes and Events wait for
        # them to drain, then get fewer slots (Events fewest: they are informational).
        self._creations = CreationsFirst(CREATIONS_FIRST_PATIENCE)
        # At most this many ScheduledJobs decide and create at once. The rest of a burst waits
        # before deciding, so decisions interleave with the responses instead of all running
        # before the first response is read.
        self._act_pool = asyncio.Semaphore(max_concurrency)
        self._status_pool = asyncio.Semaphore(max(1, max_concurrency // 4))
        self._event_pool = asyncio.Semaphore(4)
        self._background: set[asyncio.Task[None]] = set()
        self._seeded = False
        self._checked_generation: dict[str, int] = {}  # ScheduledJob uid -> template dry-run
        # Test hook: widen the window between the client-side check and the create, where a
        # paused leader (GC, SIGSTOP) can lose its Lease unawares; the API server must fence it.
        self._hold_before_create = test_hold_before_create

    # Planning wake-ups

    def notify(self, key: Key, at: float | None = None) -> None:
        """Reconcile `key` at `at` (epoch seconds), or now; an earlier plan wins."""
        when = time.time() if at is None else at
        planned = self._planned.get(key)
        if planned is not None and planned <= when:
            return
        self._planned[key] = when
        heapq.heappush(self._heap, (when, next(self._sequence), key))
        self._wakeup.set()

    async def run(self) -> None:
        while True:
            await self.leadership.wait_leading()
            if not self._seeded:
                await self._seed()
            now = time.time()
            while self._heap and self._heap[0][0] <= now:
                when, _, key = heapq.heappop(self._heap)
                if self._planned.get(key) != when:
                    continue  # superseded by an earlier plan
                del self._planned[key]
                self._start(key)
            delay = min(self._heap[0][0] - time.time(), WAKE_CAP) if self._heap else WAKE_CAP
            self._wakeup.clear()
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wakeup.wait(), delay)

    async def _seed(self) -> None:
        """Fill the model once from the API server's watch cache before the first decision.

        kopf keeps ScheduledJobs current on every replica, but has no public signal for "initial
        listing done", so they are listed here; the Jobs come from the Job watch's own listing,
        awaited first. Without both a new leader could decide Forbid on a partial model.
        Retried until it succeeds: right after the CRD is installed the API server answers 429.
        """
        for attempt in itertools.count():
            try:
                await self._list_into_model()
                return
            except Exception as error:  # 429 while the CRD settles, a dropped connection
                backoff = min(0.5 * 2**attempt, 10.0)
                log.warning("seeding the model: %s; retrying in %.1f s", error, backoff)
                await asyncio.sleep(backoff)

    async def _list_into_model(self) -> None:
        await self._jobs_listed.wait()  # the Job watch lists the Jobs; no second LIST here
        scopes = self.namespaces or ("",)
        for namespace in scopes:
            async for items, _ in self.api.list_scheduledjobs(namespace):
                for item in items:
                    self.model.upsert_scheduledjob(item)
        self._seeded = True
        metrics.scheduledjobs.set(self.model.scheduledjob_count)
        log.info("model seeded with %d ScheduledJobs", self.model.scheduledjob_count)

    def _start(self, key: Key) -> None:
        if key in self._in_flight:
            self._rerun.add(key)
            return
        self._in_flight.add(key)
        self._spawn(self._reconcile_guarded(key))

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _reconcile_guarded(self, key: Key) -> None:
        wake: float | None = None
        try:
            wake = await self._reconcile(key)
            self._failures.pop(key, None)
        except NotLeading:
            log.info("%s/%s: not leading any more; leaving it to the new leader", *key)
            self._rerun.add(key)  # to be decided again if leadership comes back
        except Stale:
            self._rerun.add(key)  # the model now holds the fresh copy
        except Exception as error:  # one bad object must never stop the loop
            failures = self._failures[key] = self._failures.get(key, 0) + 1
            backoff = min(2.0 ** (failures - 1), MAX_BACKOFF)
            level = logging.WARNING if isinstance(error, RetryLater) else logging.ERROR
            log.log(
                level,
                "%s/%s: %s; retrying in %.0f s",
                *key,
                error,
                backoff,
                exc_info=not isinstance(error, RetryLater),
            )
            wake = time.time() + backoff
        finally:
            self._in_flight.discard(key)
        if key in self._rerun:
            self._rerun.discard(key)
            self.notify(key)
        if wake is not None:
            self.notify(key, wake)

    async def _reconcile(self, key: Key) -> float | None:
        with self._creations.creating():
            async with self._act_pool:
                acted = await self._decide_and_act(key)
        if acted is None:
            return None
        write, wake_at = acted
        if write is not None:
            await self._write_status(write)
        return wake_at

    async def _decide_and_act(self, key: Key) -> tuple[StatusWrite | None, float | None] | None:
        """Decide, delete and create, then record: the status write still to make, and when to
        wake; None when there is nothing left to record."""
        obj = self.model.scheduledjob(key)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            return None
        sj = ScheduledJobView.from_object(obj)
        if not await self._template_accepted(sj, obj):
            return None  # recorded in status; the resulting watch event decides again
        jobs, now = self.model.jobs_of(sj.uid), datetime.now(UTC)
        behind = parse_time(sj.status.get("processedUntil"))
        if behind is not None and now - behind > LONG_CATCH_UP:
            # Enumerating hours of missed slots takes CPU seconds: keep the loop responsive.
            decision = await asyncio.to_thread(decide, sj, jobs, now)
        else:
            decision = decide(sj, jobs, now)
        for deletion in decision.deletions:
            await self._delete(sj, deletion)
        for run in decision.runs:
            try:
                await self._create(sj, run)
            except TemplateRefused as refused:
                await self._record_refused_template(sj, obj, str(refused))
                return None
        wake_at = decision.wake_at.timestamp() if decision.wake_at else None
        return self._record(sj, obj, decision), wake_at

    async def _template_accepted(self, sj: ScheduledJobView, obj: dict[str, Any]) -> bool:
        """Once per generation (and replica), a dry-run create of the template: a typo is then
        reported at once as InvalidSpec, not at the first slot, which may be hours away."""
        refused = sj.status.get("templateError") or {}
        if self._checked_generation.get(sj.uid) == sj.generation or (
            refused.get("generation") == sj.generation
        ):
            return True
        run = PlannedRun(f"{sj.name}-check", datetime.now(UTC), TRIGGER_SCHEDULE)
        self._check_leading()
        try:
            await self.api.create_job(
                build_job(sj, run, self.leadership.identity, self.leadership.token), dry_run=True
            )
        except ApiError as error:
            if error.status in (400, 422):
                await self._record_refused_template(sj, obj, error.message)
                return False
        self._checked_generation[sj.uid] = sj.generation
        return True

    async def _record_refused_template(
        self, sj: ScheduledJobView, obj: dict[str, Any], message: str
    ) -> None:
        """Recorded for this generation; the next decision reports InvalidSpec and stops."""
        refused = {"generation": sj.generation, "message": message}
        write = self._status_write(sj, obj, {**obj.get("status", {}), "templateError": refused})
        if write is not None:
            # Not held back for creations: this one is among them, and a refusal is one write.
            await self._write_status(write, creations_first=False)

    # Applying a decision

    def _check_leading(self) -> None:
        if not self.leadership.is_leading():
            metrics.rejected_writes.inc()
            raise NotLeading()

    async def _fenced(self, write: Callable[[], Awaitable[T]]) -> T:
        """Run one write; if the API server refuses it as stale, ask the Lease who leads: step
        down if it is somebody else, else retry (right after a takeover the policy lags)."""
        for attempt in range(FENCING_RETRIES):
            try:
                return await write()
            except ApiError as error:
                if not is_fencing_refusal(error):
                    raise
                metrics.rejected_writes.inc()
                log.warning("write refused by the fencing policy: %s", error.message)
                if not await self.leadership.verify():
                    raise NotLeading() from error
                await asyncio.sleep(0.05 * 2**attempt)
                self._check_leading()
        raise RetryLater("writes still refused as stale although we hold the Lease")

    async def _delete(self, sj: ScheduledJobView, deletion: PlannedDeletion) -> None:
        self._check_leading()
        try:
            await self.api.delete_job(sj.namespace, deletion.job_name, deletion.uid)
        except ApiError as error:
            if error.status not in (404, 409):  # gone already, or a different Job now
                metrics.reconcile_errors.labels("delete").inc()
                raise RetryLater(f"deleting Job {deletion.job_name}: {error}") from error
        self._event(
            sj, "Normal", "SuccessfulDelete", f"deleted Job {deletion.job_name} ({deletion.reason})"
        )

    def _record(
        self, sj: ScheduledJobView, obj: dict[str, Any], decision: Decision
    ) -> StatusWrite | None:
        """What the decision did and skipped: metrics and Events now, status after creations."""
        for skip in decision.skips:
            metrics.slots_skipped.labels(skip.reason.value).inc(skip.count)
        for event in decision.events:
            self._event(sj, event.type, event.reason, event.message)
        return self._status_write(sj, obj, decision.status)

    async def _create(self, sj: ScheduledJobView, run: PlannedRun) -> None:
        self._check_leading()
        job = build_job(sj, run, self.leadership.identity, self.leadership.token)
        if self._hold_before_create:
            log.warning(
                "test hook: holding Job %s for %.1f s", run.job_name, self._hold_before_create
            )
            await asyncio.sleep(self._hold_before_create)
        try:
            created = await self._fenced(lambda: self.api.create_job(job))
        except ApiError as error:
            if error.status == 409 and await self._adopt_existing(sj, run):
                return
            if error.status in (400, 422):
                raise TemplateRefused(error.message) from error
            metrics.reconcile_errors.labels("create").inc()
            self._event(sj, "Warning", "FailedCreate", f"Job {run.job_name}: {error.message}")
            raise RetryLater(f"creating Job {run.job_name}: {error}") from error
        lag = time.time() - run.slot.timestamp()
        self.model.upsert_job(created)  # Forbid must see it before its watch event arrives
        metrics.jobs_created.labels(run.trigger).inc()
        if run.trigger == TRIGGER_SCHEDULE:
            metrics.schedule_lag.observe(max(lag, 0.0))
        self._event(sj, "Normal", "SuccessfulCreate", f"created Job {run.job_name}")

    async def _adopt_existing(self, sj: ScheduledJobView, run: PlannedRun) -> bool:
        """AlreadyExists: ours (same owner uid) means an earlier attempt succeeded: done."""
        existing = await self.api.get_job(sj.namespace, run.job_name)
        if job_info(existing).owner_uid == sj.uid:
            self.model.upsert_job(existing)
            return True
        return False

    def _status_write(
        self, sj: ScheduledJobView, obj: dict[str, Any], status: dict[str, Any]
    ) -> StatusWrite | None:
        """The patch from the object's status to `status`, stamped; None if they are equal."""
        status = {
            **status,
            "leader": self.leadership.identity,
            "fencingToken": self.leadership.token,
        }
        current = obj.get("status") or {}
        if status == current:
            return None
        # A merge patch deletes a key only when told to with null.
        patch = {**{field: None for field in current if field not in status}, **status}
        return StatusWrite(sj.ref, obj["metadata"]["resourceVersion"], patch)

    async def _write_status(self, write: StatusWrite, creations_first: bool = True) -> None:
        if creations_first:
            await self._creations.wait_turn()
        self._check_leading()
        ref = write.ref
        try:
            async with self._status_pool:
                updated = await self._fenced(
                    lambda: self.api.patch_status(
                        ref.namespace, ref.name, write.patch, write.version
                    )
                )
        except ApiError as error:
            if error.status == 404:
                return
            if error.status == 409:
                fresh = await self.api.get_scheduledjob(ref.namespace, ref.name)
                self.model.upsert_scheduledjob(fresh)
                raise Stale() from error
            metrics.reconcile_errors.labels("status").inc()
            raise RetryLater(f"writing status: {error}") from error
        self.model.upsert_scheduledjob(updated)

    def _event(self, sj: ScheduledJobView, kind: str, reason: str, message: str) -> None:
        """Events go out in the background: the hot path never waits for them."""
        self._spawn(self._post_event(sj.ref, kind, reason, message))

    async def _post_event(self, ref: ObjectRef, kind: str, reason: str, message: str) -> None:
        await self._creations.wait_turn()
        async with self._event_pool:
            await post_event(self.api, ref, kind, reason, message, self.leadership.identity)

    @staticmethod
    def _count_result(job: dict[str, Any]) -> None:
        metrics.job_results.labels(job_info(job).state.value).inc()
