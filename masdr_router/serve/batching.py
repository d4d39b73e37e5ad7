"""Dynamic micro-batching: concurrent requests share one forward pass of the router.

A transformer router costs about the same for one query as for a few dozen (the work is in the
weights, not the batch), so under concurrency the throughput comes from batching. Each request's
queries wait at most ``max_wait_ms`` after the first query of a batch arrived, and a batch holds
at most ``max_batch_size`` queries (a request is never split). The model runs in one worker
thread, so the event loop keeps accepting requests while it computes.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class MicroBatcher(Generic[T]):
    """Collect ``submit(texts)`` calls into batches for ``fn(all_texts) -> results``.

    >>> import asyncio
    >>> async def demo():
    ...     b = MicroBatcher(lambda xs: [x.upper() for x in xs], max_batch_size=8, max_wait_ms=5)
    ...     b.start()
    ...     out = await asyncio.gather(b.submit(["a"]), b.submit(["b", "c"]))
    ...     await b.stop()
    ...     return out, b.batch_sizes
    >>> asyncio.run(demo())
    ([['A'], ['B', 'C']], [3])
    """

    def __init__(self, fn: Callable[[list[str]], Sequence[T]], *, max_batch_size: int = 64, max_wait_ms: float = 2.0,
                 executor: ThreadPoolExecutor | None = None,
                 on_batch: Callable[[int, float], None] | None = None) -> None:
        self.fn = fn
        self.max_batch_size, self.max_wait = max_batch_size, max_wait_ms / 1000
        self.executor = executor or ThreadPoolExecutor(max_workers=1, thread_name_prefix="masdr-batch")
        self.on_batch = on_batch
        self.batch_sizes: list[int] = []  # kept short: the last 1000, for tests and /metrics
        self._queue: asyncio.Queue[tuple[list[str], asyncio.Future[list[T]]]] | None = None
        self._task: asyncio.Task[None] | None = None
        self._carry: tuple[list[str], asyncio.Future[list[T]]] | None = None

    def start(self) -> None:
        self._queue = asyncio.Queue()
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="masdr-micro-batcher")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def submit(self, texts: list[str]) -> list[T]:
        """The results for ``texts`` (in order), computed in a batch with whatever else is waiting."""
        if self._queue is None:
            raise RuntimeError("MicroBatcher.start() was not called")
        fut: asyncio.Future[list[T]] = asyncio.get_running_loop().create_future()
        await self._queue.put((list(texts), fut))
        return await fut

    async def _next_batch(self) -> list[tuple[list[str], asyncio.Future[list[T]]]]:
        if self._queue is None:
            raise RuntimeError("MicroBatcher.start() was not called")
        first = self._carry or await self._queue.get()
        self._carry = None
        batch, n = [first], len(first[0])
        deadline = time.perf_counter() + self.max_wait
        while n < self.max_batch_size:
            timeout = deadline - time.perf_counter()
            try:
                item = self._queue.get_nowait() if timeout <= 0 else await asyncio.wait_for(self._queue.get(), timeout)
            except (asyncio.TimeoutError, asyncio.QueueEmpty):
                break
            if n + len(item[0]) > self.max_batch_size:
                self._carry = item  # starts the next batch: a request is never split
                break
            batch.append(item)
            n += len(item[0])
        return batch

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = await self._next_batch()
            live = [(texts, fut) for texts, fut in batch if not fut.cancelled()]
            if not live:
                continue
            texts = [t for ts, _ in live for t in ts]
            t0 = time.perf_counter()
            try:
                results: Any = await loop.run_in_executor(self.executor, self.fn, texts)
            except Exception as e:  # the whole batch failed: every waiting request sees the error
                for _, fut in live:
                    if not fut.done():
                        fut.set_exception(e)
                continue
            self.batch_sizes = [*self.batch_sizes[-999:], len(texts)]
            if self.on_batch is not None:
                self.on_batch(len(texts), time.perf_counter() - t0)
            i = 0
            for ts, fut in live:
                if not fut.done():
                    fut.set_result(list(results[i:i + len(ts)]))
                i += len(ts)
