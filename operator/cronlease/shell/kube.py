"""The API calls the operator makes, over a small `Transport` seam.

`KubeApi` knows paths, verbs and bodies; a `Transport` moves bytes. The real transport is plain
aiohttp logged in the way kopf logs in (decision 0008); unit tests plug in a fake API server
(tests/unit/fakeapi.py) that models resourceVersions, conflicts, watches and lost responses.
Every URL the operator and its tools use is built by `resource_path`, here and nowhere else.
"""

from __future__ import annotations

import asyncio
import json
import os
import urllib.request
from asyncio import sslproto
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol
from urllib.parse import urlencode

import aiohttp
import kopf
import orjson
from yarl import URL

from cronlease.core.names.naming import GROUP, PLURAL, REQUEST_PLURAL, RUN_PLURAL, VERSION

LIST_PAGE = 500
# aiohttp's default line limit is 64 KiB; a watch event of a large object must fit in one line.
READ_BUFFER = 2**21
# Seconds an idle connection is kept. A burst opens up to max_connections TLS connections, and
# idle each holds about 80 KB here (its read buffer, the TLS state) besides what it holds in the
# API server: 57 of them were 4.7 MB of a 65 MB RSS at rest with 1,000 ScheduledJobs (design
# note 105). aiohttp's default of 15 s, with its cleanup run once per timeout, kept them up to
# 30 s; a burst keeps them busy, and the Lease's renewals keep one warm between bursts.
IDLE_CONNECTION = 5.0
# asyncio gives each TLS connection a zero-filled read buffer for the connection's life, 256 KiB
# by default: 24 MB resident for the 64 connections of a burst, most of the operator's RSS
# growth at one, and still there while they idle in keep-alive. 64 KiB holds four TLS records
# a read and takes half of that (decision 0014; design note 103).
TLS_READ_BUFFER = 64 * 1024
SCHEDULEDJOBS = (f"{GROUP}/{VERSION}", PLURAL)
RUNREQUESTS = (f"{GROUP}/{VERSION}", REQUEST_PLURAL)
RUNS = (f"{GROUP}/{VERSION}", RUN_PLURAL)
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JOBS = ("batch/v1", "jobs")
LEASES = ("coordination.k8s.io/v1", "leases")
EVENTS = ("v1", "events")
NAMESPACES = ("v1", "namespaces")

Query = list[tuple[str, str]]


class ApiError(Exception):
    def __init__(self, status: int, reason: str, body: str) -> None:
        self.status, self.reason, self.body = status, reason, body
        super().__init__(f"{status} {reason}: {self.message}")

    @property
    def message(self) -> str:
        """The Status object's message, which is what a user should read."""
        try:
            return str(json.loads(self.body).get("message", self.body))
        except (ValueError, AttributeError):
            return self.body


class TransportError(Exception):
    """The request's outcome is unknown: the connection failed or timed out, so the server may
    or may not have acted (a lost response)."""


def resource_path(
    resource: tuple[str, str], namespace: str = "", name: str = "", subresource: str = ""
) -> str:
    """The one URL builder: a collection (all namespaces when `namespace` is empty), an object,
    or an object's subresource. Core resources (group "") live under /api, the rest under /apis."""
    group_version, plural = resource
    root = "/api" if "/" not in group_version else "/apis"
    path = f"{root}/{group_version}"
    if namespace:
        path += f"/namespaces/{namespace}"
    path += f"/{plural}"
    if name:
        path += f"/{name}"
    if subresource:
        path += f"/{subresource}"
    return path


class Transport(Protocol):
    """What KubeApi needs from a connection: one request, one streamed response, and closing."""

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: Query | None = None,
        content_type: str = "application/json",
        request_timeout: float = 30,
    ) -> dict[str, Any]:
        """The parsed JSON response; ApiError for a status outside 2xx."""
        ...

    def stream(self, path: str, query: Query, request_timeout: float) -> AsyncIterator[bytes]:
        """The lines of a streaming GET (a watch), as they arrive."""
        ...

    async def close(self) -> None: ...


def login() -> kopf.ConnectionInfo:
    """In a pod, the ServiceAccount; elsewhere the kubeconfig ($KUBECONFIG or ~/.kube/config).
    kopf's minimal logins: tokens and client certificates, not exec plugins, which an operator
    in its pod never needs (out of a cluster, use a token: `kubectl create token`)."""
    settings = kopf.OperatorSettings()
    if os.environ.get("KUBERNETES_SERVICE_HOST") and not os.environ.get("KUBECONFIG"):
        info = kopf.login_with_service_account(settings=settings)
    else:
        info = kopf.login_with_kubeconfig(settings=settings)
    if info is None:
        raise kopf.LoginError("no ServiceAccount token and no kubeconfig found")
    return info


def _trusts_environment(server: str) -> bool:
    """Honour the proxy variables only where one applies to the API server: a session that
    trusts the environment reads ~/.netrc and the proxy variables again on every request, in
    two worker-thread hops (see decision 0008; design note 10)."""
    host = URL(server)
    proxy = urllib.request.getproxies().get(host.scheme or "https")
    return bool(proxy) and not urllib.request.proxy_bypass(host.host or "")


def limit_tls_read_buffers() -> None:
    """For the connections made from now on, in this process (kopf's too). asyncio has no
    public setting for it, only its SSLProtocol's class attribute; where that is gone (another
    asyncio), nothing changes."""
    if getattr(sslproto.SSLProtocol, "max_size", 0) > TLS_READ_BUFFER:
        sslproto.SSLProtocol.max_size = TLS_READ_BUFFER


class HttpTransport:
    """One aiohttp connection pool to the API server, with the credentials it is given.
    `max_connections` sizes it for bursts: creations at a shared slot go out concurrently."""

    def __init__(
        self,
        info: kopf.ConnectionInfo,
        relogin: Callable[[], kopf.ConnectionInfo],
        max_connections: int = 64,
        on_date: Callable[[str | None], None] | None = None,
    ) -> None:
        limit_tls_read_buffers()
        self._info, self._relogin = info, relogin
        self._on_date = on_date  # each response's Date header (cronlease.shell.servertime)
        self._headers = info.as_http_headers()
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(
                limit=max_connections,
                ssl=info.as_ssl_context(),
                keepalive_timeout=IDLE_CONNECTION,
            ),
            proxy=info.proxy_url,
            trust_env=_trusts_environment(info.server),
            read_bufsize=READ_BUFFER,
        )
        self.server = info.server.rstrip("/")

    async def close(self) -> None:
        await self._session.close()

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: Query | None = None,
        content_type: str = "application/json",
        request_timeout: float = 30,
    ) -> dict[str, Any]:
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        try:
            async with await self._send(
                method, path, query or [], headers, body, request_timeout
            ) as response:
                content = await response.read()
        except (aiohttp.ClientError, TimeoutError) as error:
            raise TransportError(f"{method} {path}: {error!r}") from error
        if not 200 <= response.status <= 299:
            raise ApiError(response.status, response.reason or "", content.decode(errors="replace"))
        result: dict[str, Any] = orjson.loads(content) if content else {}
        return result

    async def stream(self, path: str, query: Query, request_timeout: float) -> AsyncIterator[bytes]:
        headers = {"Accept": "application/json"}
        async with await self._send("GET", path, query, headers, None, request_timeout) as response:
            if response.status != 200:
                raise ApiError(response.status, response.reason or "", await response.text())
            async for line in response.content:
                yield line

    async def _send(
        self,
        method: str,
        path: str,
        query: Query,
        headers: dict[str, str],
        body: Any,
        request_timeout: float,
    ) -> aiohttp.ClientResponse:
        """A 401 means the token rotated (a projected ServiceAccount token does, hourly): log in
        again, as kopf does for its own requests, and retry once."""
        url = f"{self.server}{path}" + (f"?{urlencode(query)}" if query else "")
        # bytes: a body serialised beforehand (cronlease.core.bodies.preparation), sent as it is.
        data = body if body is None or isinstance(body, bytes) else orjson.dumps(body)
        timeout = aiohttp.ClientTimeout(total=request_timeout)
        for attempt in range(2):
            response = await self._session.request(
                method, url, headers={**self._headers, **headers}, data=data, timeout=timeout
            )
            if self._on_date is not None:
                self._on_date(response.headers.get("Date"))
            if response.status != 401 or attempt:
                break
            response.release()
            self._info = self._relogin()
            self._headers = self._info.as_http_headers()
        return response


class KubeApi:
    """The calls the operator and its tools make, on whatever transport they are given."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        # Any call by path, for the tools (bench, chaos) that need more than the operator.
        self.request = transport.request

    async def close(self) -> None:
        await self.transport.close()

    # Collections: listing in pages and watching

    async def list_pages(
        self, path: str, query: Query | None = None
    ) -> AsyncIterator[tuple[list[dict[str, Any]], str]]:
        """A LIST, LIST_PAGE items at a time, with the listing's resourceVersion: the caller keeps
        what it needs of a page before the next one is read (decision 0015; design note 12: whole
        listings set the process's memory high-water mark). No resourceVersion: a consistent read,
        never older than what a watch already delivered (the model's tombstones rely on it:
        cronlease.shell.model.Model.reading)."""
        token = ""
        while True:
            page_query = [*(query or []), ("limit", str(LIST_PAGE))]
            if token:
                page_query.append(("continue", token))
            page = await self.transport.request("GET", path, query=page_query)
            yield page["items"], str(page["metadata"]["resourceVersion"])
            token = page["metadata"].get("continue") or ""
            if not token:
                return

    def watch(
        self, path: str, query: Query, version: str, server_timeout: int
    ) -> AsyncIterator[bytes]:
        """The raw event lines of one WATCH from `version`, with bookmarks, until the server
        ends it after `server_timeout` seconds."""
        watch_query = [
            *query,
            ("watch", "true"),
            ("resourceVersion", version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(server_timeout)),
        ]
        return self.transport.stream(path, watch_query, request_timeout=server_timeout + 30)

    # Jobs

    async def create_job(
        self, job: dict[str, Any], dry_run: bool = False, body: bytes | None = None
    ) -> dict[str, Any]:
        """`body`: the Job already serialised (then `job` need only name its namespace)."""
        # Strict: a typo in jobTemplate.spec is refused, not dropped (it would run on defaults).
        query = [("fieldValidation", "Strict"), *([("dryRun", "All")] if dry_run else [])]
        path = resource_path(JOBS, job["metadata"]["namespace"])
        return await self.transport.request("POST", path, job if body is None else body, query)

    async def warm(self, connections: int) -> None:
        """Open up to `connections` connections now (they idle for IDLE_CONNECTION seconds), so
        that a burst due within that time does not wait for TLS handshakes. /version is what
        any authenticated client may read; a failure only means a colder start."""
        calls = [self.transport.request("GET", "/version") for _ in range(connections)]
        await asyncio.gather(*calls, return_exceptions=True)

    async def get_job(self, namespace: str, name: str) -> dict[str, Any]:
        return await self.transport.request("GET", resource_path(JOBS, namespace, name))

    async def delete_job(
        self, namespace: str, name: str, uid: str, foreground: bool = False
    ) -> None:
        """Delete by name only if it is still the Job we decided about (uid precondition). In the
        foreground, the Job stays (deleting) until its pods are gone."""
        propagation = "Foreground" if foreground else "Background"
        options = {"propagationPolicy": propagation, "preconditions": {"uid": uid}}
        await self.transport.request("DELETE", resource_path(JOBS, namespace, name), options)

    async def release_job(self, namespace: str, name: str, uid: str, finalizer: str) -> None:
        """Remove `finalizer` from the Job, if it is still the Job with `uid`. A strategic merge
        patch removes one value of the list and leaves the rest (a foreground deletion's)."""
        metadata = {"$deleteFromPrimitiveList/finalizers": [finalizer]}
        await self._patch_job_metadata(namespace, name, uid, metadata)

    async def label_job(
        self, namespace: str, name: str, uid: str, labels: dict[str, str]
    ) -> dict[str, Any]:
        """Add `labels` to the Job, if it is still the Job with `uid`; the Job as updated."""
        return await self._patch_job_metadata(namespace, name, uid, {"labels": labels})

    async def _patch_job_metadata(
        self, namespace: str, name: str, uid: str, metadata: dict[str, Any]
    ) -> dict[str, Any]:
        """A strategic merge patch of the Job's metadata, with its uid as precondition."""
        return await self._patch_metadata(JOBS, namespace, name, uid, metadata, STRATEGIC)

    async def _patch_metadata(
        self,
        resource: tuple[str, str],
        namespace: str,
        name: str,
        uid: str,
        metadata: dict[str, Any],
        content_type: str,
    ) -> dict[str, Any]:
        """A patch of an object's metadata, with its uid as precondition (a 409 if it is another
        object under that name now)."""
        return await self.transport.request(
            "PATCH",
            resource_path(resource, namespace, name),
            {"metadata": {"uid": uid, **metadata}},
            content_type=content_type,
        )

    # ScheduledJobs

    async def get_scheduledjob(self, namespace: str, name: str) -> dict[str, Any]:
        return await self.transport.request("GET", resource_path(SCHEDULEDJOBS, namespace, name))

    async def patch_status(
        self,
        namespace: str,
        name: str,
        status: dict[str, Any],
        resource_version: str,
        resource: tuple[str, str] = SCHEDULEDJOBS,
    ) -> dict[str, Any]:
        """A merge patch conditional on resource_version: a decision made on a stale copy is
        refused with 409 instead of overwriting newer status (the cursor must never go back).
        A ScheduledJob's, or another of ours (RUNREQUESTS)."""
        path = resource_path(resource, namespace, name, "status")
        body = {"metadata": {"resourceVersion": resource_version}, "status": status}
        return await self.transport.request(
            "PATCH", path, body, content_type="application/merge-patch+json"
        )

    # Runs (a multi-step slot's run)

    async def create_run(self, run: dict[str, Any]) -> dict[str, Any]:
        path = resource_path(RUNS, run["metadata"]["namespace"])
        query = [("fieldValidation", "Strict")]
        return await self.transport.request("POST", path, run, query=query)

    async def get_run(self, namespace: str, name: str) -> dict[str, Any]:
        return await self.transport.request("GET", resource_path(RUNS, namespace, name))

    async def delete_run(self, namespace: str, name: str, uid: str, foreground: bool) -> None:
        propagation = "Foreground" if foreground else "Background"
        options = {"propagationPolicy": propagation, "preconditions": {"uid": uid}}
        await self.transport.request("DELETE", resource_path(RUNS, namespace, name), options)

    async def release_run(self, namespace: str, name: str, uid: str, finalizer: str) -> None:
        """Remove `finalizer` from the Run with `uid`. A custom resource takes no strategic
        merge patch: a JSON patch removes the entry by index, tested first, so a list changed
        meanwhile (a foreground deletion's finalizer) makes it fail (422) and it reads again."""
        path = resource_path(RUNS, namespace, name)
        for _ in range(5):
            run = await self.get_run(namespace, name)
            finalizers = run["metadata"].get("finalizers") or []
            if run["metadata"].get("uid") != uid or finalizer not in finalizers:
                return
            index = finalizers.index(finalizer)
            patch = [
                {"op": "test", "path": "/metadata/uid", "value": uid},
                {"op": "test", "path": f"/metadata/finalizers/{index}", "value": finalizer},
                {"op": "remove", "path": f"/metadata/finalizers/{index}"},
            ]
            try:
                await self.transport.request(
                    "PATCH", path, patch, content_type="application/json-patch+json"
                )
                return
            except ApiError as error:
                if error.status != 422:
                    raise
        raise ApiError(409, "Conflict", f"the finalizers of Run {name} keep changing")

    async def label_run(
        self, namespace: str, name: str, uid: str, labels: dict[str, str]
    ) -> dict[str, Any]:
        """A custom resource takes no strategic merge patch; a merge patch adds labels alike."""
        return await self._patch_metadata(RUNS, namespace, name, uid, {"labels": labels}, MERGE)

    # RunRequests

    async def get_runrequest(self, namespace: str, name: str) -> dict[str, Any]:
        return await self.transport.request("GET", resource_path(RUNREQUESTS, namespace, name))

    # Leases

    async def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return await self.transport.request("GET", resource_path(LEASES, namespace, name))
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    async def create_lease(self, lease: dict[str, Any]) -> dict[str, Any]:
        path = resource_path(LEASES, lease["metadata"]["namespace"])
        return await self.transport.request("POST", path, lease)

    async def delete_lease(self, namespace: str, name: str, uid: str) -> None:
        options = {"preconditions": {"uid": uid}}
        await self.transport.request("DELETE", resource_path(LEASES, namespace, name), options)

    async def replace_lease(self, lease: dict[str, Any]) -> dict[str, Any]:
        """A PUT carries the resourceVersion we read, so a concurrent writer makes it fail (409).
        Returns the Lease as written, with its new resourceVersion."""
        metadata = lease["metadata"]
        path = resource_path(LEASES, metadata["namespace"], metadata["name"])
        return await self.transport.request("PUT", path, lease)

    # Events

    async def create_event(self, event: dict[str, Any]) -> dict[str, Any]:
        path = resource_path(EVENTS, event["metadata"]["namespace"])
        return await self.transport.request("POST", path, event)

    async def get_event(self, namespace: str, name: str) -> dict[str, Any]:
        return await self.transport.request("GET", resource_path(EVENTS, namespace, name))

    async def patch_event(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """A merge patch; one that carries metadata.resourceVersion is conditional on it (409)."""
        return await self.transport.request(
            "PATCH",
            resource_path(EVENTS, namespace, name),
            patch,
            content_type="application/merge-patch+json",
        )


def connect(
    max_connections: int = 64, on_date: Callable[[str | None], None] | None = None
) -> KubeApi:
    """A KubeApi on a real connection, logged in as kopf logs in (and again after a 401);
    `on_date` hears the Date header of every response."""
    return KubeApi(HttpTransport(login(), login, max_connections, on_date))
