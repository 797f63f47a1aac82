"""Dynamic batching of concurrent inference requests (as in NVIDIA Triton's dynamic batcher and
TorchServe's batch aggregation): requests queue up, and one forward pass runs on up to `max_batch`
rows, waiting at most `max_wait_ms` after the first queued request for others to join (the service's
default is 0: eager batching, where the requests that arrive while a batch runs form the next).

Inference runs in one worker thread, so the event loop keeps accepting requests while a batch
runs; those requests form the next batch. A batch function that runs torch enters
`torch.inference_mode()` itself (this module imports no torch: the fast start runs onnxruntime
graphs before torch is imported, `services.neural.fast_start`). Each caller gets its own
rows back; an error raised by a batch goes to the callers of that batch only.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from libs.errors import Unavailable
from services.neural import metrics

log = logging.getLogger(__name__)

BatchFunction = Callable[..., tuple[np.ndarray, ...]]
"""Runs one batch: takes arrays with a leading batch dimension B (all the same B) and returns
arrays whose leading dimension is B too, row i answering input row i."""


@dataclass
class _Request:
    inputs: tuple[np.ndarray, ...]
    rows: int
    future: asyncio.Future = field(repr=False)
    queued_at: float = 0.0
    """`loop.time()` when it was queued (for the queue-wait histogram)."""


class DynamicBatcher:
    """Queues `submit()` calls and runs them together through `run_batch`.

    Args:
        run_batch: the forward pass (see `BatchFunction`); called in the worker thread.
        max_batch: most rows per call of `run_batch`; a larger request is split into chunks.
        max_wait_ms: milliseconds the oldest queued request waits for others before its batch runs
            (0 runs whatever is queued at once).
        name: used in the worker thread's name and in logs.
    Attributes:
        forward_passes: calls of `run_batch` so far.
        rows_run: rows passed to `run_batch` so far.
    """

    def __init__(self, run_batch: BatchFunction, max_batch: int = 256, max_wait_ms: float = 0.0,
                 name: str = "model") -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        if max_wait_ms < 0:
            raise ValueError("max_wait_ms must be >= 0")
        self._run_batch = run_batch
        self.max_batch = max_batch
        self.max_wait_s = max_wait_ms / 1000.0
        self.name = name
        self.forward_passes = 0
        self.rows_run = 0
        self._pending: deque[_Request] = deque()
        self._pending_rows = 0
        self._wakeup: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._closed = False
        self._in_flight: list[_Request] = []
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"batcher-{name}")

    async def submit(self, *inputs: np.ndarray) -> tuple[np.ndarray, ...]:
        """Runs `inputs` (arrays [n, ...], n >= 1, the same n) in some batch; returns the outputs'
        n rows, in order.

        Raises:
            Unavailable: the batcher is closed.
            Exception: whatever `run_batch` raised for a batch holding these rows.
        """
        if self._closed:
            raise Unavailable(f"{self.name}: the batcher is closed")
        rows = len(inputs[0])
        if rows == 0 or any(len(array) != rows for array in inputs):
            raise ValueError("inputs must share a non-zero leading dimension")
        self._ensure_running()
        loop = asyncio.get_running_loop()
        futures = []
        for start in range(0, rows, self.max_batch):
            chunk = tuple(array[start:start + self.max_batch] for array in inputs)
            future = loop.create_future()
            self._pending.append(_Request(chunk, len(chunk[0]), future, loop.time()))
            self._pending_rows += len(chunk[0])
            futures.append(future)
        self._wakeup.set()
        try:
            parts = await asyncio.gather(*futures)
        except BaseException:
            for future in futures:
                future.cancel()
            raise
        if len(parts) == 1:
            return parts[0]
        return tuple(np.concatenate(arrays) for arrays in zip(*parts, strict=True))

    async def close(self) -> None:
        """Stops the batching task; queued requests fail with `Unavailable`."""
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        for request in [*self._in_flight, *self._pending]:
            if not request.future.done():
                request.future.set_exception(Unavailable(f"{self.name}: the batcher closed"))
        self._pending.clear()
        self._in_flight = []
        # A batch still running in the worker finishes there; wait without blocking the loop.
        await asyncio.to_thread(self._executor.shutdown, True)

    def _ensure_running(self) -> None:
        if self._task is None or self._task.done():
            self._wakeup = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._serve(),
                                                                name=f"batcher-{self.name}")

    async def _serve(self) -> None:
        while True:
            self._in_flight = await self._next_batch()
            if self._in_flight:
                await self._run(self._in_flight)
            self._in_flight = []

    async def _next_batch(self) -> list[_Request]:
        loop = asyncio.get_running_loop()
        while not self._pending:
            self._wakeup.clear()
            await self._wakeup.wait()
        deadline = loop.time() + self.max_wait_s
        while self._pending_rows < self.max_batch:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            self._wakeup.clear()
            try:  # asyncio.timeout: 3.11's wait_for can lose a cancellation (gh-86296)
                async with asyncio.timeout(remaining):
                    await self._wakeup.wait()
            except TimeoutError:
                break
        batch: list[_Request] = []
        rows = 0
        while self._pending and rows + self._pending[0].rows <= self.max_batch:
            request = self._pending.popleft()
            self._pending_rows -= request.rows
            if request.future.done():  # the caller went away (cancelled)
                continue
            batch.append(request)
            rows += request.rows
        return batch

    async def _run(self, batch: list[_Request]) -> None:
        inputs = tuple(np.concatenate(arrays) for arrays in zip(*(r.inputs for r in batch),
                                                                 strict=True))
        rows = len(inputs[0])
        loop = asyncio.get_running_loop()
        now = loop.time()
        waited = metrics.QUEUE_WAIT.labels(self.name)
        for request in batch:
            waited.observe(now - request.queued_at)
        metrics.BATCH_SIZE.labels(self.name).observe(rows)
        try:
            outputs = await loop.run_in_executor(self._executor, self._infer, inputs)
            if any(len(output) != rows for output in outputs):
                raise RuntimeError(f"{self.name}: run_batch returned {[len(o) for o in outputs]} "
                                   f"rows for {rows} inputs")
        except Exception as error:  # noqa: BLE001 - delivered to this batch's callers
            for request in batch:
                if not request.future.done():
                    request.future.set_exception(error)
            return
        start = 0
        for request in batch:
            end = start + request.rows
            if not request.future.done():
                request.future.set_result(tuple(output[start:end] for output in outputs))
            start = end

    def _infer(self, inputs: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
        outputs = self._run_batch(*inputs)
        self.forward_passes += 1
        self.rows_run += len(inputs[0])
        return outputs


@dataclass
class _PoolEntry:
    version: str
    batcher: DynamicBatcher
    in_flight: int = 0
    retired: bool = False


class BatcherPool:
    """One `DynamicBatcher` per served model, replaced when the model's version changes.

    When a model is reloaded, the next request for it starts a batcher on the new module; the old
    batcher keeps answering the requests already submitted to it and is closed once the last of
    them returns, so a reload never fails a request in flight. Use from one event loop.

    Args:
        max_batch, max_wait_ms: passed to every `DynamicBatcher`.
    """

    def __init__(self, max_batch: int, max_wait_ms: float) -> None:
        self.max_batch = max_batch
        self.max_wait_ms = max_wait_ms
        self._entries: dict[str, _PoolEntry] = {}
        self._closing: set[asyncio.Task] = set()

    async def submit(self, name: str, version: str, run_batch: BatchFunction,
                     *inputs: np.ndarray) -> tuple[np.ndarray, ...]:
        """`DynamicBatcher.submit(*inputs)` on the batcher of model `name` at `version`.

        `run_batch` (the forward pass of that version's module) starts the batcher when none
        serves that version yet; otherwise the running batcher's own function is used.
        Raises: as `DynamicBatcher.submit`.
        """
        entry = self._entries.get(name)
        if entry is None or entry.version != version:
            if entry is not None:
                self._retire(entry)
            entry = _PoolEntry(version, DynamicBatcher(run_batch, self.max_batch,
                                                       self.max_wait_ms, name=name))
            self._entries[name] = entry
        entry.in_flight += 1
        try:
            return await entry.batcher.submit(*inputs)
        finally:
            entry.in_flight -= 1
            if entry.retired and entry.in_flight == 0:
                self._close_later(entry.batcher)

    def get(self, name: str) -> DynamicBatcher | None:
        """The current batcher of model `name`, once it served a request (metrics, tests)."""
        entry = self._entries.get(name)
        return entry.batcher if entry is not None else None

    def _retire(self, entry: _PoolEntry) -> None:
        entry.retired = True
        if entry.in_flight == 0:
            self._close_later(entry.batcher)

    def _close_later(self, batcher: DynamicBatcher) -> None:
        task = asyncio.get_running_loop().create_task(batcher.close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        """Closes every batcher; requests still queued fail with `Unavailable`."""
        entries, self._entries = list(self._entries.values()), {}
        for entry in entries:
            await entry.batcher.close()
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)
