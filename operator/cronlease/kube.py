"""The few API calls the operator makes: plain aiohttp, logged in the way kopf logs in.

kopf's own login reads the ServiceAccount or the kubeconfig, so our requests go out with exactly
the credentials its watches use. No client library: kubernetes_asyncio's 859 generated modules
were 35 MB of the operator's memory (kopf imports them whenever the package is installed), and
its model deserialisation and body sanitising were most of a Job creation's CPU. Responses are
plain JSON, parsed by orjson at a quarter of the json module's cost (a burst of 1,000 creations
brings 1,000 responses and about 5,000 watch events); the core works on dicts anyway.
"""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlencode

import aiohttp
import kopf
import orjson
from yarl import URL

from cronlease import GROUP, PLURAL, VERSION

LIST_PAGE = 500
# aiohttp's default line limit is 64 KiB; a watch event of a large object must fit in one line.
READ_BUFFER = 2**21


class ApiError(Exception):
    def __init__(self, status: int, reason: str, body: str) -> None:
        self.status, self.reason, self.body = status, reason, body
        super().__init__(f"{status} {reason}: {self.message}")

    @property
    def message(self) -> str:
        """The Status object's message, which is what a user should read."""
        try:
            return str(json.loads(self.body).get("message", self.body))
        except ValueError:
            return self.body


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
    two worker-thread hops, which was a tenth of the operator's CPU at a burst of creations."""
    host = URL(server)
    proxy = urllib.request.getproxies().get(host.scheme or "https")
    return bool(proxy) and not urllib.request.proxy_bypass(host.host or "")


class KubeApi:
    """One connection pool to the API server; `max_connections` sizes it for bursts, since
    creations at a shared slot go out concurrently (design decision 2)."""

    def __init__(self, max_connections: int = 64) -> None:
        self._info = login()
        self._headers = self._info.as_http_headers()
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=max_connections, ssl=self._info.as_ssl_context()),
            proxy=self._info.proxy_url,
            trust_env=_trusts_environment(self._info.server),
            read_bufsize=READ_BUFFER,
        )
        self.server = self._info.server.rstrip("/")

    async def close(self) -> None:
        await self._session.close()

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: list[tuple[str, str]] | None = None,
        content_type: str = "application/json",
        request_timeout: float = 30,
    ) -> dict[str, Any]:
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        async with await self._send(
            method, path, query or [], headers, body, request_timeout
        ) as response:
            content = await response.read()
        if not 200 <= response.status <= 299:
            raise ApiError(response.status, response.reason or "", content.decode(errors="replace"))
        result: dict[str, Any] = orjson.loads(content) if content else {}
        return result

    async def stream(
        self, path: str, query: list[tuple[str, str]], request_timeout: float
    ) -> AsyncIterator[bytes]:
        """The lines of a streaming response (a watch), as they arrive."""
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
        query: list[tuple[str, str]],
        headers: dict[str, str],
        body: Any,
        request_timeout: float,
    ) -> aiohttp.ClientResponse:
        """A 401 means the token rotated (a projected ServiceAccount token does, hourly): log in
        again, as kopf does for its own requests, and retry once."""
        url = f"{self.server}{path}" + (f"?{urlencode(query)}" if query else "")
        data = None if body is None else orjson.dumps(body)
        timeout = aiohttp.ClientTimeout(total=request_timeout)
        for attempt in range(2):
            response = await self._session.request(
                method, url, headers={**self._headers, **headers}, data=data, timeout=timeout
            )
            if response.status != 401 or attempt:
                break
            response.release()
            self._info = login()
            self._headers = self._info.as_http_headers()
        return response

    # Jobs

    async def create_job(self, job: dict[str, Any], dry_run: bool = False) -> dict[str, Any]:
        namespace = job["metadata"]["namespace"]
        # Strict: a typo in jobTemplate.spec is refused, not dropped (it would run on defaults).
        path = f"/apis/batch/v1/namespaces/{namespace}/jobs"
        query = [("fieldValidation", "Strict"), *([("dryRun", "All")] if dry_run else [])]
        return await self.request("POST", path, job, query=query)

    async def get_job(self, namespace: str, name: str) -> dict[str, Any]:
        return await self.request("GET", f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}")

    async def delete_job(self, namespace: str, name: str, uid: str) -> None:
        """Delete by name only if it is still the Job we decided about (uid precondition)."""
        options = {"propagationPolicy": "Background", "preconditions": {"uid": uid}}
        await self.request("DELETE", f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}", options)

    async def list_pages(
        self, path: str, query: list[tuple[str, str]] | None = None
    ) -> AsyncIterator[tuple[list[dict[str, Any]], str]]:
        """A LIST, LIST_PAGE items at a time, with the listing's resourceVersion: the caller
        keeps what it needs of a page before the next one is read. Listed whole, 5,000
        ScheduledJobs (managedFields and all) were 200 MB of parsed JSON at once, and the
        process kept that high-water mark for ever."""
        token = ""
        while True:
            page_query = [*(query or []), ("limit", str(LIST_PAGE))]
            if token:
                page_query.append(("continue", token))
            page = await self.request("GET", path, query=page_query)
            yield page["items"], str(page["metadata"]["resourceVersion"])
            token = page["metadata"].get("continue") or ""
            if not token:
                return

    def list_jobs(
        self, label_selector: str, namespace: str = ""
    ) -> AsyncIterator[tuple[list[dict[str, Any]], str]]:
        """An empty namespace lists all."""
        query = [("labelSelector", label_selector)]
        return self.list_pages(_path("batch/v1", "jobs", namespace), query)

    # ScheduledJobs

    def list_scheduledjobs(
        self, namespace: str = ""
    ) -> AsyncIterator[tuple[list[dict[str, Any]], str]]:
        return self.list_pages(_path(f"{GROUP}/{VERSION}", PLURAL, namespace))

    async def get_scheduledjob(self, namespace: str, name: str) -> dict[str, Any]:
        return await self.request(
            "GET", _path(f"{GROUP}/{VERSION}", PLURAL, namespace) + f"/{name}"
        )

    async def patch_status(
        self, namespace: str, name: str, status: dict[str, Any], resource_version: str
    ) -> dict[str, Any]:
        """A merge patch conditional on resource_version: a decision made on a stale copy is
        refused with 409 instead of overwriting newer status (the cursor must never go back)."""
        path = _path(f"{GROUP}/{VERSION}", PLURAL, namespace) + f"/{name}/status"
        body = {"metadata": {"resourceVersion": resource_version}, "status": status}
        return await self.request("PATCH", path, body, content_type="application/merge-patch+json")

    # Events

    async def create_event(self, event: dict[str, Any]) -> None:
        namespace = event["metadata"]["namespace"]
        await self.request("POST", f"/api/v1/namespaces/{namespace}/events", event)


def _path(group_version: str, plural: str, namespace: str) -> str:
    scope = f"/namespaces/{namespace}" if namespace else ""
    return f"/apis/{group_version}{scope}/{plural}"
