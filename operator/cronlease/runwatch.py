"""The watches that feed multi-step runs (issue 17): Runs (into the ScheduledJobs' Run model and
the supervisor's store), step Jobs and heartbeat Leases (into the store), each one
list-then-watch (cronlease.listwatch) per watched namespace."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from cronlease import metrics
from cronlease.kube import JOBS, LEASES, RUNS, KubeApi, resource_path
from cronlease.listwatch import ListWatch
from cronlease.model import Key, Model, key_of
from cronlease.naming import LABEL_SCHEDULEDJOB
from cronlease.runstore import RunStore
from cronlease.stepjob import LABEL_STEP


class RunWatch:
    def __init__(
        self, api: KubeApi, runs: Model, store: RunStore, namespaces: tuple[str, ...]
    ) -> None:
        self.runs, self.store = runs, store
        self.listed = asyncio.Event()  # every collection of every scope listed once
        scopes = namespaces or ("",)
        self._unlisted: set[tuple[str, str]] = set()
        self._watches = []
        for scope in scopes:
            for collection, resource, selector in (
                ("runs", RUNS, LABEL_SCHEDULEDJOB),
                ("jobs", JOBS, LABEL_STEP),
                ("leases", LEASES, LABEL_STEP),
            ):
                self._unlisted.add((collection, scope))
                observer = _Observer(self, collection, scope)
                path = resource_path(resource, scope)
                self._watches.append(ListWatch(api, path, observer, [("labelSelector", selector)]))

    async def run(self) -> None:
        await asyncio.gather(*(watch.run() for watch in self._watches))

    def scope_listed(self, collection: str, scope: str) -> None:
        self._unlisted.discard((collection, scope))
        if not self._unlisted:
            self.listed.set()


class _Observer:
    def __init__(self, watch: RunWatch, collection: str, scope: str) -> None:
        self.watch, self.collection, self.scope = watch, collection, scope
        store = watch.store
        upserts: dict[str, Callable[[dict[str, Any]], None]] = {
            "runs": self._upsert_run,
            "jobs": store.upsert_step_job,
            "leases": store.upsert_lease,
        }
        deletes: dict[str, Callable[[dict[str, Any]], None]] = {
            "runs": self._delete_run,
            "jobs": store.delete_step_job,
            "leases": store.delete_lease,
        }
        self.upsert, self.delete = upserts[collection], deletes[collection]
        self._listing: set[Key] = set()

    def _upsert_run(self, obj: dict[str, Any]) -> None:
        self.watch.runs.upsert_job(obj)
        self.watch.store.upsert_run(obj)

    def _delete_run(self, obj: dict[str, Any]) -> None:
        self.watch.runs.delete_job(obj)
        self.watch.store.delete_run(obj)

    def listed_item(self, obj: dict[str, Any]) -> None:
        self._listing.add(key_of(obj))
        self.upsert(obj)

    def listed(self, version: str) -> None:
        if self.collection == "runs":
            self.watch.runs.forget_unlisted_jobs(self.scope, self._listing, version)
        self.watch.store.forget_unlisted(self.collection, self.scope, self._listing)
        self._listing = set()
        self.watch.scope_listed(self.collection, self.scope)

    def changed(self, event_type: str, obj: dict[str, Any]) -> None:
        if event_type == "DELETED":
            self.delete(obj)
        else:
            self.upsert(obj)

    def failed(self, error: Exception) -> None:
        self._listing = set()
        metrics.reconcile_errors.labels("watch").inc()
