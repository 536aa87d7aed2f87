"""The Job watch that feeds the live model (docs/design-notes.md, item 8).

ScheduledJobs are few and change rarely; kopf watches them. Jobs are many, and each run brings
about five events, which kopf's per-event machinery made costly; here an event costs a JSON parse
and a resourceVersion comparison, on the one list-then-watch (cronlease.listwatch).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
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
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.model = model
        self.scopes = namespaces or ("",)  # "" is every namespace
        # Set once every scope has been listed into the model: a new leader decides after it.
        self.listed = listed
        self._unlisted = set(self.scopes)
        self._clock = clock
        self._watches = [self._watch(scope) for scope in self.scopes]

    async def run(self) -> None:
        await asyncio.gather(*(watch.run() for watch in self._watches))

    def stuck(self, after: float) -> str | None:
        """Why the model is not kept current, if a scope's list or watch has failed for `after`
        seconds without a success in between (readiness reports it: decisions go on, on a model
        that no longer sees its Jobs)."""
        for scope, watch in zip(self.scopes, self._watches, strict=True):
            if watch.failing_for() >= after:
                where = scope or "all namespaces"
                return f"the Job watch of {where} has failed for {watch.failing_for():.0f} s"
        return None

    def unsynced(self, after: float) -> str | None:
        """Why the model is not (or no longer) a synced view of the Jobs: a scope not listed
        yet, or a list or watch failing for `after` seconds (readiness)."""
        if self._unlisted:
            where = ", ".join(sorted(scope or "all namespaces" for scope in self._unlisted))
            return f"the Job watch has not listed {where} yet"
        return self.stuck(after)

    def _watch(self, namespace: str) -> ListWatch:
        query = [("labelSelector", LABEL_SCHEDULEDJOB)]
        observer = _ScopeObserver(self, namespace)
        path = resource_path(JOBS, namespace)
        return ListWatch(
            self.api, path, observer, query, listing=self.model.reading, clock=self._clock
        )

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
