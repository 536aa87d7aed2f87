"""The watches that feed the live model: ScheduledJobs, the Jobs they own and RunRequests, and for
multi-step runs (cronlease.shell.runwatch) the Runs, step Jobs and heartbeat Leases; each one
list-then-watch (cronlease.shell.listwatch) per watched namespace (decisions 0002 and 0015; design
notes 8, 102 and 120). Every collection the operator reads is watched here, and only here.

Each event costs a JSON parse and a resourceVersion comparison. kopf's per-event machinery (a
worker task, a memory per object, a parse with the standard library) cost more for each of the
five events of a Job's run, and for each ScheduledJob's status write in a burst of thousands.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from cronlease.core.names.naming import LABEL_SCHEDULEDJOB
from cronlease.shell import metrics
from cronlease.shell.kube import JOBS, RUNREQUESTS, SCHEDULEDJOBS, ApiError, KubeApi, resource_path
from cronlease.shell.listwatch import ListWatch
from cronlease.shell.model import Key, Model, key_of

# cronlease_reconcile_errors_total's operation for a watch that broke (the writes' are Verb's).
WATCH_OPERATION = "watch"


@dataclass(frozen=True, slots=True)
class Feed:
    """How one collection's objects enter the model."""

    upsert: Callable[[dict[str, Any]], None]
    delete: Callable[[dict[str, Any]], None]
    # A full listing of a namespace ("" for all) at a version lacked whatever is not in the
    # set: it was deleted while no watch was open.
    forget_unlisted: Callable[[str, set[Key], str], None]
    # Brackets a listing: a model's tombstones outlive the reads in flight (Model.reading).
    reading: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext


S = TypeVar("S")  # what a watch feeds: the model, or the supervisor's store


class ModelWatch(Generic[S]):
    """One collection, watched in every scope; `listed` is set once every scope has been
    listed into what it feeds: a new leader decides after it. Subclasses name the collection
    and how its objects enter `target`."""

    noun: ClassVar[str]  # for readiness: "the Job watch of ..."
    resource: ClassVar[tuple[str, str]]
    selector: ClassVar[str | None] = None

    @staticmethod
    def feed_of(target: S) -> Feed:
        raise NotImplementedError

    def __init__(
        self,
        api: KubeApi,
        target: S,
        namespaces: tuple[str, ...],
        listed: asyncio.Event,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.feed = self.feed_of(target)
        self.scopes = namespaces or ("",)  # "" is every namespace
        self.listed = listed
        self._query = [("labelSelector", self.selector)] if self.selector else []
        self._unlisted = set(self.scopes)
        self._absent: set[str] = set()  # scopes of an optional resource the server lacks
        self._clock = clock
        self._watches = [self._watch(scope) for scope in self.scopes]

    async def run(self) -> None:
        await asyncio.gather(*(watch.run() for watch in self._watches))

    def stuck(self, after: float) -> str | None:
        """Why the model is not kept current, if a scope's list or watch has failed for `after`
        seconds without a success in between (readiness reports it: decisions go on, on a model
        that no longer sees its objects)."""
        for scope, watch in zip(self.scopes, self._watches, strict=True):
            if scope not in self._absent and watch.failing_for() >= after:
                where = scope or "all namespaces"
                return (
                    f"the {self.noun} watch of {where} has failed for {watch.failing_for():.0f} s"
                )
        return None

    def unsynced(self, after: float) -> str | None:
        """Why the model is not (or no longer) a synced view of the collection: a scope not
        listed yet, or a list or watch failing for `after` seconds (readiness)."""
        if self._unlisted:
            where = ", ".join(sorted(scope or "all namespaces" for scope in self._unlisted))
            return f"the {self.noun} watch has not listed {where} yet"
        return self.stuck(after)

    def _watch(self, namespace: str) -> ListWatch:
        observer = _ScopeObserver(self, namespace)
        path = resource_path(self.resource, namespace)
        return ListWatch(
            self.api, path, observer, self._query, listing=self.feed.reading, clock=self._clock
        )

    def scope_listed(self, namespace: str) -> None:
        self._absent.discard(namespace)
        self._unlisted.discard(namespace)
        if not self._unlisted:
            self.listed.set()

    def absent(self, error: Exception) -> bool:
        """Whether `error` says the resource is not served at all (then it has no objects)."""
        return False

    def scope_absent(self, namespace: str) -> None:
        self.scope_listed(namespace)
        self._absent.add(namespace)

    def scope_failed(self, namespace: str) -> None:
        """A failure that is not absence: readiness and liveness count it again."""
        self._absent.discard(namespace)


class JobWatch(ModelWatch[Model]):
    """The Jobs our ScheduledJobs own or are labelled for."""

    noun, resource, selector = "Job", JOBS, LABEL_SCHEDULEDJOB

    @staticmethod
    def feed_of(target: Model) -> Feed:
        forget = target.forget_unlisted_jobs
        return Feed(target.upsert_job, target.delete_job, forget, target.reading)


class ScheduledJobWatch(ModelWatch[Model]):
    """Every ScheduledJob in the watched namespaces."""

    noun, resource = "ScheduledJob", SCHEDULEDJOBS

    @staticmethod
    def feed_of(target: Model) -> Feed:
        forget = target.forget_unlisted_scheduledjobs
        return Feed(target.upsert_scheduledjob, target.delete_scheduledjob, forget, target.reading)


class RunRequestWatch(ModelWatch[Model]):
    """Every RunRequest in the watched namespaces. Their resource may not be served (CRDs
    managed outside the chart, not upgraded yet): then there are none, and scheduling must not
    wait for them. A 404 says so only once `served` is set (the ScheduledJobs, of the same group
    and version, have been listed): before, it may be an API server still registering its
    custom resources, and it is an ordinary failure. The watch keeps trying either way."""

    noun, resource = "RunRequest", RUNREQUESTS

    def __init__(
        self,
        api: KubeApi,
        target: Model,
        namespaces: tuple[str, ...],
        listed: asyncio.Event,
        served: asyncio.Event,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(api, target, namespaces, listed, clock)
        self.served = served

    def absent(self, error: Exception) -> bool:
        return isinstance(error, ApiError) and error.status == 404 and self.served.is_set()

    @staticmethod
    def feed_of(target: Model) -> Feed:
        forget = target.forget_unlisted_runrequests
        return Feed(target.upsert_runrequest, target.delete_runrequest, forget, target.reading)


class _ScopeObserver:
    """Feeds one namespace's (or every namespace's) objects into the model."""

    def __init__(self, watch: ModelWatch[Any], namespace: str) -> None:
        self.watch, self.namespace = watch, namespace
        self.feed = watch.feed
        self._listing: set[Key] = set()

    def listed_item(self, obj: dict[str, Any]) -> None:
        self._listing.add(key_of(obj))
        self.feed.upsert(obj)

    def listed(self, version: str) -> None:
        self.feed.forget_unlisted(self.namespace, self._listing, version)
        self._listing = set()
        self.watch.scope_listed(self.namespace)

    def changed(self, event_type: str, obj: dict[str, Any]) -> None:
        if event_type == "DELETED":
            self.feed.delete(obj)
        else:
            self.feed.upsert(obj)

    def failed(self, error: Exception) -> None:
        self._listing = set()  # a listing that broke off settles nothing; the next one starts anew
        if self.watch.absent(error):
            self.watch.scope_absent(self.namespace)  # not an error: the resource is not served
            return
        self.watch.scope_failed(self.namespace)
        metrics.reconcile_errors.labels(WATCH_OPERATION).inc()
