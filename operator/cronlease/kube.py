"""The few API calls the operator makes, on kubernetes_asyncio's configured client.

Responses are read as plain JSON instead of the generated models: at a burst of thousands of Job
creations the model deserialisation would dominate, and the core works on dicts anyway.
"""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlencode

import aiohttp
from kubernetes_asyncio import client, config
from yarl import URL

from cronlease import GROUP, PLURAL, VERSION


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


async def load_config(max_connections: int = 64) -> client.ApiClient:
    """In a pod, the ServiceAccount; elsewhere the kubeconfig ($KUBECONFIG or ~/.kube/config)."""
    configuration = client.Configuration()
    if os.environ.get("KUBERNETES_SERVICE_HOST") and not os.environ.get("KUBECONFIG"):
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        await config.load_kube_config(
            config_file=os.environ.get("KUBECONFIG"), client_configuration=configuration
        )
    # Sized for bursts: creations at a shared slot go out concurrently (design decision 2).
    configuration.connection_pool_maxsize = max_connections
    api_client = client.ApiClient(configuration)
    _skip_environment_lookups(api_client)
    return api_client


def _skip_environment_lookups(api_client: client.ApiClient) -> None:
    """kubernetes_asyncio's session trusts the environment, so aiohttp reads ~/.netrc and the
    proxy variables again on every request, in two worker-thread hops; at a burst of Job
    creations that was a tenth of the operator's CPU. Unless a proxy applies to the API server,
    the same connector goes on in a session that does not look."""
    host = URL(api_client.configuration.host or "")
    proxy = urllib.request.getproxies().get(host.scheme or "https")
    if proxy and not urllib.request.proxy_bypass(host.host or ""):
        return  # honoured per request, as before
    rest = api_client.rest_client
    trusting: aiohttp.ClientSession = rest.pool_manager
    # kubernetes_asyncio's read buffer: a watch event of a large object must fit.
    rest.pool_manager = aiohttp.ClientSession(connector=trusting.connector, read_bufsize=2**21)
    trusting.detach()  # its connector now belongs to the new session


class KubeApi:
    def __init__(self, api_client: client.ApiClient) -> None:
        self._api = api_client

    async def close(self) -> None:
        await self._api.close()

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
        response = await self._send(method, path, query or [], headers, body, request_timeout)
        text = await response.text()
        if not 200 <= response.status <= 299:
            raise ApiError(response.status, response.reason or "", text)
        result: dict[str, Any] = json.loads(text) if text else {}
        return result

    async def stream(
        self, path: str, query: list[tuple[str, str]], request_timeout: float
    ) -> AsyncIterator[bytes]:
        """The lines of a streaming response (a watch), as they arrive."""
        headers = {"Accept": "application/json"}
        response = await self._send("GET", path, query, headers, None, request_timeout)
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
        """Straight to kubernetes_asyncio's REST client, with its credentials (a refreshed
        token, client certificates in its TLS context) but without ApiClient.call_api, whose
        recursive sanitising of a body made for generated models was 40% of a Job creation's
        cost; our bodies are plain JSON already."""
        headers = {**self._api.default_headers, **headers}
        await self._api.update_params_for_auth(headers, query, ["BearerToken"])
        url = f"{self._api.configuration.host}{path}" + (f"?{urlencode(query)}" if query else "")
        response: aiohttp.ClientResponse = await self._api.rest_client.request(
            method, url, headers=headers, body=body, _preload_content=False,
            _request_timeout=request_timeout,
        )  # fmt: skip
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

    async def list_jobs(self, label_selector: str, namespace: str = "") -> dict[str, Any]:
        """From the API server's watch cache (resourceVersion=0): cheap, and fresh enough to seed
        a model that the watch then keeps current. An empty namespace lists all."""
        query = [("labelSelector", label_selector), ("resourceVersion", "0")]
        return await self.request("GET", _path("batch/v1", "jobs", namespace), query=query)

    # ScheduledJobs

    async def list_scheduledjobs(self, namespace: str = "") -> dict[str, Any]:
        query = [("resourceVersion", "0")]
        return await self.request(
            "GET", _path(f"{GROUP}/{VERSION}", PLURAL, namespace), query=query
        )

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
