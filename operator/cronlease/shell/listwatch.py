"""List-then-watch, written once: the operator's ScheduledJob, Job and Run watches and the bench's
and chaos auditor's observers all follow a collection this way.

A LIST (in pages) gives the state and a resourceVersion; a WATCH from it gives every change. A
dropped connection resumes from the last version seen, bookmarks included; a 410 (the version was
compacted away) lists again, and that listing settles whatever the gap hid, deletions included.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol

import orjson

from cronlease.shell import backoff
from cronlease.shell.kube import ApiError, KubeApi, Query

log = logging.getLogger(__name__)

SERVER_TIMEOUT = 300  # the API server ends a watch after this long; the next one simply starts


class Expired(Exception):
    """410 Gone: the watch's resourceVersion is compacted away; list again."""


class Observer(Protocol):
    """What a list-then-watch reports. Items and events are the API server's JSON objects."""

    def listed_item(self, obj: dict[str, Any]) -> None:
        """One item of a listing (a page is reported item by item as it arrives)."""

    def listed(self, version: str) -> None:
        """A listing is complete at `version`: whatever it lacked is gone."""

    def changed(self, event_type: str, obj: dict[str, Any]) -> None:
        """ADDED, MODIFIED or DELETED."""

    def failed(self, error: Exception) -> None:
        """The watch broke (it retries by itself); for metrics and logs."""


class ListWatch:
    def __init__(
        self,
        api: KubeApi,
        path: str,
        observer: Observer,
        query: Query | None = None,
        server_timeout: int = SERVER_TIMEOUT,
        listing: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api, self.path, self.observer = api, path, observer
        self.query = query or []
        self.server_timeout = server_timeout
        # Entered before a listing's first page is requested, left once its last item has been
        # reported, or the listing broke off: the model's `reading` (its tombstones' lifetime).
        self.listing = listing
        self._clock = clock
        self._failing_since: float | None = None  # first failure since the last success

    def failing_for(self) -> float:
        """Seconds since the list or watch first failed without succeeding since; 0 if it works
        (a quiet watch works: success is a listing, any line of a watch, or its clean end)."""
        return 0.0 if self._failing_since is None else self._clock() - self._failing_since

    def _succeeded(self) -> None:
        self._failing_since = None

    async def run(self) -> None:
        """List, then watch, for ever."""
        version: str | None = None
        failures = 0
        while True:
            try:
                if version is None:
                    version = await self._list()
                version = await self._watch(version)
                failures = 0
                self._succeeded()
            except Expired:
                log.info("watch of %s expired; listing again", self.path)
                version = None
            except Exception as error:  # a dropped connection, an API server restart, a 5xx
                failures += 1
                if self._failing_since is None:
                    self._failing_since = self._clock()
                delay = backoff.WATCH.delay(failures)
                if isinstance(error, ApiError) and error.status == 404:
                    version = None  # the collection is not served (any more): list it again
                self.observer.failed(error)
                log.warning("watch of %s: %s; again in %.1f s", self.path, error, delay)
                await asyncio.sleep(delay)

    async def _list(self) -> str:
        version = ""
        with self.listing():
            async for items, page_version in self.api.list_pages(self.path, self.query):
                version = page_version  # the same on every page: the listing's
                for item in items:
                    self._report(self.observer.listed_item, item)
        self.observer.listed(version)
        self._succeeded()
        return version

    def _report(self, callback: Callable[..., None], *args: Any) -> None:
        """An object the observer cannot take is skipped, never retried: the watch would replay
        it for ever, and stop seeing everything after it (one bad object affects only itself)."""
        try:
            callback(*args)
        except Exception:
            log.exception("watch of %s: skipped an object the observer refused", self.path)

    async def _watch(self, version: str) -> str:
        """One watch request, until the server ends it; returns the last version seen."""
        try:
            async for line in self.api.watch(self.path, self.query, version, self.server_timeout):
                if not line.strip():
                    continue
                event = orjson.loads(line)
                event_type, obj = event["type"], event["object"]
                if event_type == "ERROR":
                    if obj.get("code") == 410:
                        raise Expired()
                    raise ApiError(
                        obj.get("code", 0), obj.get("reason", ""), orjson.dumps(obj).decode()
                    )
                version = obj["metadata"]["resourceVersion"]
                self._succeeded()
                if event_type != "BOOKMARK":
                    self._report(self.observer.changed, event_type, obj)
        except ApiError as error:
            if error.status == 410:
                raise Expired() from error
            raise
        return version
