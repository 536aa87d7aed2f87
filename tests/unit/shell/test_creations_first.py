"""Status writes and Events wait for a burst of Job creations, but never for ever."""

from __future__ import annotations

import asyncio

from cronlease.shell.applier import CreationsFirst


async def test_a_write_waits_until_every_pending_creation_is_done() -> None:
    gate = CreationsFirst(patience=60)
    order: list[str] = []
    finish = [asyncio.Event() for _ in range(3)]

    async def create(i: int) -> None:
        with gate.creating():
            await finish[i].wait()
            order.append(f"created {i}")

    async def write() -> None:
        await gate.wait_turn()
        order.append("status")

    creations = [asyncio.create_task(create(i)) for i in range(3)]
    await asyncio.sleep(0)  # let every creation register
    writer = asyncio.create_task(write())
    for event in finish:
        event.set()
        await asyncio.sleep(0)
    await asyncio.wait_for(asyncio.gather(writer, *creations), 5)
    assert order == ["created 0", "created 1", "created 2", "status"]


async def test_a_write_goes_at_once_when_nothing_is_being_created() -> None:
    gate = CreationsFirst(patience=60)
    with gate.creating():
        pass
    await asyncio.wait_for(gate.wait_turn(), 1)


async def test_a_steady_stream_of_creations_delays_a_write_only_for_the_patience() -> None:
    gate = CreationsFirst(patience=0.05)
    never = asyncio.Event()

    async def stuck_creation() -> None:
        with gate.creating():
            await never.wait()

    creation = asyncio.create_task(stuck_creation())
    await asyncio.sleep(0)
    await asyncio.wait_for(gate.wait_turn(), 5)  # returns after the patience, not never
    creation.cancel()
    await asyncio.gather(creation, return_exceptions=True)
    await asyncio.wait_for(gate.wait_turn(), 1)  # a cancelled creation is no longer pending


async def test_the_patience_runs_from_when_the_write_was_queued() -> None:
    """A write that waited in a queue behind others has used up its patience there: it goes at
    once, however many creations are pending."""
    gate = CreationsFirst(patience=60)
    with gate.creating():
        queued = asyncio.get_running_loop().time() - 61
        await asyncio.wait_for(gate.wait_turn(since=queued), 1)
