"""Dynamic batching per signature, as TF Serving batches: concurrent requests for one signature become one
signature call of at most ``max_batch_size`` instances, and each request gets its own rows back.

The knobs are TF Serving's: a maximum batch size (instances, not requests) and a batch timeout, how long
a batch that is not yet full may wait for more requests before it is called. Each signature has one call
in flight at a time, in a worker thread (TensorFlow releases the GIL while it computes, so the event loop
goes on reading and parsing the next requests): requests that arrive meanwhile queue up and form the next
batch, so with the default timeout of 0 a lone client waits for no one and a busy server batches as much as
arrives during one call. Requests are taken first come, first served: a batch is the longest run from the
front of the queue whose inputs stack (the same shape beyond the batch dimension) and whose instances fit;
a request of more than ``max_batch_size`` instances is called alone. A batch the model refuses or answers
with outputs that are not one row per instance is called again request by request, so that one bad
request fails alone.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Mapping
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

from serving.requests import Signature

log = logging.getLogger("serving")

DEFAULT_MAX_BATCH_SIZE = 64  # instances in one signature call
DEFAULT_BATCH_TIMEOUT_MS = 0.0  # how long a batch that is not full waits for more requests


@dataclass
class _Request:
    columns: dict[str, Any]  # input name -> NumPy array, the batch first
    n: int  # instances
    key: tuple  # what must match to stack: each input's shape beyond the batch dimension
    future: asyncio.Future


@dataclass
class BatchStats:
    calls: int = 0
    instances: int = 0
    largest: int = 0
    sizes: collections.Counter = field(default_factory=collections.Counter)


class Batcher:
    """Batches the calls of one signature; ``await predict(columns, n)`` -> (outputs, batch size)."""

    def __init__(
        self,
        signature: Signature,
        executor: Executor,
        max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
        batch_timeout_s: float = DEFAULT_BATCH_TIMEOUT_MS / 1000,
    ):
        self.signature = signature
        self.executor = executor
        self.max_batch_size = max_batch_size
        self.batch_timeout_s = batch_timeout_s
        self.stats = BatchStats()
        self._queue: collections.deque[_Request] = collections.deque()
        self._arrived = asyncio.Event()
        self._worker: asyncio.Task | None = None

    async def predict(self, columns: Mapping[str, Any], n: int) -> tuple[dict[str, Any], int]:
        """The signature's outputs for these ``n`` instances alone, and how many instances its call held.
        Raises what the signature call raised, or ValueError for outputs that are not one row per instance
        (of a batch of other requests too)."""
        key = tuple((name, columns[name].shape[1:], columns[name].dtype.str) for name in sorted(columns))
        future = asyncio.get_running_loop().create_future()
        self._queue.append(_Request(dict(columns), n, key, future))
        self._arrived.set()
        if self._worker is None:
            self._worker = asyncio.get_running_loop().create_task(self._work())
        return await future

    async def _work(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            while not self._queue:
                self._arrived.clear()
                await self._arrived.wait()
            batch = await self._next_batch(loop)
            try:
                await self._run(loop, batch)
            except Exception as exc:  # noqa: BLE001 - never lose the worker: each waiting request gets it
                for request in batch:
                    if not request.future.done():
                        request.future.set_exception(exc)

    async def _next_batch(self, loop) -> list[_Request]:
        batch = [self._queue.popleft()]
        total = batch[0].n
        deadline = loop.time() + self.batch_timeout_s
        while total < self.max_batch_size:
            while (
                self._queue
                and self._queue[0].key == batch[0].key
                and total + self._queue[0].n <= self.max_batch_size
            ):
                request = self._queue.popleft()
                batch.append(request)
                total += request.n
            remaining = deadline - loop.time()
            if self._queue or total >= self.max_batch_size or remaining <= 0:
                break  # full, the next request does not fit, or no more waiting
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), remaining)
            except asyncio.TimeoutError:
                break
        return [r for r in batch if not r.future.done()] or batch[:1]

    async def _run(self, loop, batch: list[_Request]) -> None:
        import numpy as np

        if len(batch) == 1:
            outputs = await self._call(loop, batch[0].columns, batch[0].n)
            if not batch[0].future.done():
                batch[0].future.set_result((outputs, batch[0].n))
            return
        total = sum(r.n for r in batch)
        columns = {name: np.concatenate([r.columns[name] for r in batch]) for name in batch[0].columns}
        try:
            outputs = await self._call(loop, columns, total)
            rows = all(getattr(v, "ndim", 0) > 0 and v.shape[0] == total for v in outputs.values())
        except Exception:  # noqa: BLE001 - called again one by one below: only the guilty request fails
            outputs, rows = None, False
        if not rows:
            for request in batch:
                try:
                    await self._run(loop, [request])
                except Exception as exc:  # noqa: BLE001 - this request's own failure, for it alone
                    if not request.future.done():
                        request.future.set_exception(exc)
            return
        start = 0
        for request in batch:
            own = {name: value[start : start + request.n] for name, value in outputs.items()}
            start += request.n
            if not request.future.done():
                request.future.set_result((own, total))

    async def _call(self, loop, columns: dict[str, Any], n: int) -> dict[str, Any]:
        outputs = await loop.run_in_executor(self.executor, self.signature.call, columns)
        stats = self.stats
        stats.calls += 1
        stats.instances += n
        stats.largest = max(stats.largest, n)
        stats.sizes[n] += 1
        return outputs
