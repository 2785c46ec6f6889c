"""serving.app.Admission on its own: the queue's cap (429), first come first served for the body budget,
a waiter's deadline, and cancellation (a client that leaves while it waits)."""

from __future__ import annotations

import asyncio

import pytest

from serving.app import Admission, Full


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 10))  # a hang fails the test, not the run


def test_a_full_queue_refuses_at_once():
    async def scenario():
        admission = Admission(slots=1, budget=100, queue_limit=1, wait_s=5)
        await admission.enter(10)
        waiting = asyncio.create_task(admission.enter(10))
        await asyncio.sleep(0)
        with pytest.raises(Full, match="1 requests are waiting"):
            await admission.enter(10)
        admission.leave(10)
        await waiting  # the one that waited gets the slot

    run(scenario())


def test_the_budget_is_first_come_first_served():
    """A small body that would fit waits behind a large one that does not: never overtaken for ever."""
    async def scenario():
        admission = Admission(slots=10, budget=100, queue_limit=10, wait_s=5)
        await admission.enter(60)
        order = []

        async def enter(name, size):
            await admission.enter(size)
            order.append(name)

        large = asyncio.create_task(enter("large", 50))
        await asyncio.sleep(0)
        small = asyncio.create_task(enter("small", 10))  # 40 bytes are free: it fits, but large came first
        await asyncio.sleep(0.05)
        assert order == []
        admission.leave(60)
        await asyncio.gather(large, small)
        assert order == ["large", "small"] and admission.free_bytes == 40

    run(scenario())


def test_a_waiter_past_its_deadline_gets_full():
    async def scenario():
        admission = Admission(slots=1, budget=100, queue_limit=10, wait_s=0.1)
        await admission.enter(10)
        with pytest.raises(Full, match="no room within 0.1 s"):
            await admission.enter(10)
        assert not admission.waiting

    run(scenario())


def test_a_cancelled_waiter_leaves_the_queue_and_those_behind_it_move_up():
    async def scenario():
        admission = Admission(slots=10, budget=100, queue_limit=10, wait_s=5)
        await admission.enter(60)
        large = asyncio.create_task(admission.enter(50))
        await asyncio.sleep(0)
        small = asyncio.create_task(admission.enter(10))
        await asyncio.sleep(0)
        large.cancel()  # its client left: the small one behind it fits now
        await small
        assert admission.free_bytes == 30 and not admission.waiting
        with pytest.raises(asyncio.CancelledError):
            await large

    run(scenario())


def test_a_waiter_cancelled_as_it_is_admitted_gives_its_room_back():
    async def scenario():
        admission = Admission(slots=1, budget=100, queue_limit=10, wait_s=5)
        await admission.enter(10)
        waiting = asyncio.create_task(admission.enter(30))
        await asyncio.sleep(0)
        admission.leave(10)  # admits the waiter (its future is set) ...
        waiting.cancel()  # ... which is cancelled before it runs
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert (admission.free_slots, admission.free_bytes) == (1, 100)

    run(scenario())
