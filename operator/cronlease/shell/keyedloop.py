"""The keyed loop (decision 0003): every controller in the process runs on one of these.

The semantics are client-go's workqueue: a key waiting to be reconciled is queued once however
often it is added (the dirty set); a key being reconciled is never reconciled twice at once, and
one added meanwhile is reconciled again once it is done (the processing set); a failure is
retried after a per-key backoff that grows while it keeps failing; a key can be added for later
(the wake-up heap, cronlease.shell.wakeups); at most `workers` keys are reconciled at a time
(cronlease.shell.workpool), the rest wait as keys, not tasks.

Two things are ours. A reconcile may leave a second stage (its status writes, say) to a smaller pool
of writers: the key stays in processing until that stage ends too, unless its next wake-up comes
while that stage still waits for a writer and its controller takes the stage into the key's next
reconcile (see `carry`). And the loop runs only while this
replica leads: a standby keeps no wake-up at all (its watches still keep its model warm), and a new
leader derives them from its model, every key `keys()` lists, at once. A controller may also ask to
prepare the keys due within `lead` seconds (the scheduler builds a burst's Job bodies and opens its
connections then: cronlease.core.bodies.preparation); a preparation may only get ready, never act:
the reconcile at the instant decides.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Hashable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from cronlease.shell import backoff, logfields
from cronlease.shell.wakeups import WakeupQueue
from cronlease.shell.workpool import WorkPool

log = logging.getLogger(__name__)
K = TypeVar("K", bound=Hashable)
F = TypeVar("F")
R = TypeVar("R")


class Outcome(enum.Enum):
    DONE = "Done"  # applied in full
    STALE = "Stale"  # decided on an outdated copy; the model now has a fresh one: decide again
    NOT_LEADING = "NotLeading"  # this replica lost the Lease; the new leader takes over
    RETRY = "Retry"  # a write failed; try again after a backoff


@dataclass(frozen=True, slots=True)
class Applied:
    """How one reconcile ended."""

    outcome: Outcome
    wake_at: float | None = None  # DONE: epoch seconds of the next reconcile, if any
    error: str = ""  # RETRY: why
    # RETRY: some of the decision's objects were created before a write failed: progress, under
    # a steady rate of faults, not a failing object (its backoff starts again from the first).
    progress: bool = False


class Leading(Protocol):
    def is_leading(self) -> bool: ...

    async def wait_leading(self) -> None: ...


class KeyedLoop(Generic[K, F]):
    def __init__(
        self,
        name: str,
        wakeups: WakeupQueue[K],
        leadership: Leading,
        reconcile: Callable[[K], Awaitable[Applied | F]],
        workers: int,
        *,
        follow_up: Callable[[F], Awaitable[Applied]] | None = None,
        writers: int = 1,
        keys: Callable[[], Iterable[K]] = tuple,
        ready: Callable[[], Awaitable[None]] | None = None,
        order: Callable[[list[K]], list[K]] = list,
        held: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext,
        retry: backoff.Backoff = backoff.RECONCILE,
        prepare: Callable[[list[tuple[K, float]]], Coroutine[Any, Any, None]] | None = None,
        lead: float = 0.0,
        carry: Callable[[K, F], bool] | None = None,
        wake_of: Callable[[F], float | None] = lambda after: None,
    ) -> None:
        """`reconcile(key)` returns how it ended, or what its second stage, `follow_up`, takes.
        `keys()`: every key a new leader reconciles. `ready()`: awaited before the first
        reconcile of each term (the model's first listings). `order` sorts each batch of keys
        that fall due together. `held` is entered for each worker's life (see WorkPool).
        `prepare(keys)`: run `lead` seconds before keys fall due, with each key's instant; it
        may only get ready (nothing it does may act for a key: the reconcile at the instant
        decides). `carry(key, stage)`: offered a second stage still waiting for a writer when
        its key's next wake-up (`wake_of(stage)`, epoch seconds) comes; True if the controller
        takes it into the key's next reconcile, which then writes it (see _supersede)."""
        self.name = name
        self.wakeups = wakeups
        self._leadership = leadership
        self._reconcile = reconcile
        self._follow_up = follow_up
        self._keys = keys
        self._ready = ready
        self._order = order
        self._retry = retry
        self._workers = WorkPool(workers, self._work, held=held)
        self._writers = WorkPool(writers, self._follow)
        self._queued: set[K] = set()  # the dirty set: waiting for a worker
        self._processing: set[K] = set()  # being reconciled, its second stage included
        self._again: set[K] = set()  # added while processing: reconciled again once done
        self._failures: dict[K, int] = {}
        self._carry, self._wake_of = carry, wake_of
        # Second stages queued for a writer and not yet begun: the reconcile's ID, the stage and
        # the key's next wake-up.
        self._waiting: dict[K, tuple[uuid.UUID, F, float | None]] = {}
        self._dropped: set[uuid.UUID] = set()  # carried into a newer reconcile: writers skip them
        self._superseding: set[K] = set()  # keys whose pending stage carries an earlier one
        self._active = False  # leading, with the wake-ups derived from the model
        self._prepare, self._lead = prepare, lead
        self._prepared_until = 0.0  # the keys planned up to this instant have been prepared
        self._preparing: set[asyncio.Task[None]] = set()

    # Adding keys

    def add(self, key: K) -> None:
        """Reconcile `key` as soon as a worker is free (once, however often it is added)."""
        if key in self._processing:
            if not self._supersede(key):
                self._again.add(key)
        elif key not in self._queued:
            self._queued.add(key)
            self._workers.put(key)

    def _supersede(self, key: K) -> bool:
        """At the key's next wake-up (its next slot), its second stage still waiting for a writer:
        if the controller carries it, the key is reconciled now and that reconcile writes the
        stage with its own. At N=5,000 a burst's follow-ups were still queued when the next slot
        came, and every key behind its own status write created its Job late (design note 126).
        Before that wake-up (the echoes of the key's own creations) the key waits for its stage,
        as any key added while it is processed. A stage that carries an earlier one is kept: a
        key's writes are carried once in a row at most, so they never wait longer than they
        would without carrying, and are never starved."""
        waiting = self._waiting.get(key)
        if self._carry is None or waiting is None or key in self._superseding:
            return False
        reconcile_id, after, wake_at = waiting
        if wake_at is None:  # no next slot: nothing it would wait at
            return False
        if self.wakeups.now() < wake_at:
            # Woken early (one of its Jobs changed): that plan replaced the one at its slot,
            # which is planned again, or the key would wait behind its writes after all.
            self.wakeups.notify(key, wake_at)
            return False
        if not self._carry(key, after):
            return False
        _pop(self._waiting, key)
        self._dropped.add(reconcile_id)
        self._superseding.add(key)
        _discard(self._processing, key)
        _discard(self._again, key)  # the new reconcile is that pass
        self._queued.add(key)
        self._workers.put(key)
        return True

    def in_flight(self, key: K) -> bool:
        return key in self._queued or key in self._processing

    @property
    def active(self) -> bool:
        return self._active

    # The loop

    async def run(self) -> None:
        while True:
            if not self._leadership.is_leading():
                self._stand_by()
                await self._leadership.wait_leading()
            if not self._active:
                if self._ready is not None:
                    await self._ready()
                self._take_over()
            for key in self._order(self.wakeups.pop_due()):
                self.add(key)
            await self.wakeups.wait(self._ahead())

    def _ahead(self) -> float:
        """Start preparing the keys due within `lead` seconds, if not yet done; how long before
        the next due key the loop must wake (to prepare it, or 0 once it is)."""
        if self._prepare is None:
            return 0.0
        head = self.wakeups.next_at()
        if head is None or head <= self._prepared_until:
            return 0.0
        until = self.wakeups.now() + self._lead
        if head > until:
            return self._lead  # wake `lead` seconds before it
        keys = self.wakeups.planned_between(self._prepared_until, until)
        self._prepared_until = until
        task = asyncio.create_task(self._prepare(keys), name=f"{self.name}: prepare")
        self._preparing.add(task)
        task.add_done_callback(self._prepared)
        return 0.0

    def _prepared(self, task: asyncio.Task[None]) -> None:
        self._preparing.discard(task)
        if not task.cancelled() and task.exception() is not None:
            # Only a colder start: the reconciles at the instant do all the work themselves.
            log.error("%s: preparing failed", self.name, exc_info=task.exception())

    def _take_over(self) -> None:
        """A new term: every key the model knows is reconciled now."""
        self.wakeups.resume()
        count = 0
        for key in self._keys():
            self.wakeups.notify(key)
            count += 1
        self._active = True
        log.info("%s: leading; %d keys to reconcile", self.name, count)

    def _stand_by(self) -> None:
        """Not leading: no wake-up is kept (a standby's memory must not grow with what it sees);
        the reconciles in flight end on their own (their writes are refused: not leading)."""
        if self._active:
            log.info("%s: not leading; wake-ups dropped", self.name)
        self.wakeups.pause()
        self._failures.clear()
        self._again.clear()
        self._active = False
        self._prepared_until = 0.0
        for task in self._preparing:
            task.cancel()

    # The workers

    async def _work(self, key: K) -> None:
        _discard(self._queued, key)
        self._processing.add(key)
        reconcile_id = uuid.uuid4()  # as text only in a line that is logged
        with self._about(key, reconcile_id):
            acted = await self._guarded(key, self._reconcile(key))
            if isinstance(acted, Applied):
                self._done(key, acted)
            else:
                if self._carry is not None:
                    wake_at = self._wake_of(acted)
                    self._waiting[key] = (reconcile_id, acted, wake_at)
                    if wake_at is not None:  # the next slot is noticed while its writes wait
                        self.wakeups.notify(key, wake_at)
                self._writers.put((key, acted, reconcile_id))

    async def _follow(self, item: tuple[K, F, uuid.UUID]) -> None:
        key, after, reconcile_id = item
        if reconcile_id in self._dropped:  # carried into a newer reconcile of its key
            _discard(self._dropped, reconcile_id)
            return
        _pop(self._waiting, key)
        assert self._follow_up is not None, "a reconcile left a second stage to nobody"
        with self._about(key, reconcile_id):  # the same reconcile, in a writer's task
            self._done(key, await self._guarded(key, self._follow_up(after)))

    def _about(self, key: K, reconcile_id: uuid.UUID) -> AbstractContextManager[None]:
        """The log fields of a reconcile (cronlease.shell.logfields): this loop, the object of its
        key when the key is one ((namespace, name), as both controllers' are), and its ID."""
        if isinstance(key, tuple) and len(key) == 2 and all(isinstance(k, str) for k in key):
            namespace, name = key
            return logfields.bound(
                controller=self.name, namespace=namespace, name=name, reconcileID=reconcile_id
            )
        return logfields.bound(controller=self.name, reconcileID=reconcile_id)

    async def _guarded(self, key: K, work: Awaitable[R]) -> R | Applied:
        try:
            return await work
        except Exception as error:  # a bug must never stop the loop: back off, log it whole
            log.exception("%s: %r: reconcile failed", self.name, key)
            return Applied(Outcome.RETRY, error=f"{type(error).__name__}: {error}")
        except BaseException:  # cancelled (a stop): no longer in flight
            _discard(self._processing, key)
            _discard(self._superseding, key)
            raise

    def _done(self, key: K, applied: Applied) -> None:
        """The next wake-up of `key`, from how its reconcile ended."""
        _discard(self._processing, key)
        _discard(self._superseding, key)
        again = key in self._again
        _discard(self._again, key)
        if applied.outcome is Outcome.RETRY:
            failures = 0 if applied.progress else self._failures.get(key, 0)
            failures = self._failures[key] = failures + 1
            delay = self._retry.delay(failures)
            log.warning("%s: %r: %s; retrying in %.0f s", self.name, key, applied.error, delay)
            # A floor: changes of its own objects (its own creations among them) wait for it.
            self.wakeups.back_off(key, delay)
        elif applied.outcome is Outcome.DONE:
            self._failures.pop(key, None)
        elif applied.outcome is Outcome.NOT_LEADING:
            log.info("%s: %r: not leading any more; leaving it to the new leader", self.name, key)
        if applied.outcome in (Outcome.STALE, Outcome.NOT_LEADING) or again:
            # STALE: the model holds the fresh copy now. NOT_LEADING: dropped with every other
            # wake-up if the Lease is really gone, else reconciled again.
            self.wakeups.notify(key)
        if applied.wake_at is not None:
            self.wakeups.notify(key, applied.wake_at)

    # Stopping

    async def finish(self, grace: float) -> None:
        """A graceful stop, once run() is cancelled: the reconciles in flight complete their
        writes for up to `grace` seconds while the Lease is still ours."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(grace):
                await self.drain()

    async def drain(self) -> None:
        """Until no reconcile is queued or running, second stages included (tests end here)."""
        await self._workers.drain()  # before the writers: workers hand them their records
        await self._writers.drain()


def _pop(table: dict[K, Any], key: K) -> None:
    """Take `key` out of `table`; emptied, its table is given back as _discard's is."""
    table.pop(key, None)
    if not table:
        table.clear()


def _discard(keys: set[Any], key: Any) -> None:
    """Take `key` out of `keys`. A set never shrinks its table as it empties: one that held a
    burst's 5,000 keys kept 0.5 MB at rest, three per loop. Cleared once empty, it frees it."""
    keys.discard(key)
    if not keys:
        keys.clear()
