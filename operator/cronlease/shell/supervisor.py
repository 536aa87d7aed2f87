"""The supervisor of multi-step runs (issue 17): a controller on the keyed loop.

The leader supervises each Run when its Run, step Jobs or heartbeat Leases change, and at the
timers supervise() asks for (a heartbeat's deadline, a retry's backoff): one supervision per Run
at a time (cronlease.shell.keyedloop), every write through the one writer (cronlease.shell.writer).

Applying a plan: first the status write, conditional on the Run's resourceVersion and stamped
with the leader and its fencing token (the API server's policy refuses anyone else's): it claims
the attempts the plan starts. Then, and only then, the deletions, the step Jobs of the claimed
attempts and their heartbeat Leases, the releases, the Events.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from cronlease.core.bodies.stepjob import (
    LABEL_STEP,
    build_heartbeat_lease,
    build_step_job,
    step_job_info,
)
from cronlease.core.decide.decision import ObjectRef
from cronlease.core.decide.supervision import Action, RunPlan, RunView, StepJob, supervise
from cronlease.core.names.naming import FINALIZER_SLOT_RECORD, FINALIZER_SUPERVISION, RUN_KIND
from cronlease.core.specs.policies import SpecError
from cronlease.core.specs.steps import steps_of_run
from cronlease.shell import metrics
from cronlease.shell.applier import Applier
from cronlease.shell.keyedloop import Applied, KeyedLoop, Outcome
from cronlease.shell.kube import JOBS, LEASES, RUNS
from cronlease.shell.leadership import Leadership
from cronlease.shell.model import Key
from cronlease.shell.runstore import RunStore
from cronlease.shell.wakeups import WakeupQueue
from cronlease.shell.writer import (
    Exists,
    NamespaceTerminating,
    NotLeading,
    Refused,
    RetryLater,
    Stale,
)

log = logging.getLogger(__name__)

# Runs supervised at once: few Runs are due together (a burst is of slots, not of steps).
SUPERVISORS = 16


class Supervisor:
    def __init__(
        self,
        leadership: Leadership,
        store: RunStore,
        applier: Applier,
        wakeups: WakeupQueue[Key],
        listed: Callable[[], Awaitable[Any]],
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        workers: int = SUPERVISORS,
    ) -> None:
        """`listed()`: until the Runs, step Jobs and Leases are all listed."""
        self.leadership, self.store, self.applier = leadership, store, applier
        self.writer = applier.writer
        self._clock = clock
        self.loop: KeyedLoop[Key, Applied] = KeyedLoop(
            "supervisor",
            wakeups,
            leadership,
            self._reconcile,
            workers,
            keys=self._keys,
            ready=listed,
        )

    async def run(self) -> None:
        await self.loop.run()

    def _keys(self) -> Iterator[Key]:
        return self.store.keys()

    async def _reconcile(self, key: Key) -> Applied:
        try:
            wake_at = await self.supervise(key)
        except NotLeading:
            return Applied(Outcome.NOT_LEADING)
        except Stale:
            return Applied(Outcome.STALE)
        except RetryLater as error:
            return Applied(Outcome.RETRY, error=str(error))
        except NamespaceTerminating:  # what lives in it goes with it
            return Applied(Outcome.DONE)
        return Applied(Outcome.DONE, wake_at.timestamp() if wake_at else None)

    async def supervise(self, key: Key) -> datetime | None:
        """One supervision of the Run `key` (or, if it is gone, the end of its step Jobs)."""
        namespace, name = key
        obj = self.store.run(key)
        jobs = self.store.jobs_of(key)
        if obj is None:
            await self._gone(namespace, jobs)
            return None
        metadata = obj["metadata"]
        finalizers = metadata.get("finalizers") or []
        view = RunView(
            name=name,
            namespace=namespace,
            uid=str(metadata.get("uid", "")),
            spec=obj.get("spec") or {},
            status=obj.get("status") or {},
            deleting=bool(metadata.get("deletionTimestamp")),
            generation=int(metadata.get("generation") or 1),
            supervised=FINALIZER_SUPERVISION in finalizers,
        )
        heartbeats = self.store.heartbeats(namespace, jobs)
        now = self._clock()
        plan = supervise(
            view, jobs, heartbeats, now, self.store.taken(key), self.store.refused(key)
        )
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
        failed, deadline = await self._create(key, obj, plan)
        wake_at = _earliest(plan.wake_at, deadline)
        if failed:
            wake_at = now  # an attempt that could not be made: failed, at once
        for job, seconds, since in plan.leases:
            await self._create_lease(ref, job, seconds, since)
        for job in plan.releases:
            await self._release(namespace, job)
        if plan.release_run:
            await self.writer.release(RUNS, namespace, name, view.uid, FINALIZER_SUPERVISION)
        return wake_at

    async def _gone(self, namespace: str, jobs: list[StepJob]) -> None:
        """The Run is gone: nothing will settle its step Jobs any more. A live one is deleted
        (nothing outlives its run: one a user orphaned, say), a held one released."""
        for job in jobs:
            if job.trusted and not job.finished and not job.foreground:
                await self._delete(namespace, job)
        for job in jobs:
            if job.held:
                await self._release(namespace, job)

    async def _write_status(
        self, ref: ObjectRef, version: str, patch: dict[str, Any]
    ) -> dict[str, Any]:
        try:
            updated = await self.writer.patch_status(RUNS, ref.namespace, ref.name, patch, version)
        except Stale:  # decided on a stale copy: read it, decide again
            self.store.upsert_run(await self.applier.api.get_run(ref.namespace, ref.name))
            raise
        if updated is None:  # gone meanwhile: its deletion's event wakes it
            raise Stale()
        self.store.upsert_run(updated)
        self.applier.runs.upsert_job(updated)
        return updated

    async def _delete(self, namespace: str, job: StepJob) -> None:
        """An abandoned attempt or a cancelled step: in the foreground, so that it stays in
        view until its pods are gone (and one deleted in the background is deleted again so)."""
        if await self.writer.delete(JOBS, namespace, job.name, job.uid, foreground=True):
            self.store.deleted_in_foreground(namespace, job.name, job.uid)

    async def _create(
        self, key: Key, run: dict[str, Any], plan: RunPlan
    ) -> tuple[bool, datetime | None]:
        """Create the claimed attempts' Jobs (and heartbeat Leases). Whether one could not be
        made (a Job cronlease did not write holds its name, or the API server refused it), and
        the earliest heartbeat deadline of those made: the plan knew of none."""
        deadline: datetime | None = None
        if not plan.creations:
            return False, deadline
        try:
            steps = steps_of_run(run["spec"])
        except SpecError:
            return False, deadline
        leader, token = self.leadership.identity, self.leadership.token
        namespace, uid = run["metadata"]["namespace"], run["metadata"]["uid"]
        ref = ObjectRef(namespace, run["metadata"]["name"], uid, RUN_KIND)
        failed = False
        for planned in plan.creations:
            step = steps.step(planned.step)
            if step is None:
                continue
            attempt = (planned.step, planned.action, planned.attempt)
            job = build_step_job(run, step, planned.action, planned.attempt, leader, token)
            try:
                created = await self.writer.create(JOBS, job)
            except Exists:
                created = await self.applier.api.get_job(namespace, job["metadata"]["name"])
            except (Refused, NamespaceTerminating) as error:
                invalid = not isinstance(error, Refused) or error.invalid
                message = str(error) or "its namespace is being deleted"
                self.applier.event(ref, "Warning", "FailedCreate", f"step Job {attempt}: {message}")
                self.store.refused_creation(key, attempt, message, invalid)
                failed = True
                continue
            else:
                metrics.step_attempts.labels(planned.action.value).inc()
            info = step_job_info(created)
            if not info.trusted or info.run_uid != uid:
                log.warning("step Job %s exists and is not this run's", info.name)
                self.store.name_taken(key, attempt)
                failed = True
                continue
            self.store.upsert_step_job(created)
            if step.heartbeat_seconds and planned.action is Action.RUN:
                since = planned.since or self._clock()
                await self._create_lease(ref, info, step.heartbeat_seconds, since)
                due = since + timedelta(seconds=step.heartbeat_seconds)
                deadline = _earliest(deadline, due)
        return failed, deadline

    async def _create_lease(
        self, run: ObjectRef, job: StepJob, seconds: int, since: datetime
    ) -> None:
        """The attempt's heartbeat Lease. A Lease of its name that is not ours (no step label, or
        another owner: a tenant's, made before the Job to make every attempt fail) is deleted
        and ours made instead; it is said in a Warning Event."""
        lease = build_heartbeat_lease(run.namespace, job, seconds, since)
        try:
            await self.writer.create(LEASES, lease)
            return
        except Exists:
            pass
        except Refused as error:
            raise RetryLater(f"creating Lease {job.name}: {error}") from error
        existing = await self.applier.api.get_lease(run.namespace, job.name)
        if existing is None or _our_lease(existing, job):
            return  # gone meanwhile (made again on the next pass), or made already
        metadata = existing["metadata"]
        self.applier.event(
            run,
            "Warning",
            "HeartbeatLeaseTaken",
            f"Lease {job.name} was not made by cronlease; replaced by the attempt's own",
        )
        await self.writer.delete(LEASES, run.namespace, job.name, str(metadata.get("uid", "")))
        try:
            await self.writer.create(LEASES, lease)
        except Exists as error:  # made again at once: the next pass tries again
            raise RetryLater(f"Lease {job.name} is taken again") from error

    async def _release(self, namespace: str, job: StepJob) -> None:
        await self.writer.release(JOBS, namespace, job.name, job.uid, FINALIZER_SLOT_RECORD)

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
        await self.loop.finish(grace)

    async def drain(self) -> None:
        await self.loop.drain()


def _earliest(first: datetime | None, second: datetime | None) -> datetime | None:
    return second if first is None else first if second is None else min(first, second)


def _our_lease(lease: dict[str, Any], job: StepJob) -> bool:
    metadata = lease.get("metadata") or {}
    labels = metadata.get("labels") or {}
    owners = metadata.get("ownerReferences") or []
    return (
        isinstance(labels, dict)
        and LABEL_STEP in labels
        and isinstance(owners, list)
        and any(isinstance(o, dict) and o.get("uid") == job.uid for o in owners)
    )


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
