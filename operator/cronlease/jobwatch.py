"""The Job watch that feeds the live model: a LIST, then a WATCH from its resourceVersion.

ScheduledJobs are few and change rarely; kopf watches them. Jobs are many, and each run brings
about five events. kopf's per-event machinery (a per-object worker, a body wrapper, loggers,
handler kwargs) cost a third of the operator's CPU at a burst of 1,000 creations, for events the
model mostly drops at once: our own create responses get there first. Here an event costs a JSON
parse and a resourceVersion comparison.
"""

from __future__ import annotations

import asyncio
import logging

import orjson

from cronlease import metrics
from cronlease.kube import ApiError, KubeApi
from cronlease.model import Key, Model, key_of
from cronlease.naming import LABEL_SCHEDULEDJOB

log = logging.getLogger(__name__)

SERVER_TIMEOUT = 300  # the API server ends a watch after this long; we simply start the next
BACKOFFS = (0.5, 1.0, 2.0, 5.0, 10.0)


class Expired(Exception):
    """410 Gone: the watch's resourceVersion is compacted away; list again."""


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
        await asyncio.gather(*(self._follow(scope) for scope in self.scopes))

    async def _follow(self, namespace: str) -> None:
        """List, then watch, for ever. A dropped connection resumes from the last version seen;
        an expired version lists again, and the listing settles what the gap hid (deletions)."""
        version: str | None = None
        failures = 0
        while True:
            try:
                if version is None:
                    version = await self._list(namespace)
                version = await self._watch(namespace, version)
                failures = 0
            except Expired:
                log.info("Job watch in %r expired; listing again", namespace or "all namespaces")
                version = None
            except Exception as error:  # a dropped connection, an API server restart, a 5xx
                backoff = BACKOFFS[min(failures, len(BACKOFFS) - 1)]
                failures += 1
                metrics.reconcile_errors.labels("watch").inc()
                log.warning("Job watch: %s; again in %.1f s", error, backoff)
                await asyncio.sleep(backoff)

    async def _list(self, namespace: str) -> str:
        listed: set[Key] = set()
        version = ""
        async for items, page_version in self.api.list_jobs(LABEL_SCHEDULEDJOB, namespace):
            version = page_version  # the same on every page: the listing's
            for item in items:
                listed.add(key_of(item))
                self.model.upsert_job(item)
        self.model.forget_unlisted_jobs(namespace, listed, version)
        self._unlisted.discard(namespace)
        if not self._unlisted:
            self.listed.set()
        return version

    async def _watch(self, namespace: str, version: str) -> str:
        """One watch request, until the server ends it; returns the last version seen."""
        query = [
            ("watch", "true"),
            ("labelSelector", LABEL_SCHEDULEDJOB),
            ("resourceVersion", version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(SERVER_TIMEOUT)),
        ]
        path = f"/apis/batch/v1{f'/namespaces/{namespace}' if namespace else ''}/jobs"
        try:
            async for line in self.api.stream(path, query, request_timeout=SERVER_TIMEOUT + 30):
                if not line.strip():
                    continue
                event = orjson.loads(line)
                kind, obj = event["type"], event["object"]
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise Expired()
                    raise ApiError(
                        obj.get("code", 0), obj.get("reason", ""), orjson.dumps(obj).decode()
                    )
                version = obj["metadata"]["resourceVersion"]
                if kind == "DELETED":
                    self.model.delete_job(obj)
                elif kind in ("ADDED", "MODIFIED"):
                    self.model.upsert_job(obj)
        except ApiError as error:
            if error.status == 410:
                raise Expired() from error
            raise
        return version
