"""Applies one decision to the API server: deletions, creations, status, Events, all fenced.

Then it releases the slot-record finalizer of every Job whose run the status now records: from
its creation until then, nothing can delete a Job whose slot could otherwise run again.

The scheduler decides; the applier acts on the decision it is given, in two halves the scheduler
runs apart at a burst: `act` (delete, create) and `follow_up` (status, releases, labels), after
`check` (the template, once per body it makes). Each returns an `Applied`:
done (and when to wake next), stale (decide again at once), not leading, or retry later.
Everything a write can meet is handled here: the fencing policy's refusals (retried while the
Lease is still ours, else step down), a 409 on create (an earlier attempt's Job: adopted if
ours), a 409 on status (decided on a stale copy), a template the API server refuses (recorded
once per generation, reported as InvalidSpec).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import orjson

from cronlease.core.bodies.jobtemplate import build_job
from cronlease.core.bodies.preparation import PreparedJobs
from cronlease.core.bodies.runobject import build_run, run_info
from cronlease.core.bodies.stepjob import build_step_job
from cronlease.core.decide.decision import (
    Decision,
    DeletionReason,
    ObjectRef,
    PlannedDeletion,
    PlannedLabel,
    PlannedRelease,
    PlannedRun,
    RequestStatus,
    ScheduledJobView,
)
from cronlease.core.decide.supervision import Action
from cronlease.core.names.jobinfo import JobInfo, job_info
from cronlease.core.names.naming import (
    FINALIZER_SLOT_RECORD,
    LABEL_DEAD_LETTER,
    REQUEST_KIND,
    RUN_KIND,
    TRIGGER_MANUAL,
    TRIGGER_SCHEDULE,
)
from cronlease.core.specs.policies import SpecError
from cronlease.core.specs.spec import steps_of
from cronlease.shell import logfields, metrics
from cronlease.shell.events import EventRecorder, EventSeries
from cronlease.shell.keyedloop import Applied, Outcome
from cronlease.shell.kube import (
    JOBS,
    RUNREQUESTS,
    RUNS,
    SCHEDULEDJOBS,
    ApiError,
    KubeApi,
    TransportError,
)
from cronlease.shell.leadership import Leadership
from cronlease.shell.model import Key, Model
from cronlease.shell.workpool import WorkPool
from cronlease.shell.writer import (
    FENCING_MESSAGE,
    Exists,
    NamespaceTerminating,
    NotLeading,
    Refused,
    RetryLater,
    Stale,
    Writer,
    is_fencing_refusal,
)

# Re-exported: what callers of the Applier read of its outcomes and refusals.
__all__ = [
    "FENCING_MESSAGE",
    "Applied",
    "Applier",
    "FollowUp",
    "NamespaceTerminating",
    "NotLeading",
    "Outcome",
    "RetryLater",
    "Stale",
    "is_fencing_refusal",
]

log = logging.getLogger(__name__)

# How long status writes and Events wait for a burst of creations to drain before going anyway.
CREATIONS_FIRST_PATIENCE = 30.0
EVENT_WRITERS = 4
# Deletions a creation waits on (the run it replaces, the other it cancels) go before it, in
# the acting slot. The others (history, expired dead letters) are cleanup: they wait behind the
# burst's creations like status writes, since each costs the API server a Job and its pods'
# deletions right when it is busiest (decision 0014; design note 104).
CLEARING = frozenset({DeletionReason.REPLACE, DeletionReason.CANCEL_OTHER})


@dataclass(frozen=True, slots=True)
class StatusWrite:
    """A status merge patch, conditional on the version it was decided on: all a reconcile keeps
    while it waits for creations to drain (decision 0015; design note 12)."""

    ref: ObjectRef
    version: str
    patch: dict[str, Any]


@dataclass(frozen=True, slots=True)
class FollowUp:
    """What a decision leaves to write once its creations are made: all a reconcile keeps while it
    waits for creations to drain, not its object nor its decision (decision 0015; design notes 12
    and 100)."""

    owner: ObjectRef
    status: StatusWrite | None
    requests: list[RequestStatus]
    releases: list[PlannedRelease]
    labels: list[PlannedLabel]
    cleanups: list[PlannedDeletion]  # finished runs past their limits: no creation waits on them
    wake_at: float | None  # epoch seconds of the next decision, if any
    progress: bool  # Jobs were created: a failed write after them is progress (see Applied)
    acted_at: float  # loop time the creations ended: the creations-first patience runs from it

    @property
    def writes(self) -> bool:
        return self.status is not None or bool(
            self.requests or self.releases or self.labels or self.cleanups
        )


class TemplateRefused(Exception):
    """The API server refused a Job made from the template: retrying cannot help."""


@dataclass(frozen=True, slots=True)
class CheckedTemplate:
    """A ScheduledJob whose template passed its dry run: at which generation, and a digest of the
    Jobs it made then (without the leader's name and token, which every term changes)."""

    uid: str
    generation: int
    digest: bytes

    def of(self, sj: ScheduledJobView, digest: bytes | None = None) -> bool:
        """Whether it holds for `sj`: its generation, or (given) Jobs with this digest."""
        if self.uid != sj.uid:
            return False
        return self.generation == sj.generation if digest is None else self.digest == digest


def merge_patch(target: Any, patch: Any) -> Any:
    """`patch` applied to `target` as a JSON merge patch (RFC 7386) is: null removes a field,
    an object merges into an object, anything else replaces. Written here (ten lines) rather
    than taken from a package: the status writes are merge patches the API server applies, and
    only a carried one's result is needed before it is sent. The fake API server of the unit
    tests merges with a copy of its own on purpose: it models the server apart from the
    operator, so a mistake here cannot pass on both sides of a test."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _digest(jobs: list[dict[str, Any]]) -> bytes:
    return hashlib.blake2b(orjson.dumps(jobs, option=orjson.OPT_SORT_KEYS), digest_size=16).digest()


# What ends an apply early, each read by ended().
ENDINGS = (NotLeading, Stale, NamespaceTerminating, RetryLater, ApiError, TransportError)


def ended(error: Exception, progress: bool) -> Applied:
    """How an apply that raised one of ENDINGS ended; `progress`: Jobs were created first."""
    if isinstance(error, NotLeading):
        return Applied(Outcome.NOT_LEADING)
    if isinstance(error, Stale):
        return Applied(Outcome.STALE)
    if isinstance(error, NamespaceTerminating):
        return Applied(Outcome.DONE)
    progress = progress or (isinstance(error, RetryLater) and error.progress)
    return Applied(Outcome.RETRY, error=str(error), progress=progress)


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

    async def wait_turn(self, since: float | None = None) -> None:
        """Until no creation is pending, or `patience` seconds after `since` (loop time; now if
        None): a write queued behind others has been waiting since it was queued."""
        start = asyncio.get_running_loop().time() if since is None else since
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout_at(start + self.patience):
                await self._idle.wait()


class Applier:
    def __init__(
        self,
        api: KubeApi,
        leadership: Leadership,
        model: Model,
        max_concurrency: int = 64,
        patience: float = CREATIONS_FIRST_PATIENCE,
        runs: Model | None = None,
    ) -> None:
        self.api, self.model = api, model
        self.writer = Writer(api, leadership)
        # The Runs of multi-step ScheduledJobs, as their decisions see them (kind Run).
        self.runs = runs or Model(lambda key: None, read=run_info)
        # Creations set the lag, so at a burst they go first: status writes and Events wait for
        # them to drain, then get fewer connections (Events fewest: they are informational).
        self.creations = CreationsFirst(patience)
        # At most this many ScheduledJobs decide and create at once. The rest of a burst waits
        # before deciding, so decisions interleave with the responses instead of all running
        # before the first response is read.
        self.acting_slots, self.writing_slots = max_concurrency, max(1, max_concurrency // 4)
        self._status_pool = asyncio.Semaphore(self.writing_slots)
        self.events = EventRecorder(api, lambda: self.leadership.identity)  # one Event per reason
        # One Event write per worker, a few workers: Events are informational.
        self._event_writers = WorkPool(EVENT_WRITERS, self._post_event)
        # ScheduledJob -> its template's last dry run that passed: the uid, the generation and a
        # digest of the Jobs it made (CheckedTemplate); forget() drops it.
        self._checked: dict[Key, CheckedTemplate] = {}
        # Job bodies the scheduler built before their slot, for the runs it expects then.
        self.prepared = PreparedJobs()

    @property
    def leadership(self) -> Leadership:
        """The writer's: one replica's Lease for every write it makes."""
        return self.writer.leadership

    @leadership.setter
    def leadership(self, leadership: Leadership) -> None:
        self.writer.leadership = leadership

    async def check(self, sj: ScheduledJobView, obj: dict[str, Any]) -> Applied | None:
        """Before deciding: the template, dry-run created once per body it makes. None when the
        decision may go on; else how it ended (a refusal is recorded here: its status write
        wakes the decision that reports InvalidSpec)."""
        try:
            with self.creations.creating():
                await self._check_template(sj)
        except TemplateRefused as error:
            return await self._refusal_recorded(sj, obj, str(error), progress=False)
        except ENDINGS as error:
            return ended(error, progress=False)
        return None

    async def act(
        self, sj: ScheduledJobView, obj: dict[str, Any], decision: Decision
    ) -> Applied | FollowUp:
        """The first half of applying `decision`, made on `obj`: its deletions that clear the way
        and its creations. What is left to write (for follow_up()), or how it ended if nothing
        is. The caller decides; at a burst it holds one of the keyed loop's workers, which bound
        how many act at once (as many as `acting_slots`)."""
        created: list[PlannedRelease] = []
        try:
            after = await self._act(sj, obj, decision, created)
        except TemplateRefused as error:
            # The dry run passed and the create did not (an admission policy that lets dry runs
            # by, a webhook changed since): the same verdict, recorded the same way. A run this
            # decision created before it (same template: rare) stays held, as under any invalid
            # spec, until a fixed spec's next slot records it or the ScheduledJob goes.
            return await self._refusal_recorded(sj, obj, str(error), progress=bool(created))
        except ENDINGS as error:
            # Jobs created before the failure: the next decision records them. Progress, not a
            # failing object.
            return ended(error, progress=bool(created))
        return after if after.writes else Applied(Outcome.DONE, after.wake_at)

    # A follow-up carried into the next decision (Scheduler.act_on)

    def carries(self, carried: FollowUp, obj: dict[str, Any]) -> bool:
        """Whether `carried` still applies to `obj`: the same object, and its status write
        decided on this version (none changed it since), if it has one."""
        metadata = obj["metadata"]
        if carried.owner.uid != metadata.get("uid"):
            return False
        return carried.status is None or carried.status.version == metadata.get("resourceVersion")

    def as_written(self, carried: FollowUp, obj: dict[str, Any]) -> dict[str, Any]:
        """`obj` as the API server would hold it once `carried`'s status write is made."""
        if carried.status is None:
            return obj
        return {**obj, "status": merge_patch(obj.get("status") or {}, carried.status.patch)}

    def joined(self, carried: FollowUp, acted: Applied | FollowUp) -> Applied | FollowUp:
        """The follow-up of a decision made on `as_written(carried, ...)`: its status write is
        from the status as persisted (so it includes what `carried`'s would have written), then
        `carried`'s releases, labels and cleanups with its own, once each. A decision that
        wrote what it had to already (a refused create recorded) or wants nothing written
        leaves `carried` as it is, its own status write first: its releases never go out
        without the write that records their runs (refused if that decision wrote since). One
        that failed has nothing to join (Scheduler._act writes `carried` then)."""
        if isinstance(acted, Applied):
            if acted.outcome is not Outcome.DONE:
                return acted
            return replace(carried, wake_at=acted.wake_at)
        return FollowUp(
            owner=acted.owner,
            status=acted.status,
            requests=acted.requests,
            releases=list(dict.fromkeys([*carried.releases, *acted.releases])),
            labels=list(dict.fromkeys([*carried.labels, *acted.labels])),
            cleanups=list(dict.fromkeys([*carried.cleanups, *acted.cleanups])),
            wake_at=acted.wake_at,
            progress=carried.progress or acted.progress,
            acted_at=acted.acted_at,  # it waits for this burst's creations, as the new writes do
        )

    async def follow_up(self, after: FollowUp, *, behind_creations: bool = True) -> Applied:
        """The second half of apply(): once the creations have drained (or for the patience at
        most, from `after.acted_at`), the status, then what it records. Without
        `behind_creations`, at once: a carried follow-up written by the worker that carried it
        has had its wait, and that worker, counted as a creation, must not wait on itself."""
        try:
            if behind_creations and (after.status is not None or after.requests or after.cleanups):
                await self.creations.wait_turn(since=after.acted_at)
            if after.status is not None:
                await self._write_status(after.status)
            for request in after.requests:  # after the ScheduledJob's: its cursor first
                await self._write_request_status(request)
            for release in after.releases:
                await self._release(after.owner.namespace, release)
            for planned in after.labels:
                await self._label(after.owner.namespace, planned)
            for deletion in after.cleanups:
                await self._delete(after.owner, deletion)
        except ENDINGS as error:
            return ended(error, progress=after.progress)
        return Applied(Outcome.DONE, after.wake_at)

    async def _act(
        self,
        sj: ScheduledJobView,
        obj: dict[str, Any],
        decision: Decision,
        created: list[PlannedRelease],
    ) -> FollowUp:
        """Delete and create; what is left to write after the creations."""
        runs: list[tuple[PlannedRun, PlannedRelease]] = []
        cleanups: list[PlannedDeletion] = []  # the follow-up's, behind the creations
        with self.creations.creating():
            try:
                for deletion in decision.deletions:
                    if deletion.reason in CLEARING:
                        await self._delete(sj.ref, deletion)
                    else:
                        cleanups.append(deletion)
                for run in decision.runs:
                    with logfields.bound(run=run.run or run.job_name, slot=run.slot):
                        release = await self._create(sj, run)
                    created.append(release)
                    runs.append((run, release))
            except NamespaceTerminating:
                log.info("%s/%s: its namespace is being deleted; not acting", sj.namespace, sj.name)
                raise
        # Recorded by this decision's status write: the runs it created and the existing Jobs it
        # records (unless their runs may still need them: a later decision releases those). A
        # request's run stays held until its request has recorded its result, which a later
        # decision does (core.decide.releases), whatever the ScheduledJob's retry policy.
        recorded = [
            (run, PlannedRelease(job.name, job.uid, job.kind))
            for run, job in decision.recorded
            if job.held
        ]
        settled = [
            release
            for run, release in [*runs, *recorded]
            if not decision.keep_runs_held and run.request is None
        ]
        return FollowUp(
            owner=sj.ref,
            status=self._record(sj, obj, decision),
            requests=decision.requests,
            releases=[*decision.releases, *settled],
            labels=decision.labels,
            cleanups=cleanups,
            wake_at=decision.wake_at.timestamp() if decision.wake_at else None,
            progress=bool(created),
            acted_at=asyncio.get_running_loop().time(),
        )

    # The template

    async def _check_template(self, sj: ScheduledJobView) -> None:
        """A dry-run create of the Jobs the template makes, once per replica for each body they
        have: a typo is then reported at once as InvalidSpec, not at the first slot, which may be
        hours away. A new generation whose Jobs are what passed before (a suspend, a new
        schedule) is not sent again: at 5,000 ScheduledJobs one such edit each was 5,000 dry
        runs, ahead of everything else the leader had to write (design note 123)."""
        refused = sj.status.get("templateError") or {}
        checked = self._checked.get((sj.namespace, sj.name))
        if (checked is not None and checked.of(sj)) or refused.get("generation") == sj.generation:
            return
        # At the ScheduledJob's creation, not now: the same template then makes the same bytes.
        run = PlannedRun(f"{sj.name}-check", sj.created_at, TRIGGER_SCHEDULE)
        self.check_leading()
        digest = _digest(self._template_jobs(sj, run, "", 0))
        # Interned, as the model's and the Events' copies are: one string each, not three.
        key = (sys.intern(sj.namespace), sys.intern(sj.name))
        passed = CheckedTemplate(sys.intern(sj.uid), sj.generation, digest)
        if checked is not None and checked.of(sj, digest):
            self._checked[key] = passed
            return
        try:
            for job in self._template_jobs(
                sj, run, self.leadership.identity, self.leadership.token
            ):
                await self.api.create_job(job, dry_run=True)
        except ApiError as error:
            if error.status in (400, 422):
                raise TemplateRefused(error.message) from error
            return  # no verdict (429, 5xx, the fence's cache): checked again next time
        self._checked[key] = passed

    def forget(self, key: Key) -> None:
        """The ScheduledJob is gone: a churn of short-lived ones must not pile up here."""
        self._checked.pop(key, None)

    @property
    def checked_templates(self) -> int:
        """How many ScheduledJobs' templates are known to pass their dry run (tests)."""
        return len(self._checked)

    def _template_jobs(
        self, sj: ScheduledJobView, run: PlannedRun, leader: str, token: int
    ) -> list[dict[str, Any]]:
        """The Jobs a run would create: one, or each step's and each compensation's."""
        try:
            steps = steps_of(sj.spec)
        except SpecError:
            return []  # decide() reports it
        if steps is None:
            return [build_job(sj, run, leader, token)]
        owner = build_run(sj, run, steps, leader, token)
        owner["metadata"]["uid"] = sj.uid  # a dry run: any owner will do
        return [
            build_step_job(owner, step, action, 1, leader, token)
            for step in steps.steps
            for action in (Action.RUN, *((Action.COMPENSATE,) if step.compensate else ()))
        ]

    async def _refusal_recorded(
        self, sj: ScheduledJobView, obj: dict[str, Any], message: str, progress: bool
    ) -> Applied:
        """A template the API server refused, recorded: its status write wakes the decision that
        reports InvalidSpec. `progress`: Jobs were created before the refusal."""
        try:
            await self._record_refused_template(sj, obj, message)
        except ENDINGS as error:
            return ended(error, progress)
        return Applied(Outcome.DONE)

    async def _record_refused_template(
        self, sj: ScheduledJobView, obj: dict[str, Any], message: str
    ) -> None:
        """Recorded for this generation; the next decision reports InvalidSpec and stops. Not
        held back for creations: this one is among them, and a refusal is one write."""
        refused = {"generation": sj.generation, "message": message}
        current = obj.get("status") or {}
        version = obj["metadata"]["resourceVersion"]
        write = self.status_write(sj.ref, version, current, {**current, "templateError": refused})
        if write is not None:
            await self._write_status(write)

    # Writes

    def check_leading(self) -> None:
        self.writer.check_leading()

    def _store(self, kind: str) -> tuple[tuple[str, str], Model]:
        """Where a run of `kind` lives: a Job's in the Jobs' model, a Run's in the Runs'."""
        return (RUNS, self.runs) if kind == RUN_KIND else (JOBS, self.model)

    async def _delete(self, owner: ObjectRef, deletion: PlannedDeletion) -> None:
        # CancelOther waits until the run is gone, pods included (cronlease.core.decide.overlap); a
        # Run goes in the background: its supervisor cancels its steps (and compensates) first.
        foreground = deletion.reason is DeletionReason.CANCEL_OTHER and deletion.kind != RUN_KIND
        resource, model = self._store(deletion.kind)
        deleted = await self.writer.delete(
            resource, owner.namespace, deletion.job_name, deletion.uid, foreground
        )
        model.deleted(owner.namespace, deletion.job_name, deletion.uid)  # gone or going
        if deleted:
            self.event(
                owner,
                "Normal",
                "SuccessfulDelete",
                f"deleted {deletion.kind} {deletion.job_name} ({deletion.reason})",
            )

    async def _create(self, sj: ScheduledJobView, run: PlannedRun) -> PlannedRelease:
        """Create the run's Job, or its Run if the ScheduledJob has steps; what releases it: its
        name, kind and uid (of the one an earlier attempt created, if adopted)."""
        steps = steps_of(sj.spec)  # valid: decide() planned this run
        leader, token = self.leadership.identity, self.leadership.token
        body: bytes | None = None
        if steps is None:
            kind, model, resource = "Job", self.model, JOBS
            body = self.prepared.take(sj, run, leader, token)
            if body is None:
                job = build_job(sj, run, leader, token)
            else:  # built for exactly this run (core.bodies.preparation): it only names the Job
                job = {"kind": "Job", "metadata": {"name": run.job_name, "namespace": sj.namespace}}
        else:
            kind, model, resource = RUN_KIND, self.runs, RUNS
            job = build_run(sj, run, steps, leader, token)
        try:
            with model.reading():  # its Job's deletion seen before the response stays buried
                created = await self.writer.create(resource, job, body)
                model.upsert_job(created)  # Forbid must see it before its watch event arrives
        except Exists:
            uid = await self._adopt_existing(sj, run, kind)
            return PlannedRelease(run.job_name, uid, kind)
        except Refused as error:
            if error.invalid:
                raise TemplateRefused(str(error)) from error
            self.event(sj.ref, "Warning", "FailedCreate", f"{kind} {run.job_name}: {error}")
            raise RetryLater(f"creating {kind} {run.job_name}: {error}") from error
        except RetryLater as error:
            self.event(sj.ref, "Warning", "FailedCreate", f"{kind} {run.job_name}: {error}")
            raise
        lag = time.time() - (run.start or run.slot).timestamp()
        metrics.jobs_created.labels(run.trigger).inc()
        if run.attempt > 1:  # late by design: the delay after a failed attempt
            metrics.run_attempts.labels(run.trigger).inc()
        elif run.trigger == TRIGGER_SCHEDULE:
            metrics.schedule_lag.observe(max(lag, 0.0))
        self.event(sj.ref, "Normal", "SuccessfulCreate", f"created {kind} {run.job_name}")
        return PlannedRelease(run.job_name, str(created["metadata"]["uid"]), kind)

    async def _adopt_existing(self, sj: ScheduledJobView, run: PlannedRun, kind: str) -> str:
        """AlreadyExists: a Job the leader wrote for this run (an earlier attempt's) is adopted:
        its uid. Anyone else's is not, whatever owner reference it carries."""
        _, model = self._store(kind)
        with model.reading():
            if kind == RUN_KIND:
                existing = await self.api.get_run(sj.namespace, run.job_name)
                info = run_info(existing)
            else:
                existing = await self.api.get_job(sj.namespace, run.job_name)
                info = job_info(existing)
            model.upsert_job(existing)
        # A manual run's slot is its decision's "now": the retry's differs; its token does not.
        same_run = (
            info.run_now_token == run.run_now_token
            if run.trigger == TRIGGER_MANUAL
            else info.slot == run.slot
        ) and (info.run_name, info.attempt) == (run.run_name, run.attempt)
        if info.trusted and info.owner_uid == sj.uid and info.trigger == run.trigger and same_run:
            return info.uid
        # Someone else's Job holds the name: decided again at once, the slot is a NameConflict.
        model.name_taken(sj.namespace, sj.uid, info)
        raise Stale()

    async def apply_requests(self, decision: Decision) -> Applied:
        """Apply the RunRequest statuses and Events of a decision that has no ScheduledJob: at
        once, not held back for creations (an actor runs it, and its own keys count as pending
        creations: it would wait for itself)."""
        try:
            for event in decision.events:
                if event.about is not None:
                    self.event(event.about, event.type, event.reason, event.message)
            for request in decision.requests:
                await self._write_request_status(request)
        except ENDINGS as error:
            return ended(error, progress=False)
        return Applied(Outcome.DONE)

    # The slot-record finalizer

    async def release(self, namespace: str, jobs: list[JobInfo]) -> Applied:
        """Release the finalizer of Jobs whose ScheduledJob is gone: nothing can run them again,
        and a namespace being deleted must not wait on us."""
        try:
            for job in jobs:
                await self._release(namespace, PlannedRelease(job.name, job.uid, job.kind))
        except NotLeading:
            return Applied(Outcome.NOT_LEADING)
        except RetryLater as error:
            return Applied(Outcome.RETRY, error=str(error))
        return Applied(Outcome.DONE)

    async def _release(self, namespace: str, release: PlannedRelease) -> None:
        resource, model = self._store(release.kind)
        async with self._status_pool:
            await self.writer.release(
                resource, namespace, release.job_name, release.uid, FINALIZER_SLOT_RECORD
            )
        model.released(namespace, release.job_name)

    async def _label(self, namespace: str, planned: PlannedLabel) -> None:
        """A label that marks the end of a run's attempt (after the status write): a dead letter
        (kept outside the history limits), or an attempt retried (never retried again)."""
        resource, model = self._store(planned.kind)
        with model.reading():
            async with self._status_pool:
                labelled = await self.writer.label(
                    resource,
                    namespace,
                    planned.job_name,
                    planned.uid,
                    {planned.label: planned.value},
                )
            if labelled is None:  # gone, or another Job under that name now
                return
            model.upsert_job(labelled)  # the next decision must not label it again
        if planned.label == LABEL_DEAD_LETTER and planned.value == "true":
            metrics.dead_lettered.inc()

    def _record(
        self, sj: ScheduledJobView, obj: dict[str, Any], decision: Decision
    ) -> StatusWrite | None:
        """What the decision did and skipped: metrics and Events now, status after creations."""
        for skip in decision.skips:
            metrics.slots_skipped.labels(skip.reason.value).inc(skip.count)
        for event in decision.events:
            self.event(event.about or sj.ref, event.type, event.reason, event.message)
        version = obj["metadata"]["resourceVersion"]
        return self.status_write(sj.ref, version, obj.get("status") or {}, decision.status)

    def status_write(
        self, ref: ObjectRef, version: str, current: dict[str, Any], status: dict[str, Any]
    ) -> StatusWrite | None:
        """The patch from the object's `current` status to `status`, stamped; None if they are
        equal. Only the fields that change: the write is conditional on `version`, so what it
        leaves out is what the decision read."""
        status = {
            **status,
            "leader": self.leadership.identity,
            "fencingToken": self.leadership.token,
        }
        if status == current:
            return None
        # A merge patch deletes a key only when told to with null.
        patch = {field: None for field in current if field not in status}
        patch.update(
            {field: value for field, value in status.items() if current.get(field) != value}
        )
        return StatusWrite(ref, version, patch)

    async def _write_status(self, write: StatusWrite) -> None:
        ref = write.ref
        resource, get = (
            (RUNREQUESTS, self.api.get_runrequest)
            if ref.kind == REQUEST_KIND
            else (SCHEDULEDJOBS, self.api.get_scheduledjob)
        )
        with self.model.reading():  # the response, or the fresh copy after a 409, is fed to it
            try:
                async with self._status_pool:
                    updated = await self.writer.patch_status(
                        resource, ref.namespace, ref.name, write.patch, write.version
                    )
            except Stale:
                self._upsert(ref, await get(ref.namespace, ref.name))
                raise
            if updated is not None:
                self._upsert(ref, updated)

    async def _write_request_status(self, request: RequestStatus) -> None:
        write = self.status_write(request.ref, request.version, request.previous, request.status)
        if write is not None:
            await self._write_status(write)

    def _upsert(self, ref: ObjectRef, obj: dict[str, Any]) -> None:
        if ref.kind == REQUEST_KIND:
            self.model.upsert_runrequest(obj)
        else:
            self.model.upsert_scheduledjob(obj)

    # Events

    def event(self, ref: ObjectRef, event_type: str, reason: str, message: str) -> None:
        """Events go out in the background: the hot path never waits for them. They are aggregated
        (cronlease.shell.events): one writer per Event at a time, and what occurs while it waits
        goes out in its next write."""
        series = self.events.record(ref, event_type, reason, message)
        if series is not None:
            self._event_writers.put((series, asyncio.get_running_loop().time()))

    async def _post_event(self, queued: tuple[EventSeries, float]) -> None:
        series, since = queued
        await self.creations.wait_turn(since)
        if await self.events.flush(series):  # more occurred meanwhile: written next, in turn
            self._event_writers.put((series, asyncio.get_running_loop().time()))

    async def drain(self) -> None:
        """Wait for the Events still being posted (tests, and a graceful stop)."""
        await self._event_writers.drain()
