"""A fake API server for unit tests of the shell: a `cronlease.shell.kube.Transport` in memory.

It models what the shell relies on, and nothing else:
- objects with uids, resourceVersions (one counter, like etcd's), generations, creation times;
- 409 AlreadyExists on create, 409 Conflict on a stale resourceVersion precondition (PUT, and the
  merge patch's metadata.resourceVersion), 409 on a failed uid precondition of a DELETE, 404;
- LIST in pages (limit/continue) with label selectors, and WATCH from a resourceVersion with
  bookmarks, a 410 ERROR event for a version compacted away, and streams the test can end;
- faults by rule: an error status (a watch's too: method WATCH), a lost response (the server
  acted, the client sees an error), a request held until the test releases it, or its answer
  (the server acted; a late response); and a 401 for a rotated token when served over HTTP (`app`);
- the fencing policy: a labelled Job create or a ScheduledJob status write whose leader and
  token differ from the Lease's holder and leaseTransitions is refused as the real policy does.
Every call, watches included, is logged in `calls` as (method or WATCH, path), and its monotonic
time at the same index of `call_times`, for tests that want the exact conversation.

Where it is simpler than the real thing: a `continue` token is an offset, not a snapshot (pages
shift under concurrent writes); a dry-run create validates nothing (a refused template is an
injected fault). Deletion honours finalizers (a deletionTimestamp until the last one goes) and a
label-selected watch sees an object that stops matching as DELETED, as the real server does; the
strategic merge patch knows only `$deleteFromPrimitiveList`, and a patch's metadata.uid is a
precondition (409).
"""

from __future__ import annotations

import asyncio
import copy
import re
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson
from aiohttp import web

from cronlease.core.names.naming import (
    ANNOTATION_FENCING_TOKEN,
    ANNOTATION_LEADER,
    LABEL_SCHEDULEDJOB,
)
from cronlease.shell.applier import FENCING_MESSAGE
from cronlease.shell.kube import ApiError, Query, TransportError

PATH = re.compile(
    r"^/(?:api|apis)/(?P<gv>v1|[^/]+/[^/]+)(?:/namespaces/(?P<ns>[^/]+))?/(?P<plural>[a-z]+)"
    r"(?:/(?P<name>[^/]+))?(?:/(?P<sub>status))?$"
)
FENCED = {
    ("batch/v1", "jobs"),
    ("cronlease.io/v1alpha1", "scheduledjobs"),
    ("cronlease.io/v1alpha1", "runrequests"),
    ("cronlease.io/v1alpha1", "runs"),
}
FOREGROUND = "foregroundDeletion"
# What the policy reads on a creation (the object's annotations), for these; else the status.
CREATED_FENCED = {("batch/v1", "jobs"), ("cronlease.io/v1alpha1", "runs")}


class ResponseLost(TransportError):
    """The server acted, but the response never reached the client."""


@dataclass
class Fault:
    method: str
    path: str  # a regular expression, searched in the request path
    status: int = 0  # answer with this error instead of acting
    lose: bool = False  # act, then lose the response
    gate: asyncio.Event | None = None  # wait until this is set before acting
    late: bool = False  # with a gate: act first, then wait before answering
    times: int = 1  # how many matching requests it affects
    skip: int = 0  # how many matching requests pass untouched first
    body: str = ""  # a regular expression the request's JSON body must contain
    message: str = "injected fault"

    def matches(self, method: str, path: str, body: Any) -> bool:
        if self.times <= 0 or self.method != method or not re.search(self.path, path):
            return False
        return not self.body or re.search(self.body, orjson.dumps(body).decode()) is not None


@dataclass
class _Watch:
    key: tuple[str, str]  # (group/version, plural)
    namespace: str
    selector: str
    fields: str = ""
    queue: asyncio.Queue[bytes | None] = field(default_factory=asyncio.Queue)


def _status(code: int, reason: str, message: str) -> ApiError:
    body = {"kind": "Status", "status": "Failure", "code": code, "reason": reason}
    return ApiError(code, reason, orjson.dumps({**body, "message": message}).decode())


def _selects(selector: str, obj: dict[str, Any], fields: str = "") -> bool:
    """A label selector's equality terms, and a field selector's `metadata.name=` (the only
    field the operator selects by: its own Lease)."""
    for term in filter(None, fields.split(",")):
        name, _, value = term.partition("=")
        if name != "metadata.name":
            raise _status(400, "BadRequest", f"field selector not modelled: {term}")
        if obj["metadata"].get("name") != value:
            return False
    labels = obj["metadata"].get("labels") or {}
    for term in filter(None, selector.split(",")):
        name, _, value = term.partition("=")
        if name not in labels or (value and labels[name] != value):
            return False
    return True


@dataclass(frozen=True)
class _Change:
    resource: tuple[str, str]
    namespace: str
    event_type: str
    obj: dict[str, Any]
    old: dict[str, Any] | None  # the copy it replaced (MODIFIED)


def _seen_by(watch: _Watch, change: _Change) -> bytes | None:
    """The event line `watch` receives for `change`, if any: a label-selected watch sees an
    object that starts matching as ADDED and one that stops matching as DELETED."""
    if change.resource != watch.key or (watch.namespace and change.namespace != watch.namespace):
        return None
    event_type = change.event_type
    if watch.selector or watch.fields:
        now = _selects(watch.selector, change.obj, watch.fields)
        before = change.old is not None and _selects(watch.selector, change.old, watch.fields)
        if event_type == "MODIFIED" and now != before:
            event_type = "ADDED" if now else "DELETED"
        elif not now:
            return None
    return orjson.dumps({"type": event_type, "object": change.obj}) + b"\n"


def _delete_from_primitive_lists(current: Any, patch: Any) -> Any:
    """The `$deleteFromPrimitiveList/<field>` directives of a strategic merge patch, turned into
    the plain merge patch that sets each such list without the values named."""
    if not isinstance(patch, dict):
        return patch
    result: dict[str, Any] = {}
    current = current if isinstance(current, dict) else {}
    for key, value in patch.items():
        if key.startswith("$deleteFromPrimitiveList/"):
            field_name = key.split("/", 1)[1]
            result[field_name] = [v for v in current.get(field_name) or [] if v not in value]
        else:
            result[key] = _delete_from_primitive_lists(current.get(key), value)
    return result


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


class FakeApiServer:
    def __init__(self, clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.clock = clock
        self.objects: dict[tuple[str, str, str, str], dict[str, Any]] = {}
        self.version = 100
        self.history: list[tuple[int, _Change]] = []
        self.compacted = 0  # watches from a version below this get 410
        self.faults: list[Fault] = []
        self.calls: list[tuple[str, str]] = []  # (method or WATCH, path)
        self.dry_runs: list[str] = []  # the path of each dry-run create that passed the fence
        self.call_times: list[float] = []  # monotonic, one per entry of `calls`
        self.watched_from: list[str] = []  # the resourceVersion of each WATCH request
        self.held = 0  # requests waiting at a `hold` gate
        self.fence: tuple[str, str] | None = None  # (namespace, name) of the fencing Lease
        self.tokens: set[str] | None = None  # bearer tokens `app` accepts (None: any)
        # The garbage collector: with `collecting`, an object deleted in the foreground has no
        # dependents left to wait for (goes at once, finalizers allowing); without, it keeps
        # the foregroundDeletion finalizer until the test calls collect() (its pods stopped).
        self.collecting = True
        self._watches: list[_Watch] = []

    # Test controls

    def fail(
        self, method: str, path: str, status: int, message: str = "", skip: int = 0, times: int = 1
    ) -> None:
        self.faults.append(Fault(method, path, status, message=message, skip=skip, times=times))

    def lose(self, method: str, path: str, skip: int = 0, times: int = 1) -> None:
        self.faults.append(Fault(method, path, lose=True, skip=skip, times=times))

    def hold(
        self, method: str, path: str, gate: asyncio.Event, body: str = "", late: bool = False
    ) -> None:
        """Hold a matching request until `gate` is set: a slow request, under the test's control.
        `late`: the server acts at once and its answer waits (a LIST page read before changes
        that the client then sees first, a create response slower than the watch)."""
        self.faults.append(Fault(method, path, gate=gate, body=body, late=late))

    def compact(self) -> None:
        """Forget the history so far: a watch from an older version gets 410 Gone."""
        self.compacted = self.version
        self.history.clear()

    def end_watches(self) -> None:
        """The server ends every open watch (its timeout, or a restart)."""
        for watch in self._watches:
            watch.queue.put_nowait(None)
        self._watches.clear()

    def bookmark(self) -> None:
        for watch in self._watches:
            event = {
                "type": "BOOKMARK",
                "object": {"metadata": {"resourceVersion": str(self.version)}},
            }
            watch.queue.put_nowait(orjson.dumps(event) + b"\n")

    @property
    def open_watches(self) -> int:
        return len(self._watches)

    def put(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Store an object as a user or another controller would, with no fence or faults."""
        gv, plural = _resource_of(obj)
        metadata = obj["metadata"]
        return self._create((gv, plural), metadata.get("namespace", ""), copy.deepcopy(obj))

    def get(self, gv: str, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        obj = self.objects.get((gv, plural, namespace, name))
        return copy.deepcopy(obj) if obj else None

    def items(self, gv: str, plural: str, namespace: str = "") -> list[dict[str, Any]]:
        return [
            copy.deepcopy(obj)
            for (g, p, ns, _), obj in sorted(self.objects.items())
            if (g, p) == (gv, plural) and (not namespace or ns == namespace)
        ]

    def edit(self, gv: str, plural: str, namespace: str, name: str, patch: dict[str, Any]) -> None:
        """A merge patch by someone else (a user, another controller): no precondition."""
        key = (gv, plural, namespace, name)
        self._store(key, merge_patch(self.objects[key], patch), "MODIFIED")

    def remove(
        self, gv: str, plural: str, namespace: str, name: str, foreground: bool = False
    ) -> None:
        """A deletion by someone else (a user, TTL, the garbage collector)."""
        key = (gv, plural, namespace, name)
        self._delete(key, foreground)

    def collect(self) -> None:
        """The garbage collector finds the dependents of every foreground deletion gone (their
        pods stopped): each such object loses the foregroundDeletion finalizer."""
        for key, obj in list(self.objects.items()):
            finalizers = obj["metadata"].get("finalizers") or []
            if FOREGROUND in finalizers:
                updated = copy.deepcopy(obj)
                updated["metadata"]["finalizers"] = [f for f in finalizers if f != FOREGROUND]
                self._store(key, updated, "MODIFIED")

    # The Transport protocol

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: Query | None = None,
        content_type: str = "application/json",
        request_timeout: float = 30,
    ) -> dict[str, Any]:
        self.calls.append((method, path))
        self.call_times.append(time.monotonic())
        if isinstance(body, bytes):  # serialised beforehand, as the real transport sends it
            body = orjson.loads(body)
        fault = next((f for f in self.faults if f.matches(method, path, body)), None)
        if fault is not None and fault.skip:
            fault.skip -= 1
            fault = None
        if fault is not None:
            fault.times -= 1
            if fault.gate is not None and not fault.late:
                await self._wait(fault.gate)
            if fault.status:
                raise _status(fault.status, "Injected", fault.message or "injected fault")
        result = self._handle(method, path, copy.deepcopy(body), dict(query or []), content_type)
        if fault is not None and fault.lose:
            raise ResponseLost(f"{method} {path}: response lost")
        if fault is not None and fault.gate is not None and fault.late:
            await self._wait(fault.gate)
        await asyncio.sleep(0)  # a real response always yields to the loop
        return result

    async def _wait(self, gate: asyncio.Event) -> None:
        self.held += 1
        await gate.wait()
        self.held -= 1

    async def stream(self, path: str, query: Query, request_timeout: float) -> AsyncIterator[bytes]:
        self.calls.append(("WATCH", path))
        self.call_times.append(time.monotonic())
        fault = next((f for f in self.faults if f.status and f.matches("WATCH", path, None)), None)
        if fault is not None:  # a watch refused (fail("WATCH", ...)): only statuses apply
            fault.times -= 1
            raise _status(fault.status, "Injected", fault.message or "injected fault")
        params = dict(query)
        self.watched_from.append(params.get("resourceVersion", ""))
        match = PATH.match(path)
        if match is None or params.get("watch") != "true":
            raise _status(400, "BadRequest", f"not a watch: {path}")
        since = int(params.get("resourceVersion") or 0)
        key = (match["gv"], match["plural"])
        if since < self.compacted:
            gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}
            yield orjson.dumps(gone) + b"\n"
            return
        selectors = (params.get("labelSelector", ""), params.get("fieldSelector", ""))
        watch = _Watch(key, match["ns"] or "", *selectors)
        for version, change in self.history:
            line = _seen_by(watch, change)
            if version > since and line is not None:
                yield line
        self._watches.append(watch)
        try:
            while (line := await watch.queue.get()) is not None:
                yield line
        finally:
            if watch in self._watches:
                self._watches.remove(watch)

    async def close(self) -> None:
        self.end_watches()

    # Serving over HTTP, for the real HttpTransport (login, 401)

    def app(self) -> web.Application:
        async def handle(request: web.Request) -> web.StreamResponse:
            token = request.headers.get("Authorization", "").removeprefix("Bearer ")
            if self.tokens is not None and token not in self.tokens:
                return web.json_response({"kind": "Status", "code": 401}, status=401)
            body = orjson.loads(await request.read()) if request.can_read_body else None
            try:
                result = await self.request(
                    request.method, request.path, body, list(request.query.items())
                )
            except ApiError as error:
                return web.Response(status=error.status, text=error.body)
            return web.json_response(result)

        application = web.Application()
        application.router.add_route("*", "/{tail:.*}", handle)
        return application

    # The server

    def _handle(
        self,
        method: str,
        path: str,
        body: Any,
        params: dict[str, str],
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        match = PATH.match(path)
        if match is None:
            raise _status(404, "NotFound", f"no route {path}")
        resource = (match["gv"], match["plural"])
        namespace, name, sub = match["ns"] or "", match["name"], match["sub"]
        key = (*resource, namespace, name or "")
        dry_run = params.get("dryRun") == "All"
        if method == "GET" and name:
            if key not in self.objects:
                raise _status(404, "NotFound", f'{match["plural"]} "{name}" not found')
            return copy.deepcopy(self.objects[key])
        if method == "GET":
            return self._list(resource, namespace, params)
        if method == "POST":
            self._check_fence(resource, body, creating=True)
            if dry_run:
                self.dry_runs.append(path)
                return body  # type: ignore[no-any-return]
            return self._create(resource, namespace, body)
        if key not in self.objects:
            raise _status(404, "NotFound", f'{match["plural"]} "{name}" not found')
        current = self.objects[key]
        if method == "DELETE":
            wanted = ((body or {}).get("preconditions") or {}).get("uid")
            if wanted and wanted != current["metadata"]["uid"]:
                raise _status(409, "Conflict", "Precondition failed: UID in precondition")
            self._delete(key, (body or {}).get("propagationPolicy") == "Foreground")
            return {"kind": "Status", "status": "Success"}
        metadata = (body.get("metadata") if isinstance(body, dict) else None) or {}
        expected = metadata.get("resourceVersion")
        if expected and expected != current["metadata"]["resourceVersion"]:
            raise _status(409, "Conflict", "the object has been modified; please apply again")
        if method == "PUT":
            updated = {**body, "metadata": {**body["metadata"], **_server_fields(current)}}
        elif method == "PATCH" and sub == "status":
            updated = {
                **current,
                "status": merge_patch(current.get("status") or {}, body["status"]),
            }
            self._check_fence(resource, updated)  # the policy sees the object as it would be
        elif method == "PATCH" and content_type == "application/json-patch+json":
            updated = _json_patch(current, body)
        elif method == "PATCH":
            wanted_uid = ((body or {}).get("metadata") or {}).get("uid")
            if wanted_uid and wanted_uid != current["metadata"]["uid"]:
                raise _status(409, "Conflict", "Precondition failed: UID in precondition")
            if content_type == "application/strategic-merge-patch+json":
                body = _delete_from_primitive_lists(current, body)
            updated = merge_patch(current, body)
            if updated.get("spec") != current.get("spec"):
                updated["metadata"]["generation"] = current["metadata"].get("generation", 1) + 1
        else:
            raise _status(405, "MethodNotAllowed", method)
        return self._store(key, updated, "MODIFIED")

    def _list(
        self, resource: tuple[str, str], namespace: str, params: dict[str, str]
    ) -> dict[str, Any]:
        selected = [
            obj
            for obj in self.items(*resource, namespace)
            if _selects(params.get("labelSelector", ""), obj, params.get("fieldSelector", ""))
        ]
        start = int(params.get("continue") or 0)
        limit = int(params.get("limit") or 0) or len(selected) or 1
        page = selected[start : start + limit]
        more = start + limit < len(selected)
        metadata = {
            "resourceVersion": str(self.version),
            "continue": str(start + limit) if more else "",
        }
        return {"metadata": metadata, "items": page}

    def _create(
        self, resource: tuple[str, str], namespace: str, obj: dict[str, Any]
    ) -> dict[str, Any]:
        metadata = obj["metadata"]
        key = (*resource, namespace, metadata["name"])
        if key in self.objects:
            raise _status(
                409, "AlreadyExists", f'{resource[1]} "{metadata["name"]}" already exists'
            )
        metadata.update(
            namespace=namespace,
            uid=str(uuid.uuid4()),
            creationTimestamp=self.clock().strftime("%Y-%m-%dT%H:%M:%SZ"),
            generation=1,
        )
        return self._store(key, obj, "ADDED")

    def _store(
        self, key: tuple[str, str, str, str], obj: dict[str, Any], event: str
    ) -> dict[str, Any]:
        metadata = obj["metadata"]
        if metadata.get("deletionTimestamp") and not metadata.get("finalizers"):
            self.objects[key] = obj
            self._delete(key)  # its last finalizer went
            return copy.deepcopy(obj)
        old = self.objects.get(key) if event == "MODIFIED" else None
        self.version += 1
        metadata["resourceVersion"] = str(self.version)
        self.objects[key] = obj
        self._emit(key, event, obj, old)
        return copy.deepcopy(obj)

    def _delete(self, key: tuple[str, str, str, str], foreground: bool = False) -> None:
        obj = self.objects[key]
        finalizers = obj["metadata"].get("finalizers") or []
        deleting = obj["metadata"].get("deletionTimestamp")
        if foreground and not self.collecting and not deleting:
            # As the real API server: only a deletion that starts one gets the foreground
            # finalizer; a propagation cannot be changed once a deletion started.
            obj = copy.deepcopy(obj)
            obj["metadata"]["finalizers"] = [*finalizers, FOREGROUND]
            obj["metadata"]["deletionTimestamp"] = self.clock().strftime("%Y-%m-%dT%H:%M:%SZ")
            self._store(key, obj, "MODIFIED")
            return
        if obj["metadata"].get("finalizers"):
            if not obj["metadata"].get("deletionTimestamp"):
                marked = copy.deepcopy(obj)
                marked["metadata"]["deletionTimestamp"] = self.clock().strftime(
                    "%Y-%m-%dT%H:%M:%SZ"
                )
                self._store(key, marked, "MODIFIED")
            return
        del self.objects[key]
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        self._emit(key, "DELETED", obj)

    def _emit(
        self,
        key: tuple[str, str, str, str],
        event_type: str,
        obj: dict[str, Any],
        old: dict[str, Any] | None = None,
    ) -> None:
        change = _Change((key[0], key[1]), key[2], event_type, copy.deepcopy(obj), old)
        self.history.append((self.version, change))
        for watch in self._watches:
            line = _seen_by(watch, change)
            if line is not None:
                watch.queue.put_nowait(line)

    def _check_fence(
        self, resource: tuple[str, str], obj: dict[str, Any], creating: bool = False
    ) -> None:
        """The fencing policy: a labelled Job's or a Run's annotations at creation, or a
        status's leader and token, must name the Lease's holder and leaseTransitions."""
        if self.fence is None or resource not in FENCED:
            return
        if creating and resource not in CREATED_FENCED:
            return
        if creating:
            labels = obj["metadata"].get("labels") or {}
            if resource[1] == "jobs" and not {LABEL_SCHEDULEDJOB, "cronlease.io/step"} & set(
                labels
            ):
                return
            annotations = obj["metadata"].get("annotations") or {}
            writer = annotations.get(ANNOTATION_LEADER)
            token = annotations.get(ANNOTATION_FENCING_TOKEN)
        else:
            status = obj.get("status") or {}
            writer, token = status.get("leader"), status.get("fencingToken")
        lease = self.objects.get(("coordination.k8s.io/v1", "leases", *self.fence)) or {}
        spec = lease.get("spec") or {}
        if writer != spec.get("holderIdentity") or str(token) != str(
            spec.get("leaseTransitions", 0)
        ):
            raise _status(403, "Forbidden", f"{FENCING_MESSAGE} {writer}/{token} is not the leader")


def _json_patch(current: dict[str, Any], operations: list[dict[str, Any]]) -> dict[str, Any]:
    """A JSON patch of `test`, `remove` and `replace` operations; a failed test is a 422."""
    updated = copy.deepcopy(current)
    for operation in operations:
        *parents, last = [part for part in operation["path"].split("/")[1:]]
        node: Any = updated
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node.get(part)
            if node is None:
                raise _status(422, "Invalid", f"no path {operation['path']}")
        index: Any = int(last) if isinstance(node, list) else last
        present = index < len(node) if isinstance(node, list) else index in node
        if operation["op"] == "test":
            if not present or node[index] != operation["value"]:
                raise _status(422, "Invalid", f"test of {operation['path']} failed")
        elif operation["op"] == "remove":
            if not present:
                raise _status(422, "Invalid", f"no path {operation['path']}")
            del node[index]
        elif operation["op"] == "replace":
            node[index] = operation["value"]
        else:
            raise _status(422, "Invalid", f"unsupported op {operation['op']}")
    return updated


def _server_fields(current: dict[str, Any]) -> dict[str, Any]:
    metadata = current["metadata"]
    return {
        name: metadata[name]
        for name in ("uid", "creationTimestamp", "generation")
        if name in metadata
    }


def _resource_of(obj: dict[str, Any]) -> tuple[str, str]:
    plural = {
        "Job": "jobs",
        "ScheduledJob": "scheduledjobs",
        "RunRequest": "runrequests",
        "Run": "runs",
        "Lease": "leases",
        "Event": "events",
    }
    return obj["apiVersion"], plural[obj["kind"]]
