"""The watches that feed multi-step runs (issue 17): Runs (into the ScheduledJobs' Run model and
the supervisor's store), step Jobs and heartbeat Leases (into the store), each a ModelWatch."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cronlease.core.bodies.stepjob import LABEL_STEP
from cronlease.core.names.naming import LABEL_SCHEDULEDJOB
from cronlease.shell.kube import JOBS, LEASES, RUNS, KubeApi
from cronlease.shell.model import Key, Model
from cronlease.shell.modelwatch import Feed, ModelWatch
from cronlease.shell.runstore import RunStore


@dataclass(frozen=True, slots=True)
class RunViews:
    """Where a Run goes: the Run model its ScheduledJob's decisions read (a Run counts there as
    a Job does), and the supervisor's store."""

    runs: Model
    store: RunStore


class RunObjectWatch(ModelWatch[RunViews]):
    noun, resource, selector = "Run", RUNS, LABEL_SCHEDULEDJOB

    @staticmethod
    def feed_of(target: RunViews) -> Feed:
        runs, store = target.runs, target.store

        def upsert(obj: dict[str, Any]) -> None:
            runs.upsert_job(obj)
            store.upsert_run(obj)

        def delete(obj: dict[str, Any]) -> None:
            runs.delete_job(obj)
            store.delete_run(obj)

        def forget_unlisted(namespace: str, listed: set[Key], version: str) -> None:
            runs.forget_unlisted_jobs(namespace, listed, version)
            store.forget_unlisted("runs", namespace, listed)

        return Feed(upsert, delete, forget_unlisted, runs.reading)


def _store_feed(
    store: RunStore,
    collection: str,
    upsert: Callable[[dict[str, Any]], None],
    delete: Callable[[dict[str, Any]], None],
) -> Feed:
    """Step Jobs and heartbeat Leases: the store alone keeps them, with no versions to bury."""

    def forget_unlisted(namespace: str, listed: set[Key], version: str) -> None:
        store.forget_unlisted(collection, namespace, listed)

    return Feed(upsert, delete, forget_unlisted)


class StepJobWatch(ModelWatch[RunStore]):
    noun, resource, selector = "step Job", JOBS, LABEL_STEP

    @staticmethod
    def feed_of(target: RunStore) -> Feed:
        return _store_feed(target, "jobs", target.upsert_step_job, target.delete_step_job)


class HeartbeatWatch(ModelWatch[RunStore]):
    noun, resource, selector = "heartbeat Lease", LEASES, LABEL_STEP

    @staticmethod
    def feed_of(target: RunStore) -> Feed:
        return _store_feed(target, "leases", target.upsert_lease, target.delete_lease)


class RunWatch:
    """The three together: `listed` is set once each has listed every scope (the supervisor
    acts after it)."""

    def __init__(
        self, api: KubeApi, runs: Model, store: RunStore, namespaces: tuple[str, ...]
    ) -> None:
        self.listed = asyncio.Event()
        self._listed = [asyncio.Event() for _ in range(3)]
        self.watches: tuple[ModelWatch[Any], ...] = (
            RunObjectWatch(api, RunViews(runs, store), namespaces, self._listed[0]),
            StepJobWatch(api, store, namespaces, self._listed[1]),
            HeartbeatWatch(api, store, namespaces, self._listed[2]),
        )

    async def run(self) -> None:
        await asyncio.gather(*(watch.run() for watch in self.watches), self._all_listed())

    async def _all_listed(self) -> None:
        for listed in self._listed:
            await listed.wait()
        self.listed.set()
