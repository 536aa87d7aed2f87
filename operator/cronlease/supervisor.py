"""The supervisor loop (issue 17): the leader supervises each multi-step Run in a task of its
own, one at a time per Run, woken by its Run, step Jobs and heartbeat Leases changing, and by the
timers supervise() asks for (a heartbeat's deadline, a retry's backoff). No polling.

Applying a plan: first the status write, conditional on the Run's resourceVersion and stamped
with the leader and its fencing token (the API server's policy refuses anyone else's): it claims
the attempts the plan starts. Then, and only then, the deletions, the step Jobs of the claimed
attempts and their heartbeat Leases, the releases, the Events.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from cronlease import RUN_KIND, backoff, metrics
from cronlease.applier import Applier, NotLeading, RetryLater
from cronlease.decision import ObjectRef
from cronlease.kube import RUNS, ApiError, KubeApi, TransportError
from cronlease.leadership import Leadership
from cronlease.model import Key
from cronlease.naming import FINALIZER_SLOT_RECORD
from cronlease.runstore import RunStore
from cronlease.spec import SpecError
from cronlease.stepjob import build_heartbeat_lease, build_step_job, step_job_info
from cronlease.steps import steps_of_run
from cronlease.supervision import Action, RunPlan, RunView, StepJob, supervise
from cronlease.wakeups import WakeupQueue

log = logging.getLogger(__name__)


class Supervisor:
    def __init__(
        self,
        api: KubeApi,
        leadership: Leadership,
        store: RunStore,
        applier: Applier,
        wakeups: WakeupQueue[Key],
        listed: asyncio.Event,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.api, self.leadership, self.store, self.applier = api, leadership, store, applier
        self.wakeups = wakeups
        self._listed = listed  # set once the Runs, step Jobs and Leases are all listed
        self._clock = clock
        self._in_flight: set[Key] = set()
        self._rerun: set[Key] = set()
        self._failures: dict[Key, int] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def run(self) -> None:
        while True:
            await self.leadership.wait_leading()
            await self._listed.wait()
            for key in self.wakeups.pop_due():
                self._start(key)
            await self.wakeups.wait()

    def _start(self, key: Key) -> None:
        if key in self._in_flight:
            self._rerun.add(key)
            return
        self._in_flight.add(key)
        task = asyncio.create_task(self._supervise(key))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _supervise(self, key: Key) -> None:
        wake_at: datetime | None = None
        try:
            wake_at = await self.supervise(key)
            self._failures.pop(key, None)
        except NotLeading:
            self._rerun.add(key)  # decided again if leadership comes back
        except StaleRun:
            self._rerun.add(key)
        except (RetryLater, ApiError, TransportError) as error:
            self._back_off(key, str(error))
        except Exception as error:  # a bug must never stop the loop
            log.exception("run %s/%s: supervision failed", *key)
            self._back_off(key, f"{type(error).__name__}: {error}")
        finally:
            self._in_flight.discard(key)
        if key in self._rerun:
            self._rerun.discard(key)
            self.wakeups.notify(key)
        if wake_at is not None:
            self.wakeups.notify(key, wake_at.timestamp())

    def _back_off(self, key: Key, error: str) -> None:
        failures = self._failures[key] = self._failures.get(key, 0) + 1
        delay = backoff.RECONCILE.delay(failures)
        log.warning("run %s/%s: %s; retrying in %.0f s", *key, error, delay)
        self.wakeups.back_off(key, delay)

    async def supervise(self, key: Key) -> datetime | None:
        """One supervision of the Run `key` (or the release of its step Jobs, if it is gone)."""
        namespace, name = key
        obj = self.store.run(key)
        jobs = self.store.jobs_of(key)
        if obj is None:
            for job in jobs:  # its Run is gone: nothing will settle them any more
                if job.held:
                    await self._release(namespace, job)
            return None
        metadata = obj["metadata"]
        view = RunView(
            name=name,
            namespace=namespace,
            uid=str(metadata.get("uid", "")),
            spec=obj.get("spec") or {},
            status=obj.get("status") or {},
            deleting=bool(metadata.get("deletionTimestamp")),
            generation=int(metadata.get("generation") or 1),
        )
        heartbeats = self.store.heartbeats(namespace, jobs)
        plan = supervise(view, jobs, heartbeats, self._clock(), self.store.taken(key))
        ref = ObjectRef(namespace, name, view.uid, RUN_KIND)
        write = self.applier.status_write(
            ref, metadata["resourceVersion"], view.status, plan.status
        )
        if write is not None and plan.status != view.status:
            obj = await self._write_status(ref, write.version, write.patch)
        # What the status now says happened, said at once: nothing after may keep it unsaid.
        self._record(ref, obj, plan)
        for job in plan.deletions:
            await self._delete(namespace, job)
        if await self._create(key, obj, plan):
            self.wakeups.notify(key)  # a name someone else holds: a failed attempt, at once
        for job, seconds, since in plan.leases:
            await self._create_lease(namespace, job, seconds, since)
        for job in plan.releases:
            await self._release(namespace, job)
        return plan.wake_at

    async def _write_status(
        self, ref: ObjectRef, version: str, patch: dict[str, Any]
    ) -> dict[str, Any]:
        self.applier.check_leading()
        try:
            updated = await self.applier.fenced(
                lambda: self.api.patch_status(ref.namespace, ref.name, patch, version, RUNS)
            )
        except ApiError as error:
            if error.status == 409:  # decided on a stale copy: read it, decide again
                self.store.upsert_run(await self.api.get_run(ref.namespace, ref.name))
                raise StaleRun() from error
            raise
        self.store.upsert_run(updated)
        self.applier.runs.upsert_job(updated)
        return updated

    async def _delete(self, namespace: str, job: StepJob) -> None:
        """An abandoned attempt or a cancelled step: its pods go first (foreground)."""
        self.applier.check_leading()
        try:
            await self.api.delete_job(namespace, job.name, job.uid, foreground=True)
        except ApiError as error:
            if error.status not in (404, 409):
                raise

    async def _create(self, key: Key, run: dict[str, Any], plan: RunPlan) -> bool:
        """Create the claimed attempts' Jobs (and heartbeat Leases); True if a Job that
        cronlease did not write holds one's name."""
        if not plan.creations:
            return False
        try:
            steps = steps_of_run(run["spec"])
        except SpecError:
            return False
        leader, token = self.leadership.identity, self.leadership.token
        namespace, uid = run["metadata"]["namespace"], run["metadata"]["uid"]
        conflict = False
        for planned in plan.creations:
            step = steps.step(planned.step)
            if step is None:
                continue
            job = build_step_job(run, step, planned.action, planned.attempt, leader, token)
            self.applier.check_leading()
            try:
                created = await self._create_job(job)
            except ApiError as error:
                if error.status != 409:
                    raise
                created = await self.api.get_job(namespace, job["metadata"]["name"])
            else:
                metrics.step_attempts.labels(planned.action.value).inc()
            info = step_job_info(created)
            if not info.trusted or info.run_uid != uid:
                log.warning("step Job %s exists and is not this run's", info.name)
                self.store.name_taken(key, (planned.step, planned.action, planned.attempt))
                conflict = True
                continue
            self.store.upsert_step_job(created)
            if step.heartbeat_seconds and planned.action is Action.RUN:
                since = planned.since or self._clock()
                await self._create_lease(namespace, info, step.heartbeat_seconds, since)
        return conflict

    async def _create_lease(
        self, namespace: str, job: StepJob, seconds: int, since: datetime
    ) -> None:
        lease = build_heartbeat_lease(namespace, job, seconds, since)
        try:
            await self.api.create_lease(lease)
        except ApiError as error:
            if error.status != 409:  # made already
                raise

    async def _create_job(self, job: dict[str, Any]) -> dict[str, Any]:
        return await self.applier.fenced(lambda: self.api.create_job(job))

    async def _release(self, namespace: str, job: StepJob) -> None:
        self.applier.check_leading()
        try:
            await self.api.release_job(namespace, job.name, job.uid, FINALIZER_SLOT_RECORD)
        except ApiError as error:
            if error.status not in (404, 409, 422):
                raise

    def _record(self, ref: ObjectRef, run: dict[str, Any], plan: RunPlan) -> None:
        """Events for the recovery log's new entries (written now), on the Run; an escalation
        also on the ScheduledJob, and counted."""
        for entry in plan.log:
            kind = "Warning" if entry.warning else "Normal"
            self.applier.event(ref, kind, entry.action, entry.message)
        if plan.escalation is None:
            return
        metrics.escalations.labels(plan.escalation.value).inc()
        owner = _scheduledjob_of(run)
        escalated = next(e for e in plan.log if e.action == "Escalated")
        if owner is not None:
            self.applier.event(
                owner, "Warning", "Escalated", f"run {ref.name}: {escalated.message}"
            )

    async def finish(self, grace: float) -> None:
        """A graceful stop, once run() is cancelled: the supervisions in flight complete their
        writes for up to `grace` seconds while the Lease is still ours."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(grace):
                await self.drain()

    async def drain(self) -> None:
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


class StaleRun(Exception):
    """The Run changed since it was read: supervised again at once."""


def _scheduledjob_of(run: dict[str, Any]) -> ObjectRef | None:
    for ref in run["metadata"].get("ownerReferences") or []:
        if (
            isinstance(ref, dict)
            and ref.get("controller") is True
            and ref.get("kind") == "ScheduledJob"
        ):
            return ObjectRef(
                run["metadata"]["namespace"], str(ref.get("name")), str(ref.get("uid"))
            )
    return None
