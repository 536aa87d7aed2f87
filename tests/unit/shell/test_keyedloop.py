"""The keyed loop (cronlease.shell.keyedloop) at rest after a burst keeps nothing of its size."""

from __future__ import annotations

import asyncio
import sys

import pytest
from harness import eventually

from cronlease.shell.keyedloop import Applied, KeyedLoop, Outcome
from cronlease.shell.leadership import SoleLeader
from cronlease.shell.wakeups import WakeupQueue

BURST = 2000


async def test_after_a_burst_its_key_sets_give_their_tables_back() -> None:
    """A set never shrinks as it empties: after a burst of 5,000 keys, each of the loop's three
    kept 0.5 MB of the operator's RSS at rest (design note 118)."""
    wakeups: WakeupQueue[str] = WakeupQueue()
    reconciled: list[str] = []
    started = asyncio.Event()

    async def reconcile(key: str) -> Applied:
        await started.wait()  # the whole burst is queued first
        reconciled.append(key)
        return Applied(Outcome.DONE)

    loop: KeyedLoop[str, Applied] = KeyedLoop("test", wakeups, SoleLeader("a"), reconcile, 64)
    running = asyncio.create_task(loop.run())
    for index in range(BURST):
        wakeups.notify(f"key-{index}")
    await eventually(lambda: len(loop._queued) + len(loop._processing) == BURST)
    started.set()
    await eventually(lambda: len(reconciled) == BURST)
    await eventually(lambda: not loop._processing)
    empty = sys.getsizeof(set())
    for keys in (loop._queued, loop._processing, loop._again):
        assert sys.getsizeof(keys) == empty
    running.cancel()


class Stages:
    """A loop of one writer whose reconciles each leave a second stage, and a key "busy" whose
    stage holds that writer until `free` is set: the stages queued behind it wait their turn, as a
    burst's follow-ups do behind the writes before them. The key of a stage named in `next_in` is
    next due that many seconds after the reconcile that left it (the loop plans the others'
    itself); the controller carries a stage into the key's next reconcile when `carrying`."""

    def __init__(self, next_in: dict[str, float], carrying: bool = True) -> None:
        self.wakeups: WakeupQueue[str] = WakeupQueue()
        self.reconciles: list[str] = []
        self.stages: list[str] = []  # the second stages that ran, by the reconcile that left them
        self.carried: list[str] = []
        self.free = asyncio.Event()
        self.next_in, self.carrying = next_in, carrying
        self.loop: KeyedLoop[str, str] = KeyedLoop(
            "test",
            self.wakeups,
            SoleLeader("a"),
            self.reconcile,
            4,
            follow_up=self.follow_up,
            writers=1,
            carry=self.carry,
            wake_of=lambda stage: self.due[stage],
        )
        self.due: dict[str, float | None] = {}

    async def reconcile(self, key: str) -> Applied | str:
        self.reconciles.append(key)
        stage = f"{key}#{self.reconciles.count(key)}"
        after = self.next_in.get(stage)
        self.due[stage] = None if after is None else self.wakeups.now() + after
        return stage

    def carry(self, key: str, stage: str) -> bool:
        if self.carrying:
            self.carried.append(stage)
        return self.carrying

    async def follow_up(self, stage: str) -> Applied:
        if stage.startswith("busy#"):
            await self.free.wait()
        self.stages.append(stage)
        return Applied(Outcome.DONE)

    async def waiting(self) -> None:
        """The key "busy" holds the writer, and the stage of "a" waits behind it (with the loop
        running: a key added while it is processed is woken again through the wake-up queue)."""
        self.running = asyncio.create_task(self.loop.run())
        self.loop.add("busy")
        self.loop.add("a")
        await eventually(lambda: self.reconciles[:2] == ["busy", "a"])

    async def end(self, stages: int) -> None:
        self.free.set()
        await eventually(lambda: len(self.stages) == stages)
        await self.loop.drain()
        self.running.cancel()


async def test_a_key_whose_next_slot_comes_while_its_stage_waits_is_reconciled_then() -> None:
    """Its next slot goes at its time, not behind its last slot's writes: the loop wakes it at
    its stage's wake-up, and the controller takes that stage into the new reconcile (which
    writes it), so the queued one never runs."""
    stages = Stages({"a#1": 0.05})
    await stages.waiting()  # nobody adds "a" again: its own wake-up does
    await eventually(lambda: stages.reconciles.count("a") == 2)
    assert stages.stages == []  # the writer is still held: "a" did not wait for it
    assert stages.carried == ["a#1"]
    await stages.end(2)
    assert stages.stages == ["busy#1", "a#2"]
    for left in (stages.loop._waiting, stages.loop._dropped, stages.loop._superseding):
        assert not left
    assert not stages.loop._processing


async def test_a_key_woken_early_while_its_stage_waits_is_still_woken_at_its_slot() -> None:
    """One of its Jobs changes before its slot (the echo of its own creation, the job
    controller's update): the wake-up queue keeps the earlier plan, so the slot's is planned
    again, and the key is reconciled at its slot all the same."""
    stages = Stages({"a#1": 0.2})
    await stages.waiting()
    stages.wakeups.notify("a")  # now: it replaces the plan at the slot
    await eventually(lambda: "a" in stages.loop._again)
    assert stages.reconciles.count("a") == 1
    await eventually(lambda: stages.reconciles.count("a") == 2)
    assert stages.carried == ["a#1"]
    await stages.end(2)
    assert stages.stages == ["busy#1", "a#2"]


async def test_a_stage_that_carries_another_is_kept_so_no_key_starves_of_its_writes() -> None:
    stages = Stages({"a#1": 0.0, "a#2": 0.0})
    await stages.waiting()
    # Due a third time at once: "a#2" carries "a#1", so it is kept, and "a" waits for it.
    await eventually(lambda: stages.reconciles.count("a") == 2 and "a" in stages.loop._again)
    await asyncio.sleep(0.01)
    assert stages.reconciles.count("a") == 2
    await stages.end(3)
    assert stages.stages == ["busy#1", "a#2", "a#3"]  # then "a" again, as any key added meanwhile
    assert stages.carried == ["a#1"]


@pytest.mark.parametrize(
    ("next_in", "carrying"),
    [({"a#1": 3600.0}, True), ({"a#1": 0.0}, False)],
    ids=["before its next slot", "the controller keeps it queued"],
)
async def test_a_stage_is_kept_before_its_next_slot_or_when_not_carried(
    next_in: dict[str, float], carrying: bool
) -> None:
    """Before its next wake-up come the echoes of the key's own creations: another reconcile
    then would only repeat this one, so the key waits for its stage, as without carrying."""
    stages = Stages(next_in, carrying)
    await stages.waiting()
    stages.loop.add("a")
    await asyncio.sleep(0.01)
    assert stages.reconciles.count("a") == 1
    await stages.end(3)
    assert stages.stages == ["busy#1", "a#1", "a#2"]
