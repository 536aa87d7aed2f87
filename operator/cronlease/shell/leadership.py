"""Who may act. Every write carries the holder and fencing token of the leadership it acts under.

`Leadership` is what the scheduler and the applier depend on. Two implementations:
- `SoleLeader`: one replica without election (development, single-replica installs), token 0;
- `LeaseElector`: our own elector on a coordination.k8s.io/v1 Lease, with leaseTransitions as the
  fencing token (kubernetes_asyncio's LeaseLock never increments it and trusts the wall clock):
  - acquire and renew are optimistic (resourceVersion); a 409 means someone else wrote: re-read;
  - a leader renews with one PUT of the Lease as its last write returned it (client-go's fast
    path), not a GET and a PUT: under a burst each round trip can take a second, and the renew
    deadline allows two or three of them; a 409 or 404 sends it back to a read at once;
  - rounds start a retry period after the start of the previous one, not after its end, so a
    slow renewal does not push the next one toward the deadline;
  - leaseTransitions goes up whenever the holder changes, and is this leader's token; a new
    token is above every token this replica has seen on the Lease, so deleting and recreating
    the Lease (which starts it again at 0) never hands out a token that was used before, as long
    as one running replica saw it;
  - expiry of somebody else's lease is judged on OUR monotonic clock, from the moment our read
    of its current renewTime came back (clocks of two machines are never compared);
  - we stop acting once renew_deadline has passed since the start of our last successful renew,
    which is before the lease can expire for anyone else (renew_deadline < lease_duration);
  - release() empties holderIdentity, and a standby that watches the Lease takes over at once;
  - a standby that watches the Lease dates each renewal when its event arrives and tries again
    the moment that renewal expires, not at its next retry: a SIGKILLed leader is replaced one
    lease duration after its last renewal;
  - the Lease is input anyone with RBAC on Leases can write: every field is read totally, and a
    bad value is logged once and replaced by a safe one, never raised.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import reprlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple, Protocol

from cronlease.shell import metrics
from cronlease.shell.kube import ApiError, KubeApi, TransportError

log = logging.getLogger(__name__)

INT32_MAX = 2**31 - 1  # leaseDurationSeconds and leaseTransitions are int32 in the Lease API

# Somebody else's leaseDurationSeconds counts for at most this many of our own lease durations.
# Its expiry is judged by that number on our clock, so a Lease pre-created with 10^9 s (or a
# garbage value from a script) would otherwise keep every replica out for decades once its holder
# is gone. Our own replicas run with the same flags, so ten times ours leaves room for a rolling
# change of --lease-duration; a change by more than that could let a standby take over before
# the old leader's renew deadline, and then only the fencing policy stops the old leader's writes.
FOREIGN_DURATION_FACTOR = 10


class Leadership(Protocol):
    identity: str

    @property
    def token(self) -> int: ...

    def is_leading(self) -> bool: ...

    async def wait_leading(self) -> None: ...

    async def verify(self) -> bool:
        """Re-check with the API server after a write was refused as stale."""
        ...

    async def run(self) -> None:
        """Take part in the election until released (for ever, unless cancelled)."""
        ...

    async def release(self) -> None:
        """Stop acting, and let another replica lead at once."""
        ...


class SoleLeader:
    """Always the leader, with token 0: there is nobody to fence against."""

    def __init__(self, identity: str) -> None:
        self.identity = identity
        self._released = asyncio.Event()

    @property
    def token(self) -> int:
        return 0

    def is_leading(self) -> bool:
        return not self._released.is_set()

    async def wait_leading(self) -> None:
        if self._released.is_set():  # never again: a loop that waits must not spin
            await asyncio.get_running_loop().create_future()
        await asyncio.sleep(0)

    async def verify(self) -> bool:
        return self.is_leading()

    async def run(self) -> None:
        await self._released.wait()

    async def release(self) -> None:
        self._released.set()


@dataclass(frozen=True)
class ElectionConfig:
    namespace: str
    lease_name: str = "cronlease-leader"
    # Short: the fence, not the lease, keeps a deposed leader's writes out (the API server refuses
    # them whatever its clock says), so the lease bounds only how soon a successor takes over.
    # The renew deadline leaves a renewal (a GET and a PUT) 2 s beyond its retry period; under
    # a 5,000-Job burst the slowest took far less (docs/scaling.md, "Failover").
    lease_duration: float = 4.0
    renew_deadline: float = 3.0
    retry_period: float = 1.0

    def __post_init__(self) -> None:
        timings = (self.lease_duration, self.renew_deadline, self.retry_period)
        if not all(math.isfinite(seconds) for seconds in timings):
            raise ValueError("election timings must be finite numbers of seconds")
        if not 0 < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError("need 0 < retry period < renew deadline < lease duration")
        # Standbys go by what the Lease says, so the renew deadline must be shorter than the
        # duration on the wire too (true after ceil(), checked for whoever changes it).
        if not self.renew_deadline < self.lease_seconds <= INT32_MAX:
            raise ValueError("need renew deadline < lease duration in whole seconds < 2^31")

    @property
    def lease_seconds(self) -> int:
        """leaseDurationSeconds as we write it: rounded UP, since a longer lease only makes
        standbys wait longer, while round() could make it the renew deadline or less (10.4 s
        with a 10 s deadline was written as 10)."""
        return math.ceil(self.lease_duration)


def _micro_time(instant: datetime) -> str:
    return instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class _LeaseSpec(NamedTuple):
    """What the elector reads from a Lease, every field checked."""

    holder: str  # "" when nobody holds it
    renew_time: str  # compared for change only, never parsed as a time
    duration: float  # seconds, positive and capped
    transitions: int | None  # None: not a valid count (it is then no token anybody acts under)


class LeaseElector:
    """Leadership on a Lease, for replicas that elect one of them."""

    def __init__(
        self,
        api: KubeApi,
        identity: str,
        config: ElectionConfig,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[], None] = lambda: None,
    ) -> None:
        """`on_change` is called whenever leadership is gained or lost (from the elector's own
        event loop, which may not be the caller's)."""
        self.api = api
        self.identity = identity
        self.config = config
        self._clock = clock
        self._on_change = on_change
        self._token = -1
        self._renewed_at: float | None = None  # monotonic start of our last successful write
        self._written: dict[str, Any] | None = None  # the Lease as our last write returned it
        self._observed: tuple[str, str] | None = None  # (holder, renewTime) of someone else
        self._observed_at = 0.0
        self._observed_duration = config.lease_duration
        self._deadline: asyncio.TimerHandle | None = None  # our renew deadline, to step down
        self._max_token = -1  # the highest token seen on the Lease (or written by us)
        self._warned: set[tuple[str, str]] = set()  # (field, value) of bad Lease fields logged
        self._changed = asyncio.Event()  # leadership gained or lost
        self._poke = asyncio.Event()  # re-read the Lease now
        self._stopped = False
        self._loop_task: asyncio.Task[None] | None = None

    # The Leadership interface

    @property
    def token(self) -> int:
        return self._token

    def is_leading(self) -> bool:
        if self._renewed_at is None:
            return False
        return self._clock() - self._renewed_at < self.config.renew_deadline

    async def wait_leading(self) -> None:
        while not self.is_leading():
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.config.retry_period):
                    await self._changed.wait()

    async def verify(self) -> bool:
        """After the API server refused a write as stale: do we really still hold the Lease?

        Right after a takeover the fencing policy can still see the previous Lease for a few
        milliseconds (it reads from the API server's cache), so a refusal alone is no proof.
        """
        try:
            lease = await self._get()
        except ApiError as error:
            log.warning("could not re-read the Lease: %s", error)
            return self.is_leading()
        if lease is not None:
            _, current = self._read(lease)
            if (current.holder, current.transitions) == (self.identity, self._token):
                return self.is_leading()
        self._lose("the Lease has another holder or token")
        return False

    # The election loop

    async def run(self) -> None:
        self._loop_task = asyncio.current_task()
        while not self._stopped:
            began = self._clock()
            self._poke.clear()  # before the round: a poke during it (a 409) means look again
            try:
                await self.tick()
            except Exception as error:  # the elector must outlive any API trouble
                log.warning("lease %s: %s", self.config.lease_name, error)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.next_round_in(began)):
                    await self._poke.wait()

    def next_round_in(self, began: float | None = None) -> float:
        """Until the next round, after one that began at `began`: a retry period, or less if
        somebody else's Lease expires sooner (as our clock dates its last renewal)."""
        if self.is_leading():
            # A leader's cadence counts from the start of its last round: a renewal that took a
            # second is followed by the next one a retry period after it began, not after it
            # ended, which would leave that one a second less before the deadline.
            spent = 0.0 if began is None else self._clock() - began
            return max(0.0, self.config.retry_period - spent)
        if self._observed is None:
            return self.config.retry_period
        expiry = self._observed_at + self._observed_duration - self._clock()
        return min(self.config.retry_period, max(0.0, expiry))

    def observe(self, lease: dict[str, Any] | None) -> None:
        """The Lease as its watch delivered it (None: deleted). A renewal by somebody else is
        dated now, on its arrival, which is later than its write (the standby's safe side); a
        Lease that is free, gone, or ours with a token we do not hold is looked at at once.
        Our own renewals arrive here too and change nothing."""
        seen = self._clock()
        if lease is None:
            self._poke.set()
            return
        _, current = self._read(lease)
        holder = current.holder
        if holder and holder != self.identity:
            self._note(holder, current, seen)
        elif not holder or current.transitions != self._token or not self.is_leading():
            self._poke.set()

    def _note(self, holder: str, current: _LeaseSpec, seen: float) -> None:
        """Somebody else's renewal, dated the first time we saw it."""
        if self._observed != (holder, current.renew_time):
            self._observed, self._observed_at = (holder, current.renew_time), seen
        self._observed_duration = current.duration

    async def release(self) -> None:
        """On graceful shutdown: give the Lease up so a standby need not wait for it to expire.

        First no new write may start, and one in flight may finish (cancelling it could leave an
        acquisition on the server that we never learn of); then the Lease itself, not our memory
        of it, says whether we hold it.
        """
        self._stopped = True
        self._poke.set()
        if self._loop_task is not None and self._loop_task is not asyncio.current_task():
            await asyncio.wait([self._loop_task], timeout=5)
        self._lose("shutting down")
        try:
            lease = await self._get()
            if lease is None:
                return
            spec, current = self._read(lease)
            if current.holder != self.identity:
                return
            spec.update(holderIdentity="", leaseDurationSeconds=1)
            lease["spec"] = spec
            await self.api.replace_lease(lease)
            log.info("released lease %s", self.config.lease_name)
        except (ApiError, TransportError) as error:
            log.warning("could not release the Lease (a standby takes over at expiry): %s", error)

    async def tick(self) -> None:
        """One round of the election: acquire, renew or observe. run() calls it every retry
        period (and at once after a conflict); tests call it directly, with their own clock."""
        # Our own renew deadline counts from before our write (the leader's safe side); somebody
        # else's renewal is dated when our read of it came back (the standby's safe side): the
        # holder may have renewed while our GET was on its way, or waiting in the API server.
        started = self._clock()
        if await self._renew_in_place(started):
            return
        lease = await self._get()
        seen = self._clock()
        if lease is None:
            # Deleted, perhaps under us: the fencing policy (no Lease, no holder) refuses our
            # writes already, and the Lease we create carries a new token.
            self._lose("the Lease is gone")
            await self._create(started)
            return
        spec, current = self._read(lease)
        holder = current.holder
        if holder and holder != self.identity:
            self._note(holder, current, seen)
            self._lose(f"{holder} holds the Lease")
            if seen - self._observed_at < current.duration:
                return  # still valid as far as our own clock can tell
        if holder == self.identity and current.transitions != self._token:
            # Someone else wrote the count, or we restarted: not the term we acted under.
            self._lose(f"the Lease's token is {current.transitions}, ours {self._token}")
        now = _micro_time(datetime.now(UTC))
        if holder == self.identity and current.transitions == self._max_token:
            token = current.transitions  # a renewal keeps its token
        else:
            # A new term: above any token seen, in case the Lease was recreated (count reset to
            # 0) or its count was edited down since; a token in use before must not come back.
            token = self._next_token()
            spec.update(acquireTime=now)
        spec.update(
            holderIdentity=self.identity,
            leaseDurationSeconds=self.config.lease_seconds,
            leaseTransitions=token,  # also mends a count that was not a valid number
            renewTime=now,
        )
        lease["spec"] = spec
        if self._stopped:
            return  # shutting down: never take or renew the Lease now
        if not await self._write(lease, token, started):
            self._poke.set()  # somebody else wrote, or deleted it: look again at once

    async def _write(self, lease: dict[str, Any], token: int, started: float) -> bool:
        """Replace the Lease with `lease`, ours under `token`; False if it changed since we read
        it (409) or went (404)."""
        try:
            written = await self.api.replace_lease(lease)
        except ApiError as error:
            if error.status in (404, 409):
                return False
            raise
        self._won(token, started, written)
        metrics.lease_renewals.observe(self._clock() - started)
        return True

    async def _renew_in_place(self, started: float) -> bool:
        """The leader's renewal in one round trip: the Lease as our last write returned it, with a
        new renewTime. Its resourceVersion proves nobody wrote since, as a GET would. False when
        there is nothing to renew that way, or the Lease changed or went: the caller reads it."""
        mine = self._written
        if mine is None or self._stopped or not self.is_leading():
            return False
        spec = dict(mine.get("spec") or {})
        spec.update(renewTime=_micro_time(datetime.now(UTC)))
        self._written = None  # until this write is known to have landed
        return await self._write({**mine, "spec": spec}, self._token, started)

    async def _create(self, started: float) -> None:
        if self._stopped:
            return
        now = _micro_time(datetime.now(UTC))
        token = self._next_token()  # 0 for the first Lease we ever see
        lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.config.lease_name, "namespace": self.config.namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": self.config.lease_seconds,
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": token,
            },
        }
        try:
            written = await self.api.create_lease(lease)
        except ApiError as error:
            if error.status == 409:
                self._poke.set()
                return
            raise
        self._won(token, started, written)

    def _next_token(self) -> int:
        """One more than any token seen, but never past the field's int32 range (a Lease set to
        its maximum would otherwise lock every replica out: each write refused). At the maximum a
        new holder keeps the count; the fence still tells holders apart by identity."""
        return min(self._max_token + 1, INT32_MAX)

    def _won(self, token: int, started: float, written: dict[str, Any]) -> None:
        newly = not self.is_leading() or token != self._token
        self._token, self._renewed_at = token, started
        self._written = written
        self._max_token = max(self._max_token, token)
        self._observed = None  # ours now: no expiry of somebody else's to wait for
        # Step down the moment the renew deadline passes without another renewal, not when
        # somebody next asks: the gauge, the log and the loops waiting on a change see it then.
        if self._deadline is not None:
            self._deadline.cancel()
        left = started + self.config.renew_deadline - self._clock()
        self._deadline = asyncio.get_running_loop().call_later(max(0.0, left), self._expire)
        if newly:
            log.info("became leader of %s with fencing token %d", self.config.lease_name, token)
            metrics.leader.set(1)
            metrics.fencing_token.set(token)
            metrics.leader_transitions.inc()
            self._changed.set()
            self._on_change()

    def _expire(self) -> None:
        if self._renewed_at is not None and not self.is_leading():
            self._lose(f"no renewal within the renew deadline ({self.config.renew_deadline:g} s)")

    def _lose(self, why: str) -> None:
        if self._renewed_at is None:
            return
        self._renewed_at = None
        self._written = None
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        log.info("stopped leading %s (token %d): %s", self.config.lease_name, self._token, why)
        metrics.leader.set(0)
        metrics.leader_transitions.inc()
        self._changed.set()
        self._on_change()

    async def _get(self) -> dict[str, Any] | None:
        return await self.api.get_lease(self.config.namespace, self.config.lease_name)

    def _read(self, lease: dict[str, Any]) -> tuple[dict[str, Any], _LeaseSpec]:
        """The Lease's spec (to write back) and what it says, read totally.

        The API server's validation refuses most bad values, but the elector must not depend on
        it: a value it cannot take would stop the election of every replica. Each bad value is
        replaced by the safe one and logged once. Every valid count is a token that was seen.
        """
        spec = lease.get("spec")
        if not isinstance(spec, dict):
            self._warn("spec", spec, "read as empty")
            spec = {}
        holder = spec.get("holderIdentity")
        if holder is None:
            holder = ""
        elif not isinstance(holder, str):
            # Not ours, and not provably free: somebody's, which expires like anybody's.
            self._warn("holderIdentity", holder, "counted as another holder")
            holder = repr(holder)
        renew_time = spec.get("renewTime")
        if renew_time is None:
            renew_time = ""
        elif not isinstance(renew_time, str):
            self._warn("renewTime", renew_time, "compared as it is")
            renew_time = repr(renew_time)
        ours = self.config.lease_duration
        duration = spec.get("leaseDurationSeconds")
        if duration is None:
            duration = ours
        elif not _is_number(duration) or duration <= 0:
            self._warn("leaseDurationSeconds", duration, f"counted as ours, {ours:g} s")
            duration = ours
        elif duration > FOREIGN_DURATION_FACTOR * ours:
            cap = FOREIGN_DURATION_FACTOR * ours
            self._warn("leaseDurationSeconds", duration, f"counted as {cap:g} s")
            duration = cap
        count = spec.get("leaseTransitions")
        if count is None:
            count = 0  # as the fencing policy reads it
        transitions: int | None = None
        if _is_number(count) and 0 <= count <= INT32_MAX and count == int(count):
            transitions = int(count)
            self._max_token = max(self._max_token, transitions)
        else:
            self._warn("leaseTransitions", count, "the next token is above any seen")
        return spec, _LeaseSpec(holder, renew_time, float(duration), transitions)

    def _warn(self, field: str, value: Any, meaning: str) -> None:
        """Once per distinct bad value: the loop reads the same Lease every retry period."""
        shown = reprlib.repr(value)
        if (field, shown) in self._warned:
            return
        if len(self._warned) >= 100:  # a writer of ever new garbage must not grow this for ever
            self._warned.clear()
        self._warned.add((field, shown))
        name = self.config.lease_name
        log.warning("lease %s: %s %s is not valid; %s", name, field, shown, meaning)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
