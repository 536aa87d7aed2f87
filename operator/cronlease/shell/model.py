"""The live model every replica keeps: ScheduledJobs and the Jobs they own, fed by watches.

Decisions read this model, never the API server, so Forbid sees a Job the moment its watch event
(or our own create response) arrives rather than whenever status catches up. Updates carry
resourceVersions: an older copy never overwrites a newer one, and a tombstone stops a LIST or a
response that was in flight from resurrecting an object whose deletion a watch already delivered;
tombstones last only as long as such a read (`Model.reading`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from cronlease.core.decide.runrequest import scheduled_job_of
from cronlease.core.names.jobinfo import JobInfo, job_info
from cronlease.core.names.naming import LABEL_SCHEDULEDJOB
from cronlease.core.specs.spec import priority_of
from cronlease.shell.packing import compress, decompress

Key = tuple[str, str]  # (namespace, name)


def key_of(obj: dict[str, Any]) -> Key:
    """Its (namespace, name), the namespace interned: the model keeps a key per object, and one
    namespace's objects share its string (decision 0015; design note 105)."""
    metadata = obj["metadata"]
    return sys.intern(metadata.get("namespace", "")), metadata["name"]


def version_of(obj: dict[str, Any]) -> str:
    return str(obj["metadata"].get("resourceVersion", ""))


def is_newer(new: str, old: str | None) -> bool:
    """resourceVersions are opaque, but etcd's are integers; compare them when they are. The same
    version is no news: our own writes reach the model first, their watch events after."""
    if old is None:
        return True
    if new.isdigit() and old.isdigit():
        return int(new) > int(old)
    return True


# Bookkeeping a decision never reads, and the bulk of a stored object: kept out of the model.
UNREAD_ANNOTATIONS = ("kubectl.kubernetes.io/last-applied-configuration",)


def _slim(obj: dict[str, Any]) -> dict[str, Any]:
    """The object without managedFields and kubectl's copy of itself."""
    metadata = {key: value for key, value in obj["metadata"].items() if key != "managedFields"}
    annotations = metadata.get("annotations")
    if annotations and any(name in annotations for name in UNREAD_ANNOTATIONS):
        metadata["annotations"] = {
            name: value for name, value in annotations.items() if name not in UNREAD_ANNOTATIONS
        }
    return {**obj, "metadata": metadata}


@dataclass(frozen=True, slots=True)
class StoredObject:
    """A ScheduledJob (or a RunRequest, or a Run) as compressed JSON, decoded when a decision
    reads it.

    Kept as parsed JSON, each one was about a hundred small dicts and strings, allocated in the
    middle of the garbage of the response it came from; those pinned the allocator's arenas
    after a LIST or a burst of status writes (decision 0015; design note 12). One bytes object
    each is far smaller and pins nothing; compressed (zlib at its fastest level), half of that
    again (item 103), and with a preset dictionary of what ScheduledJobs have in common, a fifth
    (cronlease.shell.packing, item 118).
    """

    version: str
    packed: bytes
    deleting: bool = False  # it has a deletionTimestamp
    # A ScheduledJob's spec.priority, read when a burst is ordered: decoding every due object for it
    # took a twentieth of the operator's CPU at a burst of 1,000 (decision 0015; design note 105).
    priority: int = 0

    def unpack(self) -> dict[str, Any]:
        obj: dict[str, Any] = orjson.loads(decompress(self.packed))
        return obj


def pack(obj: dict[str, Any]) -> StoredObject:
    deleting = bool(obj["metadata"].get("deletionTimestamp"))
    # Not orjson's output itself: it is its whole output buffer, several times the document's
    # size (about 4 KiB for a 2 KiB ScheduledJob), and the model keeps one per object.
    packed = compress(orjson.dumps(_slim(obj)))
    spec = obj.get("spec")
    priority = priority_of(spec) if isinstance(spec, dict) else 0
    return StoredObject(version_of(obj), packed, deleting, priority)


def _gone_at(key: Key, version: str) -> dict[str, Any]:
    """What a DELETED event at `version` would say of `key`, as far as a tombstone reads it."""
    return {"metadata": {"namespace": key[0], "name": key[1], "resourceVersion": version}}


# A ScheduledJob as the owner of Jobs: (namespace, uid). A uid alone would let a Job in one
# namespace claim an owner in another (owner references name no namespace).
OwnerKey = tuple[str, str]


class Versioned(Protocol):
    @property
    def version(self) -> str: ...


def _unlisted(
    stored: Mapping[Key, Versioned], namespace: str, listed: set[Key], version: str
) -> list[Key]:
    """What a full listing of `namespace` ("" for all) at `version` lacked, of what the model
    holds no newer than the listing: deleted while no watch was open."""
    return [
        key
        for key, copy in stored.items()
        if (not namespace or key[0] == namespace)
        and key not in listed
        and not is_newer(copy.version, version)
    ]


def _missed_deletions(
    stored: Mapping[Key, StoredObject], namespace: str, listed: set[Key], version: str
) -> list[dict[str, Any]]:
    """The objects a full listing at `version` lacked, each as its DELETED event would carry it:
    gone at the listing's version, so that a read in flight that returns a copy no newer (our
    own write's response) cannot bring it back."""
    gone = []
    for key in _unlisted(stored, namespace, listed, version):
        obj = stored[key].unpack()
        obj["metadata"]["resourceVersion"] = version
        gone.append(obj)
    return gone


@dataclass(frozen=True, slots=True)
class StoredJob:
    """All the model keeps of a Job: what decisions read, and what orders copies of it."""

    version: str
    info: JobInfo
    owner: Key | None  # from the owner label, to wake the ScheduledJob when the Job changes

    @property
    def owner_key(self) -> OwnerKey | None:
        return (self.info.namespace, self.info.owner_uid) if self.info.owner_uid else None


def _stored_job(obj: dict[str, Any], read: Callable[[dict[str, Any]], JobInfo]) -> StoredJob:
    info = read(obj)
    labels = obj["metadata"].get("labels")
    owner_name = labels.get(LABEL_SCHEDULEDJOB) if isinstance(labels, dict) else None
    owner = (info.namespace, owner_name) if isinstance(owner_name, str) and owner_name else None
    return StoredJob(version_of(obj), info, owner)


class Model:
    def __init__(
        self,
        on_change: Callable[[Key], None],
        on_job_finished: Callable[[dict[str, Any]], None] | None = None,
        on_job_change: Callable[[Key], None] | None = None,
        read: Callable[[dict[str, Any]], JobInfo] = job_info,
    ) -> None:
        """`on_change(key)` when a ScheduledJob changes; `on_job_change(owner key)` when one of
        its Jobs does (default: on_change); `on_job_finished(job)` when a Job finishes. `read`
        makes a JobInfo of a stored object: a second model keeps the Runs of multi-step slots
        (cronlease.core.bodies.runobject.run_info), in a name space of their own."""
        self._read = read
        self._on_change = on_change
        self._on_job_change = on_job_change or on_change
        self._on_job_finished = on_job_finished
        self._scheduledjobs: dict[Key, StoredObject] = {}
        self._requests: dict[Key, StoredObject] = {}
        self._request_owner: dict[Key, Key] = {}  # RunRequest -> the ScheduledJob it names
        self._requests_by_scheduledjob: dict[Key, set[Key]] = {}
        self._jobs: dict[Key, StoredJob] = {}
        self._jobs_by_owner: dict[OwnerKey, dict[str, JobInfo]] = {}
        self._owners: dict[OwnerKey, Key] = {}  # the ScheduledJobs in the model, by uid
        self._taken: dict[OwnerKey, set[str]] = {}  # see name_taken(): dropped with the owner
        # Jobs still holding the slot-record finalizer, by the ScheduledJob their label names:
        # few (a finalizer is held for milliseconds), and the only way to find one whose owner
        # reference was removed or whose ScheduledJob is gone, so that it never blocks deletion.
        self._held: dict[Key, dict[str, JobInfo]] = {}
        # Held Jobs whose labels stopped matching the Job watch (a user relabelled one): no event
        # will tell of them again, so they stay listed above, for release, until released.
        self._out_of_sight: dict[Key, Key] = {}  # Job -> the ScheduledJob that lists it
        # Deletions seen while a read was in flight, in burial order: (collection, key) -> (the
        # deletion's resourceVersion, its burial number). See reading().
        self._tombstones: OrderedDict[tuple[str, Key], tuple[int, int]] = OrderedDict()
        self._burials = 0  # tombstones made so far: the next one's number
        self._reads: dict[int, int] = {}  # reads in flight, counted by `_burials` when each began

    def keys(self) -> Iterator[Key]:
        """Every ScheduledJob a decision may be owed to: each in the model, and each gone one
        that left Jobs holding the slot-record finalizer or RunRequests to answer (what a new
        leader reconciles at once)."""
        yield from list(self._scheduledjobs)
        yield from list(self._held)
        yield from list(self._requests_by_scheduledjob)

    # ScheduledJobs

    def scheduledjob(self, key: Key) -> dict[str, Any] | None:
        """A fresh copy of the stored object: the caller may keep or change it freely."""
        stored = self._scheduledjobs.get(key)
        return stored.unpack() if stored else None

    def scheduledjob_priority(self, key: Key) -> int:
        """Its spec.priority (0 if gone or invalid), read without decoding it."""
        stored = self._scheduledjobs.get(key)
        return stored.priority if stored else 0

    def scheduledjob_live(self, key: Key) -> bool:
        """In the model and not being deleted, read without decoding it."""
        stored = self._scheduledjobs.get(key)
        return stored is not None and not stored.deleting

    @property
    def scheduledjob_count(self) -> int:
        return len(self._scheduledjobs)

    @property
    def dead_letter_count(self) -> int:
        """Jobs labelled as dead letters (a gauge reads this at each scrape, from the metrics
        server's thread: the copy is made in one step, so the loop cannot change the dict
        during the count)."""
        return sum(1 for stored in list(self._jobs.values()) if stored.info.dead_letter)

    def upsert_scheduledjob(self, obj: dict[str, Any]) -> None:
        namespace, name = key_of(obj)
        key = (namespace, sys.intern(name))  # shared with the applier's and the Events' keys
        current = self._scheduledjobs.get(key)
        if self._buried("sj", obj) or not is_newer(
            version_of(obj), current.version if current else None
        ):
            return
        self._scheduledjobs[key] = pack(obj)
        uid = obj["metadata"].get("uid")
        if isinstance(uid, str):
            if current is not None and (key[0], uid) not in self._owners:
                # Deleted and created again under its name while no watch was open: the old
                # one's entries go as its DELETED event would have taken them.
                old_uid = current.unpack()["metadata"].get("uid")
                if isinstance(old_uid, str) and old_uid != uid:
                    self._drop_owner(key[0], old_uid)
            self._owners[(key[0], sys.intern(uid))] = key  # the string its Jobs' records share
        self._on_change(key)

    def delete_scheduledjob(self, obj: dict[str, Any]) -> None:
        key = key_of(obj)
        self._bury("sj", obj)
        self._scheduledjobs.pop(key, None)
        self._on_change(key)  # its held Jobs are released, its requests told
        self._drop_owner(key[0], obj["metadata"].get("uid", ""))

    def _drop_owner(self, namespace: str, uid: str) -> None:
        self._owners.pop((namespace, uid), None)
        for name in self._taken.pop((namespace, uid), ()):  # names it found held by others
            owned = self._jobs_by_owner.get((namespace, uid))
            if owned is not None:
                owned.pop(name, None)
                if not owned:
                    del self._jobs_by_owner[(namespace, uid)]

    def forget_unlisted_scheduledjobs(self, namespace: str, listed: set[Key], version: str) -> None:
        """As forget_unlisted_jobs: a ScheduledJob a full listing lacked, and no newer in the
        model than the listing, was deleted while no watch was open; it goes as a DELETED event
        at the listing's version would take it (its held Jobs released, its requests told)."""
        for obj in _missed_deletions(self._scheduledjobs, namespace, listed, version):
            self.delete_scheduledjob(obj)

    # RunRequests: few, and each read only by its ScheduledJob's decisions

    def upsert_runrequest(self, obj: dict[str, Any]) -> None:
        key = key_of(obj)
        current = self._requests.get(key)
        if self._buried("request", obj) or not is_newer(
            version_of(obj), current.version if current else None
        ):
            return
        self._requests[key] = pack(obj)
        self._index_request(key, scheduled_job_of(obj))
        self._notify_request(key)

    def delete_runrequest(self, obj: dict[str, Any]) -> None:
        key = key_of(obj)
        self._bury("request", obj)
        self._requests.pop(key, None)
        self._notify_request(key)  # its ScheduledJob releases the request's Jobs
        self._index_request(key, None)

    def forget_unlisted_runrequests(self, namespace: str, listed: set[Key], version: str) -> None:
        """As forget_unlisted_jobs: a RunRequest deleted while no watch was open goes as its
        DELETED event would take it (its ScheduledJob releases the request's Jobs)."""
        for obj in _missed_deletions(self._requests, namespace, listed, version):
            self.delete_runrequest(obj)

    def runrequests_for(self, namespace: str, name: str) -> list[dict[str, Any]]:
        """The RunRequests that name the ScheduledJob (namespace, name), as fresh copies."""
        keys = self._requests_by_scheduledjob.get((namespace, name), set())
        return [self._requests[key].unpack() for key in sorted(keys) if key in self._requests]

    def _index_request(self, key: Key, scheduled_job: str | None) -> None:
        """Index the request under the ScheduledJob it names (a request's spec is immutable,
        but a hostile one may change: the old entry goes)."""
        previous = self._request_owner.pop(key, None)
        if previous is not None:
            keys = self._requests_by_scheduledjob.get(previous)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._requests_by_scheduledjob[previous]
        if scheduled_job is not None:
            owner = (key[0], scheduled_job)
            self._request_owner[key] = owner
            self._requests_by_scheduledjob.setdefault(owner, set()).add(key)

    def _notify_request(self, key: Key) -> None:
        owner = self._request_owner.get(key)
        if owner is not None:
            self._on_change(owner)

    # Jobs

    def upsert_job(self, obj: dict[str, Any]) -> None:
        key = key_of(obj)
        current = self._jobs.get(key)
        if self._buried("job", obj) or not is_newer(
            version_of(obj), current.version if current else None
        ):
            return
        if key in self._out_of_sight:  # back in sight (its label restored): listed anew below
            self.released(*key)
        stored = _stored_job(obj, self._read)
        known = self._owners.get(stored.owner_key) if stored.owner_key else None
        if known is not None and known == stored.owner:
            # The ScheduledJob's own key, not a copy per Job (decision 0014; design note 103).
            stored = dataclasses.replace(stored, owner=known)
        self._jobs[key] = stored
        info = stored.info
        previous = None
        if current is not None and current.owner != stored.owner:
            self._unhold(current)  # relabelled: no longer listed for its former label
        if current is not None and current.owner_key != stored.owner_key:
            # Its owner reference was removed or changed (a user keeping a Job for debugging):
            # it leaves its former owner, which must not count it as active any more.
            self._forget_job(current)
        owner_key = stored.owner_key
        if owner_key:
            owned = self._jobs_by_owner.setdefault(owner_key, {})
            previous = owned.get(info.name)
            owned[info.name] = info
        if stored.owner:
            if info.held:
                self._held.setdefault(stored.owner, {})[info.name] = info
            else:
                self._unhold(stored)
        if info.decides_as(previous):
            return  # pod counts, ready, the start of a run: nothing a decision reads
        if self._on_job_finished and info.finished and previous and not previous.finished:
            self._on_job_finished(obj)
        self._notify_owner(stored)

    def delete_job(self, obj: dict[str, Any]) -> None:
        key = key_of(obj)
        self._bury("job", obj)
        stored = self._jobs.pop(key) if key in self._jobs else _stored_job(obj, self._read)
        self._forget_job(stored)
        info = self._read(obj)
        if info.held and stored.owner:
            # A Job that holds our finalizer cannot be gone: it left the watch's label selector.
            # Untrusted from now on, it is still released by the ScheduledJob it was labelled for.
            self._held.setdefault(stored.owner, {})[info.name] = dataclasses.replace(
                info, trusted=False
            )
            self._out_of_sight[key] = stored.owner

    def released(self, namespace: str, name: str) -> None:
        """The leader removed the Job's finalizer: so the model says at once, before the watch
        event (a decision in between would release it again); one out of sight is forgotten."""
        key = (namespace, name)
        owner = self._out_of_sight.pop(key, None)
        stored = self._jobs.get(key)
        if stored is not None and stored.info.held:
            self._amend(key, stored, dataclasses.replace(stored.info, held=False))
            owner = owner or stored.owner
        entries = self._held.get(owner) if owner else None
        if owner and entries is not None:
            entries.pop(name, None)
            if not entries:
                del self._held[owner]

    def deleted(self, namespace: str, name: str, uid: str) -> None:
        """The leader deleted the Job with `uid` (or found it gone): so the model says at once,
        before the watch event, or a decision in between deletes it again. Its watch event
        removes it (or, while our finalizer holds it, its copy with deletionTimestamp)."""
        key = (namespace, name)
        stored = self._jobs.get(key)
        if stored is not None and stored.info.uid == uid and not stored.info.deleting:
            self._amend(key, stored, dataclasses.replace(stored.info, deleting=True))

    def _amend(self, key: Key, stored: StoredJob, info: JobInfo) -> None:
        """The Job's record with `info` for what our own write changed, in every index."""
        self._jobs[key] = dataclasses.replace(stored, info=info)
        owned = self._jobs_by_owner.get(stored.owner_key) if stored.owner_key else None
        if owned is not None and info.name in owned:
            owned[info.name] = info

    def forget_unlisted_jobs(self, namespace: str, listed: set[Key], version: str) -> None:
        """After a full listing of `namespace` ("" for all) at resourceVersion `version`, whose
        items were upserted: what it lacked was deleted while no watch was open, unless the
        model's copy is newer than the listing (our own create response, ahead of it)."""
        for key in _unlisted(self._jobs, namespace, listed, version):
            self._bury("job", _gone_at(key, version))  # as forget_unlisted_scheduledjobs
            self._forget_job(self._jobs.pop(key))

    def jobs_of(self, namespace: str, owner_uid: str) -> list[JobInfo]:
        """The Jobs in `namespace` whose controller is the ScheduledJob `owner_uid`, trusted or
        not (decide() tells them apart)."""
        return list(self._jobs_by_owner.get((namespace, owner_uid), {}).values())

    def jobs_for(self, namespace: str, name: str, uid: str) -> list[JobInfo]:
        """What a decision about the ScheduledJob reads: its Jobs, and the Jobs labelled for it
        that still hold the slot-record finalizer but whose owner reference no longer names a
        ScheduledJob (a user removed it), which decide() releases once its status is written.
        A held Job whose owner reference names another ScheduledJob is that one's to release:
        only its status can say whether the slot is recorded."""
        owned = self.jobs_of(namespace, uid)
        names = {job.name for job in owned}
        strays = [job for job in self.held_jobs((namespace, name)) if job.name not in names]
        return [*owned, *(job for job in strays if self.creator(job) in (None, (namespace, name)))]

    def creator(self, job: JobInfo) -> Key | None:
        """The ScheduledJob in the model that the Job's owner reference names, if any."""
        return self._owners.get((job.namespace, job.owner_uid)) if job.owner_uid else None

    def releasable_held_jobs(self, key: Key) -> list[JobInfo]:
        """The held Jobs labelled for `key` that no other ScheduledJob owns: once `key` is gone
        or being deleted, nothing can run their slots again."""
        return [job for job in self.held_jobs(key) if self.creator(job) in (None, key)]

    def name_taken(self, namespace: str, owner_uid: str, info: JobInfo) -> None:
        """A Job the leader did not write holds a name the ScheduledJob `owner_uid` needs (its
        create met AlreadyExists): its decisions see it as untrusted, whatever owns it."""
        # Still `held` if it carries our finalizer (our own Job, orphaned): ours to release.
        taken = dataclasses.replace(info, owner_uid=owner_uid, trusted=False)
        self._jobs_by_owner.setdefault((namespace, owner_uid), {})[info.name] = taken
        self._taken.setdefault((namespace, owner_uid), set()).add(info.name)

    def held_jobs(self, key: Key) -> list[JobInfo]:
        """The Jobs labelled for the ScheduledJob `key` that still hold the slot-record finalizer,
        whoever owns them now."""
        return list(self._held.get(key, {}).values())

    def _unhold(self, stored: StoredJob) -> None:
        if stored.owner:
            entries = self._held.get(stored.owner)
            if entries is not None:
                entries.pop(stored.info.name, None)
                if not entries:
                    del self._held[stored.owner]

    def _forget_job(self, stored: StoredJob) -> None:
        self._unhold(stored)
        owner_key = stored.owner_key
        if owner_key:
            owned = self._jobs_by_owner.get(owner_key)
            if owned is not None:
                owned.pop(stored.info.name, None)
                if not owned:
                    del self._jobs_by_owner[owner_key]
        self._notify_owner(stored)

    def _notify_owner(self, stored: StoredJob) -> None:
        if stored.owner:
            self._on_job_change(stored.owner)

    # Tombstones

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        """Around a read whose answer the model is fed: a LIST with all its pages, a GET, a
        write's response. Enter it before the request goes out; leave it once the answer is in.

        A copy that arrives after the model saw the object's deletion is a late copy only if it
        was read before that deletion. Every read we make is consistent (no resourceVersion: a
        LIST's pages, a GET and a write's response are at least as new as etcd was when the
        request arrived), and a deletion the model saw was already in etcd. So a read that began
        after a deletion was seen cannot hold the deleted object (a copy of it recreated under
        the same name is newer than the deletion, and passes). A tombstone is therefore kept
        only while a read that began before it is in flight: none is made while no read is,
        and when a read ends, those buried before the oldest read still in flight (all of them,
        when none is) are dropped. The watches need none: a list-then-watch delivers one
        object's events in order and lists again only after its watch ended.
        """
        mark = self._burials
        self._reads[mark] = self._reads.get(mark, 0) + 1
        try:
            yield
        finally:
            left = self._reads.pop(mark) - 1
            if left:
                self._reads[mark] = left
            self._expire()

    def sizes(self) -> dict[str, int]:
        """How many entries each structure of the model holds (tests, the soak)."""
        return {
            "scheduledjobs": len(self._scheduledjobs),
            "runrequests": len(self._requests),
            "jobs": len(self._jobs),
            "owners": len(self._jobs_by_owner),
            "owned": sum(len(jobs) for jobs in self._jobs_by_owner.values()),
            "held": sum(len(jobs) for jobs in self._held.values()),
            "out_of_sight": len(self._out_of_sight),
            "scheduledjob_uids": len(self._owners),
            "tombstones": len(self._tombstones),
            "reads": sum(self._reads.values()),
        }

    def _expire(self) -> None:
        """Drop the tombstones no read in flight can need: buried before the oldest began."""
        oldest = min(self._reads, default=self._burials)
        tombstones = self._tombstones
        while tombstones:
            first = next(iter(tombstones))  # the oldest burial; O(1) in an OrderedDict
            if tombstones[first][1] >= oldest:
                return
            del tombstones[first]

    def _bury(self, collection: str, obj: dict[str, Any]) -> None:
        version = obj["metadata"].get("resourceVersion", "")
        if not self._reads or not version.isdigit():
            return  # no read in flight began before this deletion: nothing late can come
        name = (collection, key_of(obj))
        earlier = self._tombstones.pop(name, None)
        death = max(int(version), earlier[0]) if earlier else int(version)
        self._tombstones[name] = (death, self._burials)  # last in burial order
        self._burials += 1

    def _buried(self, collection: str, obj: dict[str, Any]) -> bool:
        """True for a copy no newer than a deletion already seen (a late read)."""
        name = (collection, key_of(obj))
        tombstone = self._tombstones.get(name)
        version = obj["metadata"].get("resourceVersion", "")
        if tombstone is None or not version.isdigit():
            return False
        if int(version) > tombstone[0]:
            del self._tombstones[name]  # recreated under the same name
            return False
        return True
