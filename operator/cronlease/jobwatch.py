"""The Job watch that feeds the live model (docs/design-notes.md, item 8).

ScheduledJobs are few and change rarely; kopf watches them. Jobs are many, and each run brings
about five events, which kopf's per-event machinery made costly; here an event costs a JSON parse
and a resourceVersion comparison, on the one list-then-watch (cronlease.listwatch).
"""

from __future__ import annotations

import asyncio
from typing import Any

from cronlease import metrics
from cronlease.kube import JOBS, KubeApi, resource_path
from cronlease.listwatch import ListWatch
from cronlease.model import Key, Model, key_of
from cronlease.naming import LABEL_SCHEDULEDJOB


class JobWatch:
    def __init__(
        self,
        api: KubeApi,
        model: Model,
        namespaces: tuple[str, ...],
        listed: asyncio.Event,
    ) -> None:
        self.api = api
        self.model = model
        self.scopes = namespaces or ("",)  # "" is every namespace
        # Set once every scope has been listed into the model: a new leader decides after it.
        self.listed = listed
        self._unlisted = set(self.scopes)

    async def run(self) -> None:
        await asyncio.gather(*(self._watch(scope).run() for scope in self.scopes))

    def _watch(self, namespace: str) -> ListWatch:
        query = [("labelSelector", LABEL_SCHEDULEDJOB)]
        observer = _ScopeObserver(self, namespace)
        path = resource_path(JOBS, namespace)
        return ListWatch(self.api, path, observer, query, listing=self.model.reading)

    def scope_listed(self, namespace: str) -> None:
        self._unlisted.discard(namespace)
        if not self._unlisted:
            self.listed.set()


class _ScopeObserver:
    """Feeds one namespace's (or every namespace's) Jobs into the model."""

    def __init__(self, watch: JobWatch, namespace: str) -> None:
        self.watch, self.namespace = watch, namespace
        self.model = watch.model
        self._listing: set[Key] = set()

    def listed_item(self, obj: dict[str, Any]) -> None:
        self._listing.add(key_of(obj))
        self.model.upsert_job(obj)

    def listed(self, version: str) -> None:
        self.model.forget_unlisted_jobs(self.namespace, self._listing, version)
        self._listing = set()
        self.watch.scope_listed(self.namespace)

    def changed(self, event_type: str, obj: dict[str, Any]) -> None:
        if event_type == "DELETED":
            self.model.delete_job(obj)
        else:
            self.model.upsert_job(obj)

    def failed(self, error: Exception) -> None:
        self._listing = set()  # a listing that broke off settles nothing; the next one starts anew
        metrics.reconcile_errors.labels("watch").inc()
