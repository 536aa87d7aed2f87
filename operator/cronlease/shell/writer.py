"""The one writer (decision 0003): every write the leader makes, for every controller.

Each verb checks that this replica still leads, retries a refusal of the fencing policy while the
Lease is still ours (the policy's cache lags a takeover by milliseconds) and steps down when it is
not, and reads what the API server answered through one table, MEANINGS: what each status of
each verb means. The Applier (slots, RunRequests) and the Supervisor (multi-step runs) write
through it; neither reads a status code of its own.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from cronlease.shell import backoff, metrics
from cronlease.shell.kube import JOBS, LEASES, RUNS, ApiError, KubeApi, TransportError
from cronlease.shell.leadership import Leadership

log = logging.getLogger(__name__)
T = TypeVar("T")

# The fencing policy's refusals start with this (templates/fencing.yaml, messageExpression).
FENCING_MESSAGE = "cronlease fencing:"
# ...and a refusal of the writer itself (not the release's ServiceAccount) has this in it.
FENCING_WRONG_WRITER = '" may not'
# Retries of a write refused as stale while we still hold the Lease (the policy's cache lags).
FENCING_RETRIES = 6


class Verb(enum.Enum):
    CREATE = "create"
    DELETE = "delete"
    RELEASE = "release"  # remove our finalizer
    LABEL = "label"
    STATUS = "status"  # a status patch conditional on the resourceVersion decided on


class Meaning(enum.Enum):
    GONE = "Gone"  # the object is not there, or another under its name now: nothing to do
    EXISTS = "Exists"  # a create met an object of that name: whose it is, the caller reads
    CONFLICT = "Conflict"  # decided on an outdated copy: read again, decide again
    INVALID = "Invalid"  # the object as it is will never be taken: retrying cannot help
    FORBIDDEN = "Forbidden"  # refused (a quota, a webhook, RBAC): may pass later, may not
    TERMINATING = "Terminating"  # its namespace is being deleted: nothing can be created
    RETRY = "Retry"  # throttled, a server error, a timeout: retried after a backoff


# What each API status means for each verb; anything not listed is RETRY. A DELETE, a release
# and a label carry the uid as a precondition: 409 means another object holds the name now.
# A release's 422 is its JSON patch's failed test: the finalizer is gone already.
MEANINGS: dict[tuple[Verb, int], Meaning] = {
    (Verb.CREATE, 400): Meaning.INVALID,
    (Verb.CREATE, 403): Meaning.FORBIDDEN,
    (Verb.CREATE, 409): Meaning.EXISTS,
    (Verb.CREATE, 422): Meaning.INVALID,
    (Verb.DELETE, 404): Meaning.GONE,
    (Verb.DELETE, 409): Meaning.GONE,
    (Verb.RELEASE, 404): Meaning.GONE,
    (Verb.RELEASE, 409): Meaning.GONE,
    (Verb.RELEASE, 422): Meaning.GONE,
    (Verb.LABEL, 404): Meaning.GONE,
    (Verb.LABEL, 409): Meaning.GONE,
    (Verb.STATUS, 404): Meaning.GONE,
    (Verb.STATUS, 409): Meaning.CONFLICT,
}


def meaning(verb: Verb, error: ApiError) -> Meaning:
    if error.status == 403 and "NamespaceTerminating" in error.body:
        return Meaning.TERMINATING
    return MEANINGS.get((verb, error.status), Meaning.RETRY)


def is_fencing_refusal(error: ApiError) -> bool:
    return error.status in (400, 403, 422) and FENCING_MESSAGE in error.body


class NotLeading(Exception):
    """Raised before a write when this replica no longer holds the Lease (client-side fence)."""


class RetryLater(Exception):
    """A write failed; the object is retried with backoff."""

    def __init__(self, message: str, progress: bool = False) -> None:
        super().__init__(message)
        self.progress = progress


class Stale(Exception):
    """The decision was made on an outdated copy of the object."""


class NamespaceTerminating(Exception):
    """The namespace is being deleted: nothing can be created in it, and what lives in it goes
    with it. Not an error to retry or report once per attempt."""


class Exists(Exception):
    """A create met an object of that name (ours from an earlier attempt, or anyone's)."""


class Refused(Exception):
    """The API server refused to create the object: `invalid` if it never will as it is (a
    template it rejects), else forbidden (a full ResourceQuota, a webhook, missing RBAC)."""

    def __init__(self, message: str, invalid: bool) -> None:
        super().__init__(message)
        self.invalid = invalid


class Writer:
    def __init__(self, api: KubeApi, leadership: Leadership) -> None:
        self.api, self.leadership = api, leadership

    def check_leading(self) -> None:
        if not self.leadership.is_leading():
            metrics.rejected_writes.inc()
            raise NotLeading()

    async def fenced(self, write: Callable[[], Awaitable[T]]) -> T:
        """Run one write; if the API server refuses it as stale, ask the Lease who leads: step
        down if it is somebody else, else retry (right after a takeover the policy lags)."""
        for attempt in range(1, FENCING_RETRIES + 1):
            self.check_leading()
            try:
                return await write()
            except ApiError as error:
                if not is_fencing_refusal(error):
                    raise
                if FENCING_WRONG_WRITER in error.body:  # no retry or takeover can help
                    log.error("the fencing policy refuses this operator's identity: %s", error)
                    why = f"not the release's ServiceAccount: {error.message}"
                    raise RetryLater(why) from error
                metrics.rejected_writes.inc()
                log.warning("write refused by the fencing policy: %s", error.message)
                if not await self.leadership.verify():
                    raise NotLeading() from error
                await asyncio.sleep(backoff.FENCING.delay(attempt))
        raise RetryLater("writes still refused as stale although we hold the Lease")

    async def _write(self, verb: Verb, what: str, write: Callable[[], Awaitable[T]]) -> T | None:
        """`write`, fenced; None if MEANINGS says the object is gone. Every other meaning but
        success is raised: Exists, Stale, Refused, NamespaceTerminating, RetryLater."""
        try:
            return await self.fenced(write)
        except ApiError as error:
            found = meaning(verb, error)
            if found is Meaning.GONE:
                return None
            if found is Meaning.EXISTS:
                raise Exists(what) from error
            if found is Meaning.CONFLICT:
                raise Stale() from error
            if found is Meaning.TERMINATING:
                raise NamespaceTerminating() from error
            if found in (Meaning.INVALID, Meaning.FORBIDDEN):
                raise Refused(error.message, invalid=found is Meaning.INVALID) from error
            metrics.reconcile_errors.labels(verb.value).inc()
            raise RetryLater(f"{verb.value} {what}: {error}") from error
        except TransportError as error:
            metrics.reconcile_errors.labels(verb.value).inc()
            raise RetryLater(f"{verb.value} {what}: {error}") from error

    # The verbs

    async def create(
        self, resource: tuple[str, str], obj: dict[str, Any], body: bytes | None = None
    ) -> dict[str, Any]:
        """The object as created. Exists, Refused or NamespaceTerminating if not. `body`: a Job
        serialised beforehand, sent instead of `obj` (which then only names it)."""
        create: dict[tuple[str, str], Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]] = {
            JOBS: lambda job: self.api.create_job(job, body=body),
            RUNS: self.api.create_run,
            LEASES: self.api.create_lease,
        }
        assert body is None or resource == JOBS, "only Jobs are prepared"
        what = f"{obj.get('kind', resource[1])} {obj['metadata']['name']}"
        created = await self._write(Verb.CREATE, what, lambda: create[resource](obj))
        assert created is not None  # a create is never GONE
        return created

    async def delete(
        self,
        resource: tuple[str, str],
        namespace: str,
        name: str,
        uid: str,
        foreground: bool = False,
    ) -> bool:
        """Delete the object if it is still the one with `uid`; False if it was gone."""

        async def delete() -> bool:
            if resource == LEASES:
                await self.api.delete_lease(namespace, name, uid)
            elif resource == RUNS:
                await self.api.delete_run(namespace, name, uid, foreground)
            else:
                await self.api.delete_job(namespace, name, uid, foreground)
            return True

        done = await self._write(Verb.DELETE, f"{resource[1]} {name}", delete)
        return done is not None

    async def release(
        self, resource: tuple[str, str], namespace: str, name: str, uid: str, finalizer: str
    ) -> None:
        """Remove our `finalizer` from the object with `uid` (nothing if it is gone)."""
        release = self.api.release_run if resource == RUNS else self.api.release_job
        await self._write(
            Verb.RELEASE, f"{resource[1]} {name}", lambda: release(namespace, name, uid, finalizer)
        )

    async def label(
        self, resource: tuple[str, str], namespace: str, name: str, uid: str, labels: dict[str, str]
    ) -> dict[str, Any] | None:
        """The object as labelled, or None if it is gone."""
        label = self.api.label_run if resource == RUNS else self.api.label_job
        return await self._write(
            Verb.LABEL, f"{resource[1]} {name}", lambda: label(namespace, name, uid, labels)
        )

    async def patch_status(
        self,
        resource: tuple[str, str],
        namespace: str,
        name: str,
        patch: dict[str, Any],
        version: str,
    ) -> dict[str, Any] | None:
        """The object as updated; None if it is gone; Stale if it changed since `version`."""
        return await self._write(
            Verb.STATUS,
            f"{resource[1]} {name} status",
            lambda: self.api.patch_status(namespace, name, patch, version, resource),
        )
