"""The thin shell to the API server: the official `kubernetes` client, so that every kubeconfig
works (exec plugins, cloud logins, client certificates, in-cluster). The only module of the
plugin that imports it. Objects come back as the API server's JSON (plain dicts, camelCase),
which the pure modules read; every API error becomes one line (`PluginError`)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from urllib3 import HTTPHeaderDict, Timeout
from urllib3.exceptions import HTTPError

from cronlease.core.names.naming import GROUP, PLURAL, REQUEST_PLURAL, VERSION
from cronlease.core.names.serverdate import ServerDate
from cronlease.kubectl.errors import PluginError
from cronlease.kubectl.impersonation import Impersonation

T = TypeVar("T")


class Api:
    def __init__(
        self,
        kubeconfig: str | None,
        context: str | None,
        impersonate: Impersonation | None = None,
        timeout: float | None = None,
    ) -> None:
        try:
            api_client = config.new_client_from_config(config_file=kubeconfig, context=context)
            self.default_namespace = _context_namespace(kubeconfig, context)
        except (ConfigException, OSError, TypeError, ValueError) as kube_error:
            if kubeconfig or context:
                raise PluginError(f"cannot load the kubeconfig: {kube_error}") from None
            try:
                config.load_incluster_config()
            except ConfigException:
                raise PluginError(f"cannot load the kubeconfig: {kube_error}") from None
            api_client = client.ApiClient()
            self.default_namespace = _in_cluster_namespace()
        _on_every_request(api_client, impersonate, timeout)
        self.custom = client.CustomObjectsApi(api_client)
        self.batch = client.BatchV1Api(api_client)
        self.core = client.CoreV1Api(api_client)
        self.coordination = client.CoordinationV1Api(api_client)
        self.clock = ServerDate(time.monotonic)

    def server_now(self) -> datetime | None:
        """The API server's time, from the Date of its latest answer; None before any."""
        return self.clock.server_now()

    # --- ScheduledJobs and RunRequests ---------------------------------------------------------

    def scheduled_job(self, namespace: str, name: str) -> dict[str, Any]:
        return self._call(
            lambda: self.custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name, _preload_content=False
            ),
            f"scheduledjob {name!r} in namespace {namespace!r}",
        )

    def scheduled_jobs(self, namespace: str | None, selector: str = "") -> list[dict[str, Any]]:
        if namespace is None:
            call = lambda: self.custom.list_cluster_custom_object(  # noqa: E731
                GROUP, VERSION, PLURAL, label_selector=selector, _preload_content=False
            )
        else:
            call = lambda: self.custom.list_namespaced_custom_object(  # noqa: E731
                GROUP, VERSION, namespace, PLURAL, label_selector=selector, _preload_content=False
            )
        return _items(self._call(call, "scheduledjobs"))

    def patch_scheduled_job(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        """A JSON merge patch (the client's choice for custom objects): null removes a key."""
        self._call(
            lambda: self.custom.patch_namespaced_custom_object(
                GROUP,
                VERSION,
                namespace,
                PLURAL,
                name,
                patch,
                _preload_content=False,
            ),
            f"scheduledjob {name!r} in namespace {namespace!r}",
        )

    def create_scheduled_job(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._call(
            lambda: self.custom.create_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, body, _preload_content=False
            ),
            f"scheduledjob {body['metadata'].get('name')!r}",
        )

    def create_request(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._call(
            lambda: self.custom.create_namespaced_custom_object(
                GROUP, VERSION, namespace, REQUEST_PLURAL, body, _preload_content=False
            ),
            "runrequest",
        )

    def request(self, namespace: str, name: str) -> dict[str, Any]:
        return self._call(
            lambda: self.custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, REQUEST_PLURAL, name, _preload_content=False
            ),
            f"runrequest {name!r} in namespace {namespace!r}",
        )

    # --- Jobs, CronJobs, Events, Leases, Pods --------------------------------------------------

    def job(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._maybe(
            lambda: self.batch.read_namespaced_job(name, namespace, _preload_content=False),
            f"job {name!r}",
        )

    def jobs(self, namespace: str | None, selector: str = "") -> list[dict[str, Any]]:
        if namespace is None:
            call = lambda: self.batch.list_job_for_all_namespaces(  # noqa: E731
                label_selector=selector, _preload_content=False
            )
        else:
            call = lambda: self.batch.list_namespaced_job(  # noqa: E731
                namespace, label_selector=selector, _preload_content=False
            )
        return _items(self._call(call, "jobs"))

    def cronjob(self, namespace: str, name: str) -> dict[str, Any]:
        return self._call(
            lambda: self.batch.read_namespaced_cron_job(name, namespace, _preload_content=False),
            f"cronjob {name!r} in namespace {namespace!r}",
        )

    def cronjobs(self, namespace: str) -> list[dict[str, Any]]:
        return _items(
            self._call(
                lambda: self.batch.list_namespaced_cron_job(namespace, _preload_content=False),
                "cronjobs",
            )
        )

    def namespaces(self) -> list[dict[str, Any]]:
        return _items(
            self._call(lambda: self.core.list_namespace(_preload_content=False), "namespaces")
        )

    def patch_cronjob(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """A strategic merge patch (the client's choice for a dict body on a built-in kind)."""
        return self._call(
            lambda: self.batch.patch_namespaced_cron_job(
                name, namespace, patch, _preload_content=False
            ),
            f"cronjob {name!r} in namespace {namespace!r}",
        )

    def events(self, namespace: str | None, field_selector: str = "") -> list[dict[str, Any]]:
        if namespace is None:
            call = lambda: self.core.list_event_for_all_namespaces(  # noqa: E731
                field_selector=field_selector, _preload_content=False
            )
        else:
            call = lambda: self.core.list_namespaced_event(  # noqa: E731
                namespace, field_selector=field_selector, _preload_content=False
            )
        return _items(self._call(call, "events"))

    def lease(self, namespace: str, name: str) -> dict[str, Any]:
        return self._call(
            lambda: self.coordination.read_namespaced_lease(
                name, namespace, _preload_content=False
            ),
            f"lease {name!r} in namespace {namespace!r}",
        )

    def pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        return _items(
            self._call(
                lambda: self.core.list_namespaced_pod(
                    namespace, label_selector=selector, _preload_content=False
                ),
                "pods",
            )
        )

    # --- errors --------------------------------------------------------------------------------

    def _call(self, call: Callable[[], Any], what: str) -> dict[str, Any]:
        try:
            response = call()
        except ApiException as error:
            self.clock.observe((error.headers or {}).get("Date"))  # an error is an answer too
            raise PluginError(_api_message(error, what)) from None
        except HTTPError as error:
            raise PluginError(f"cannot reach the API server: {error}") from None
        self.clock.observe(response.headers.get("Date"))
        data = json.loads(response.data)
        if not isinstance(data, dict):
            raise PluginError(f"unexpected answer for {what}")
        return data

    def _maybe(self, call: Callable[[], Any], what: str) -> dict[str, Any] | None:
        try:
            return self._call(call, what)
        except PluginError as error:
            if str(error).endswith("not found"):
                return None
            raise


def _on_every_request(api_client: Any, who: Impersonation | None, timeout: float | None) -> None:
    """What the client has no setting for, added where its requests leave, on urllib3's pool.

    kubectl's --as, --as-group, --as-uid: the API server's impersonation headers. The client's
    default headers hold one value per name, while each group is a header line of its own (a
    comma-joined line would be one group named "a,b").

    `timeout`, on each connect and each read, with no retry (a completion must not hang a shell).
    The client passes `timeout=None` on every request it makes without `_request_timeout`, and
    urllib3 reads an explicit None as no timeout at all, overriding the pool's own setting: so
    the None is replaced here, request by request."""
    if who is None and timeout is None:
        return
    pool = api_client.rest_client.pool_manager
    send = pool.request
    bound = None if timeout is None else Timeout(connect=timeout, read=timeout)

    def request(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if who is not None:
            headers = HTTPHeaderDict(kwargs.pop("headers", None) or {})
            headers["Impersonate-User"] = who.user
            for group in who.groups:
                headers.add("Impersonate-Group", group)
            if who.uid:
                headers["Impersonate-Uid"] = who.uid
            kwargs["headers"] = headers
        if bound is not None:
            if kwargs.get("timeout") is None:
                kwargs["timeout"] = bound
            kwargs.setdefault("retries", False)
        return send(method, url, *args, **kwargs)

    pool.request = request


def _items(listing: dict[str, Any]) -> list[dict[str, Any]]:
    items = listing.get("items")
    return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []


def _api_message(error: ApiException, what: str) -> str:
    if error.status == 404:
        return f"{what} not found"
    try:
        message = json.loads(error.body).get("message") or error.reason
    except (TypeError, ValueError, AttributeError):
        message = error.reason
    return f"{what}: {message} ({error.status})"


def _context_namespace(kubeconfig: str | None, context: str | None) -> str:
    contexts, active = config.list_kube_config_contexts(config_file=kubeconfig)
    chosen = next((c for c in contexts if c.get("name") == context), None) if context else active
    namespace = (chosen or {}).get("context", {}).get("namespace")
    return namespace if isinstance(namespace, str) and namespace else "default"


def contexts(kubeconfig: str | None) -> list[str]:
    """The kubeconfig's context names (for completing --context)."""
    try:
        found, _ = config.list_kube_config_contexts(config_file=kubeconfig)
    except (ConfigException, OSError, TypeError, ValueError) as error:
        raise PluginError(f"cannot load the kubeconfig: {error}") from None
    return sorted(c["name"] for c in found if isinstance(c.get("name"), str))


def _in_cluster_namespace() -> str:
    try:
        with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace") as file:
            return file.read().strip() or "default"
    except OSError:
        return "default"
