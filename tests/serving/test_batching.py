"""serving/batching.py without TensorFlow: a signature is any callable on NumPy columns, so these tests see
each call's batch. Concurrent requests become one call in arrival order, each gets its own rows; a request
over the maximum runs alone; requests whose inputs do not stack, and a batch the model refuses, are called
apart so that one bad request fails alone."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from serving.batching import Batcher
from serving.requests import InputSpec, Signature


class Model:
    """A signature call: doubles ``x``, sums the rows of ``ids``; refuses a batch holding a negative x.
    ``gate`` (when set) holds every call until the test lets it go, so that requests queue up behind one."""

    def __init__(self):
        self.calls: list[int] = []
        self.gate: threading.Event | None = None

    def __call__(self, columns):
        if self.gate is not None:
            self.gate.wait(10)
        self.calls.append(len(columns["x"]))
        if (columns["x"] < 0).any():
            raise ValueError("negative")
        return {"double": columns["x"] * 2, "total": columns["ids"].sum(axis=1)}


def signature(model: Model) -> Signature:
    return Signature(
        "s",
        (InputSpec("ids", "int64", (None, None)), InputSpec("x", "float32", (None,))),
        ("double", "total"),
        model,
    )


def columns(*xs: float, width: int = 2):
    return {"x": np.array(xs, np.float32), "ids": np.ones((len(xs), width), np.int64)}, len(xs)


def run(coroutine):
    return asyncio.run(coroutine)


@pytest.fixture
def executor():
    with ThreadPoolExecutor(max_workers=1) as pool:
        yield pool


def test_concurrent_requests_become_one_call_in_order_each_with_its_own_rows(executor):
    model = Model()

    async def scenario():
        batcher = Batcher(signature(model), executor, max_batch_size=64)
        model.gate = threading.Event()
        first = asyncio.ensure_future(batcher.predict(*columns(0)))  # called alone, held at the gate
        await asyncio.sleep(0.05)
        rest = [asyncio.ensure_future(batcher.predict(*columns(i, i + 0.5))) for i in range(1, 6)]
        await asyncio.sleep(0.05)
        model.gate.set()
        return await first, await asyncio.gather(*rest)

    (alone, size), answers = run(scenario())
    assert model.calls == [1, 10] and size == 1 and alone["double"].tolist() == [0]
    for i, (outputs, batch) in enumerate(answers, start=1):
        assert batch == 10 and outputs["double"].tolist() == [2 * i, 2 * i + 1]
        assert outputs["total"].tolist() == [2, 2]


def test_the_maximum_is_instances_and_a_larger_request_runs_alone(executor):
    model = Model()

    async def scenario():
        batcher = Batcher(signature(model), executor, max_batch_size=4)
        model.gate = threading.Event()
        held = asyncio.ensure_future(batcher.predict(*columns(0)))
        await asyncio.sleep(0.05)
        queued = [batcher.predict(*columns(*range(n))) for n in (3, 1, 6, 2, 2)]
        tasks = [asyncio.ensure_future(q) for q in queued]
        await asyncio.sleep(0.05)
        model.gate.set()
        await held
        return [batch for _, batch in await asyncio.gather(*tasks)]

    # 3 + 1 fill a batch of 4; 6 is over the maximum and runs alone; 2 + 2 after it, in arrival order.
    assert run(scenario()) == [4, 4, 6, 4, 4] and model.calls == [1, 4, 6, 4]


def test_inputs_that_do_not_stack_are_called_apart(executor):
    model = Model()

    async def scenario():
        batcher = Batcher(signature(model), executor)
        model.gate = threading.Event()
        held = asyncio.ensure_future(batcher.predict(*columns(0)))
        await asyncio.sleep(0.05)
        tasks = [asyncio.ensure_future(batcher.predict(*columns(1, width=w))) for w in (2, 3, 3)]
        await asyncio.sleep(0.05)
        model.gate.set()
        await held
        return await asyncio.gather(*tasks)

    answers = run(scenario())
    assert [o["total"].tolist() for o, _ in answers] == [[2], [3], [3]] and model.calls == [1, 1, 2]


def test_a_refused_batch_is_called_again_one_by_one_and_only_the_bad_request_fails(executor):
    model = Model()

    async def scenario():
        batcher = Batcher(signature(model), executor)
        model.gate = threading.Event()
        held = asyncio.ensure_future(batcher.predict(*columns(0)))
        await asyncio.sleep(0.05)
        tasks = [asyncio.ensure_future(batcher.predict(*columns(x))) for x in (1, -1, 3)]
        await asyncio.sleep(0.05)
        model.gate.set()
        await held
        return await asyncio.gather(*tasks, return_exceptions=True)

    good, bad, other = run(scenario())
    assert good[0]["double"].tolist() == [2] and other[0]["double"].tolist() == [6]
    assert isinstance(bad, ValueError) and model.calls == [1, 3, 1, 1, 1]


def test_a_batch_timeout_waits_for_more_requests(executor):
    model = Model()

    async def scenario():
        batcher = Batcher(signature(model), executor, max_batch_size=3, batch_timeout_s=0.3)
        first = asyncio.ensure_future(batcher.predict(*columns(1)))
        await asyncio.sleep(0.05)  # within the timeout: the same call
        second = asyncio.ensure_future(batcher.predict(*columns(2)))
        return await first, await second

    (_, one), (_, two) = run(scenario())
    assert (one, two) == (2, 2) and model.calls == [2]
