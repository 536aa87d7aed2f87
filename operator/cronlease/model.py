"""The live model every replica keeps: ScheduledJobs and the Jobs they own, fed by watches.

Decisions read this model, never the API server, so Forbid sees a Job the moment its watch event
(or our own create response) arrives rather than whenever status catches up. Updates carry
resourceVersions: an older copy never overwrites a newer one, and a tombstone stops a seeding LIST
from resurrecting an object whose deletion the watch already delivered.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cronlease.jobs import JobInfo, job_info
from cronlease.naming import LABEL_SCHEDULEDJOB

Key = tuple[str, str]  # (namespace, name)


def key_of(obj: dict[str, Any]) -> Key:
    metadata = obj["metadata"]
    return metadata.get("namespace", ""), metadata["name"]


def _newer(candidate: dict[str, Any], current: dict[str, Any] | None) -> bool:
    """resourceVersions are opaque, but etcd's are integers; compare them when they are. The same
    version is no news: our own writes reach the model first, their watch events after."""
    if current is None:
        return True
    new, old = (
        candidate["metadata"].get("resourceVersion", ""),
        current["metadata"].get("resourceVersion", ""),
    )
    if new.isdigit() and old.isdigit():
        return int(new) > int(old)
    return True


class Model:
    def __init__(
        self,
        on_change: Callable[[Key], None],
        on_job_finished: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self._on_change = on_change
        self._on_job_finished = on_job_finished
        self.scheduledjobs: dict[Key, dict[str, Any]] = {}
        self._jobs: dict[Key, dict[str, Any]] = {}
        self._jobs_by_owner: dict[str, dict[str, JobInfo]] = {}
        self._tombstones: dict[tuple[str, Key], int] = {}

    # ScheduledJobs

    def upsert_scheduledjob(self, obj: dict[str, Any]) -> None:
        key = key_of(obj)
        if self._buried("sj", obj) or not _newer(obj, self.scheduledjobs.get(key)):
            return
        self.scheduledjobs[key] = obj
        self._on_change(key)

    def delete_scheduledjob(self, obj: dict[str, Any]) -> None:
        key = key_of(obj)
        self._bury("sj", obj)
        self.scheduledjobs.pop(key, None)

    # Jobs

    def upsert_job(self, obj: dict[str, Any]) -> None:
        key = key_of(obj)
        if self._buried("job", obj) or not _newer(obj, self._jobs.get(key)):
            return
        previous = self._jobs.get(key)
        self._jobs[key] = obj
        info = job_info(obj)
        if info.owner_uid:
            self._jobs_by_owner.setdefault(info.owner_uid, {})[info.name] = info
        if self._on_job_finished and info.finished and previous and not job_info(previous).finished:
            self._on_job_finished(obj)
        self._notify_owner(obj)

    def delete_job(self, obj: dict[str, Any]) -> None:
        key = key_of(obj)
        self._bury("job", obj)
        stored = self._jobs.pop(key, None) or obj
        info = job_info(stored)
        if info.owner_uid:
            self._jobs_by_owner.get(info.owner_uid, {}).pop(info.name, None)
        self._notify_owner(stored)

    def jobs_of(self, owner_uid: str) -> list[JobInfo]:
        return list(self._jobs_by_owner.get(owner_uid, {}).values())

    def _notify_owner(self, job: dict[str, Any]) -> None:
        owner = (job["metadata"].get("labels") or {}).get(LABEL_SCHEDULEDJOB)
        if owner:
            self._on_change((job["metadata"].get("namespace", ""), owner))

    # Tombstones

    def _bury(self, kind: str, obj: dict[str, Any]) -> None:
        version = obj["metadata"].get("resourceVersion", "")
        if version.isdigit():
            self._tombstones[(kind, key_of(obj))] = int(version)

    def _buried(self, kind: str, obj: dict[str, Any]) -> bool:
        """True for a copy no newer than a deletion already seen (a late LIST item)."""
        death = self._tombstones.get((kind, key_of(obj)))
        version = obj["metadata"].get("resourceVersion", "")
        if death is None or not version.isdigit():
            return False
        if int(version) > death:
            del self._tombstones[(kind, key_of(obj))]  # recreated under the same name
            return False
        return True
