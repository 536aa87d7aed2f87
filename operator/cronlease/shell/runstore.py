"""What the supervisor reads (issue 17): the Runs, their step Jobs and the heartbeat Leases, kept
current by their watches (cronlease.shell.runwatch) and by the supervisor's own write responses.

Like the ScheduledJobs' model it orders copies by resourceVersion, so an older copy never
replaces a newer one. It needs no tombstones: a step Job holds the slot-record finalizer until
its attempt is settled in its Run's status, so it cannot vanish while the supervisor still reads
it, and a Run's or a Lease's late copy only wakes a supervision that reads the API's answer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

from cronlease.core.bodies.stepjob import step_job_info
from cronlease.core.decide.supervision import Action, Refusals, StepJob
from cronlease.core.names.naming import LABEL_RUN, parse_time
from cronlease.shell.model import Key, StoredObject, is_newer, key_of, pack, version_of


def _run_label(obj: dict[str, Any]) -> str:
    labels = obj["metadata"].get("labels")
    value = labels.get(LABEL_RUN) if isinstance(labels, dict) else None
    return value if isinstance(value, str) else ""


def _owner_uid(obj: dict[str, Any]) -> str:
    refs = obj["metadata"].get("ownerReferences")
    first = refs[0] if isinstance(refs, list) and refs and isinstance(refs[0], dict) else {}
    return str(first.get("uid", ""))


class RunStore:
    def __init__(
        self,
        on_change: Callable[[Key], None],
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        """`on_change(run key)` when a Run, one of its step Jobs or one of its Leases changes.
        `clock` stamps each renewal seen: a heartbeat counts from when the supervisor's side
        saw it (its clock never runs ahead of the API server's), not from the renewTime a
        pod's node wrote, which may run ahead (deferring the timeout for ever) or behind."""
        self._on_change = on_change
        self._clock = clock
        self._runs: dict[Key, StoredObject] = {}
        # Step Jobs by the run their label names, (namespace, run name): found again when the
        # Run is gone, to release them.
        self._jobs: dict[Key, tuple[str, StepJob, Key]] = {}
        self._jobs_by_run: dict[Key, dict[str, StepJob]] = {}
        # Lease -> (version, renewTime as written, when that renewal was seen, owner uid)
        self._leases: dict[Key, tuple[str, datetime | None, datetime, str]] = {}
        # Attempts whose Job name a Job cronlease did not write holds, by run.
        self._taken: dict[Key, set[tuple[str, Action, int]]] = {}
        # The uids of step Jobs the supervisor deleted in the foreground, while in the store.
        self._foreground: set[str] = set()
        # Attempts whose Job the API server refused to create, by run: (message, invalid).
        self._refused: dict[Key, dict[tuple[str, Action, int], tuple[str, bool]]] = {}

    def keys(self) -> Iterator[Key]:
        """Every run a supervision may be owed to: each Run, and each gone one whose step Jobs
        are still in view (to delete or release). What a new leader supervises at once."""
        yield from list(self._runs)
        yield from list(self._jobs_by_run)

    # Runs

    def run(self, key: Key) -> dict[str, Any] | None:
        stored = self._runs.get(key)
        return stored.unpack() if stored else None

    def upsert_run(self, obj: dict[str, Any]) -> None:
        key = key_of(obj)
        current = self._runs.get(key)
        if is_newer(version_of(obj), current.version if current else None):
            self._runs[key] = pack(obj)
            self._on_change(key)

    def delete_run(self, obj: dict[str, Any]) -> None:
        key = key_of(obj)
        self._taken.pop(key, None)
        self._refused.pop(key, None)
        if self._runs.pop(key, None) is not None:
            self._on_change(key)  # its held step Jobs are released

    @property
    def run_count(self) -> int:
        return len(self._runs)

    # Step Jobs

    def jobs_of(self, key: Key) -> list[StepJob]:
        return list(self._jobs_by_run.get(key, {}).values())

    def upsert_step_job(self, obj: dict[str, Any]) -> None:
        key = key_of(obj)
        current = self._jobs.get(key)
        if not is_newer(version_of(obj), current[0] if current else None):
            return
        info = step_job_info(obj)
        if info.deleting and info.uid in self._foreground:
            # Our own deletion, in the foreground: once its finalizer went, the garbage collector
            # found its pods gone. Still deleting (our finalizer may hold it), but not one whose
            # pods run on after it, as a Job deleted in the background (track_stopping).
            info = dataclasses.replace(info, foreground=True)
        run = (key[0], _run_label(obj))
        if current is not None and current[2] != run:
            self._forget_job(key)
        self._jobs[key] = (version_of(obj), info, run)
        previous = self._jobs_by_run.setdefault(run, {}).get(info.name)
        self._jobs_by_run[run][info.name] = info
        if previous != info:
            self._on_change(run)

    def deleted_in_foreground(self, namespace: str, name: str, uid: str) -> None:
        """The supervisor deleted this step Job in the foreground (so said before its watch
        event, and after the collector has removed the foreground finalizer again)."""
        self._foreground.add(uid)
        entry = self._jobs.get((namespace, name))
        if entry is not None and entry[1].uid == uid:
            info = dataclasses.replace(entry[1], deleting=True, foreground=True)
            self._jobs[(namespace, name)] = (entry[0], info, entry[2])
            self._jobs_by_run.setdefault(entry[2], {})[name] = info

    def delete_step_job(self, obj: dict[str, Any]) -> None:
        run = self._forget_job(key_of(obj))
        if run is not None:
            self._on_change(run)

    def _forget_job(self, key: Key) -> Key | None:
        entry = self._jobs.pop(key, None)
        if entry is None:
            return None
        self._foreground.discard(entry[1].uid)
        run = entry[2]
        jobs = self._jobs_by_run.get(run)
        if jobs is not None:
            jobs.pop(entry[1].name, None)
            if not jobs:
                del self._jobs_by_run[run]
        return run

    # Heartbeat Leases

    def heartbeats(self, namespace: str, jobs: list[StepJob]) -> dict[str, datetime | None]:
        """When each step Job's own Lease (named as the Job, owned by it) was last seen renewed;
        a Lease of that name owned by anything else is no heartbeat of it."""
        found: dict[str, datetime | None] = {}
        for job in jobs:
            entry = self._leases.get((namespace, job.name))
            if entry is not None and entry[3] == job.uid:
                found[job.name] = entry[2]
        return found

    def taken(self, key: Key) -> frozenset[tuple[str, Action, int]]:
        return frozenset(self._taken.get(key, ()))

    def name_taken(self, key: Key, attempt: tuple[str, Action, int]) -> None:
        """A Job cronlease did not write holds the name of the run's `attempt`."""
        self._taken.setdefault(key, set()).add(attempt)

    def refused(self, key: Key) -> Refusals:
        return dict(self._refused.get(key, {}))

    def refused_creation(
        self, key: Key, attempt: tuple[str, Action, int], message: str, invalid: bool
    ) -> None:
        """The API server refused to create the Job of the run's `attempt` (kept until the Run
        goes: a few entries, one per refused attempt)."""
        self._refused.setdefault(key, {})[attempt] = (message, invalid)

    def upsert_lease(self, obj: dict[str, Any]) -> None:
        key = key_of(obj)
        current = self._leases.get(key)
        if not is_newer(version_of(obj), current[0] if current else None):
            return
        spec = obj.get("spec")
        renewed = parse_time(spec.get("renewTime")) if isinstance(spec, dict) else None
        seen = current[2] if current is not None and current[1] == renewed else self._clock()
        if current is None and renewed is not None:
            # First seen (this process started, or the Lease was made again): the renewal is no
            # later than it says. Counted from now, every restart of the operator would give a
            # hung step a new full timeout.
            seen = min(seen, renewed)
        self._leases[key] = (version_of(obj), renewed, seen, _owner_uid(obj))
        if current is None or current[1] != renewed:
            self._on_change((key[0], _run_label(obj)))

    def delete_lease(self, obj: dict[str, Any]) -> None:
        key = key_of(obj)
        if self._leases.pop(key, None) is not None:
            self._on_change((key[0], _run_label(obj)))

    # Listings

    def forget_unlisted(self, collection: str, namespace: str, listed: set[Key]) -> None:
        """After a full listing of `collection` in `namespace` ("" for all): what it lacked was
        deleted while no watch was open."""
        stores: dict[str, dict[Key, Any]] = {
            "runs": self._runs,
            "jobs": self._jobs,
            "leases": self._leases,
        }
        store = stores[collection]
        for key in [k for k in store if (not namespace or k[0] == namespace) and k not in listed]:
            if collection == "jobs":
                run = self._forget_job(key)
                if run is not None:
                    self._on_change(run)
            else:
                del store[key]
                self._on_change(key)
