"""The Lease elector on a thread and event loop of its own, with its own connections.

A burst keeps the operator's event loop busy for seconds: building and sending thousands of
Jobs, reading their events. An elector on that loop renews only when the loop gets to it, so a
short lease flapped under a burst (a 4 s lease at N=5,000, issue 34). On its own thread the
elector needs only the interpreter's lock, which a busy thread hands over every switch interval
(5 ms), and its requests never queue behind the burst's for a connection.

The thread also watches the Lease (one object, by a field selector), so that a standby sees a
release at once and dates each renewal as it happens
(cronlease.shell.leadership.LeaseElector.observe).

The operator's loop reads leadership as it always did: `is_leading()` and `token` are plain
reads of the elector's state; `verify()` and `release()` run on the elector's loop and are
awaited from the caller's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from cronlease.shell.kube import LEASES, KubeApi, resource_path
from cronlease.shell.leadership import ElectionConfig, LeaseElector
from cronlease.shell.listwatch import ListWatch

log = logging.getLogger(__name__)

T = TypeVar("T")


class _LeaseObserver:
    """What the Lease's list-then-watch reports, passed to the elector."""

    def __init__(self, elector: LeaseElector) -> None:
        self.elector = elector
        self.found = False

    def listed_item(self, obj: dict[str, Any]) -> None:
        self.found = True
        self.elector.observe(obj)

    def listed(self, version: str) -> None:
        if not self.found:
            self.elector.observe(None)  # no Lease: the first to create it leads
        self.found = False

    def changed(self, event_type: str, obj: dict[str, Any]) -> None:
        self.elector.observe(None if event_type == "DELETED" else obj)

    def failed(self, error: Exception) -> None:
        """The elector polls the Lease anyway; the watch only makes it quicker."""


def lease_watch(api: KubeApi, elector: LeaseElector) -> ListWatch:
    """A list-then-watch of the elector's Lease alone, reporting to `elector.observe`."""
    config = elector.config
    query = [("fieldSelector", f"metadata.name={config.lease_name}")]
    return ListWatch(api, resource_path(LEASES, config.namespace), _LeaseObserver(elector), query)


class ThreadedElector:
    """`Leadership` by a LeaseElector that runs on its own thread (see the module's text)."""

    def __init__(
        self,
        connect: Callable[[], KubeApi],
        identity: str,
        config: ElectionConfig,
        watch: bool = True,
    ) -> None:
        """`connect()` is called on the elector's thread: a connection belongs to one loop."""
        self.identity = identity
        self.config = config
        self._connect = connect
        self._watch = watch
        self._elector: LeaseElector | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop = asyncio.Event()  # made again on the elector's loop, set from release()
        self._caller: asyncio.AbstractEventLoop | None = None
        self._changed: asyncio.Event | None = None  # on the caller's loop
        self._ended: asyncio.Future[None] | None = None
        self._released = False

    # The Leadership interface, from the operator's loop

    @property
    def token(self) -> int:
        return -1 if self._elector is None else self._elector.token

    def is_leading(self) -> bool:
        return self._elector is not None and not self._released and self._elector.is_leading()

    async def wait_leading(self) -> None:
        changed = self._changes()
        while not self.is_leading():
            changed.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.config.retry_period):
                    await changed.wait()

    async def verify(self) -> bool:
        if self._elector is None or self._loop is None:
            return False
        return await self._on_elector_loop(self._elector.verify(), False)

    async def run(self) -> None:
        """Start the elector's thread and wait for it to end (after release(), or a failure)."""
        self._caller = asyncio.get_running_loop()
        self._changes()
        self._ended = self._caller.create_future()
        thread = threading.Thread(target=self._serve, name="lease-elector", daemon=True)
        thread.start()
        await asyncio.shield(self._ended)

    async def release(self) -> None:
        """Stop acting now; the elector's thread gives the Lease up and ends: wait for that."""
        self._released = True
        if self._loop is not None:  # else the thread, once up, sees _released itself
            with contextlib.suppress(RuntimeError):  # its loop has ended already
                self._loop.call_soon_threadsafe(self._stop.set)
        if self._ended is not None:
            with contextlib.suppress(Exception):  # a failure is run()'s to report
                await asyncio.shield(self._ended)

    # The elector's thread

    def _serve(self) -> None:
        error: BaseException | None = None
        try:
            asyncio.run(self._elect())
        except BaseException as failure:  # handed to run(): the process must not go on blind
            error = failure
        if self._caller is not None and not self._caller.is_closed():
            self._caller.call_soon_threadsafe(self._end, error)

    async def _elect(self) -> None:
        api = self._connect()
        elector = LeaseElector(api, self.identity, self.config, on_change=self._notify)
        self._stop = asyncio.Event()
        self._elector, self._loop = elector, asyncio.get_running_loop()
        if self._released:  # release() came before this loop was up
            self._stop.set()
        tasks = [asyncio.create_task(elector.run(), name="election")]
        if self._watch:
            tasks.append(asyncio.create_task(lease_watch(api, elector).run(), name="lease watch"))
        tasks.append(asyncio.create_task(self._stopped(), name="stop"))
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in tasks:
                if task.done():
                    task.result()  # the election and the watch never end on their own: raise
            # Stops the election (after any Lease write in flight), then gives the Lease up.
            await elector.release()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await api.close()

    async def _stopped(self) -> None:
        await self._stop.wait()

    # Between the two loops

    def _changes(self) -> asyncio.Event:
        if self._changed is None:
            self._changed = asyncio.Event()
        return self._changed

    def _notify(self) -> None:
        """Leadership changed (on the elector's loop): wake whoever waits on the caller's."""
        if self._caller is not None and not self._caller.is_closed():
            self._caller.call_soon_threadsafe(self._changes().set)

    def _end(self, error: BaseException | None) -> None:
        if self._ended is None or self._ended.done():
            return
        if error is None:
            self._ended.set_result(None)
        else:
            self._ended.set_exception(error)

    async def _on_elector_loop(self, work: Coroutine[Any, Any, T], ended: T) -> T:
        """`work` run on the elector's loop, awaited here; `ended` if that loop is gone."""
        assert self._loop is not None
        try:
            future = asyncio.run_coroutine_threadsafe(work, self._loop)
        except RuntimeError:  # the elector's loop has ended: nothing left to do there
            work.close()
            return ended
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if future.cancelled() and current is not None and not current.cancelling():
                return ended  # the elector's loop ended under it, not a cancel of ours
            raise
