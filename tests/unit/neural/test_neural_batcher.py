"""DynamicBatcher: concurrent calls share forward passes, each caller gets its own rows, errors stay
with their batch, and batched results equal unbatched ones on the real network."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from libs.connect4.board import Position, encode, legal_mask
from libs.errors import Unavailable
from services.neural.batcher import BatcherPool, DynamicBatcher
from services.neural.evaluator import PositionEvaluator
from services.neural.models.connect4_pv import predict
from services.neural.registry import ModelRegistry, RegisteredModel


class _Recorder:
    """run_batch that doubles its input and records each batch's size; it can hold the first
    batch until released, so callers pile up behind it."""

    def __init__(self, hold_first: bool = False, poison: float | None = None) -> None:
        self.sizes: list[int] = []
        self.release = threading.Event()
        self.hold_first = hold_first
        self.poison = poison

    def __call__(self, x: np.ndarray) -> tuple[np.ndarray]:
        self.sizes.append(len(x))
        if self.hold_first and len(self.sizes) == 1:
            self.release.wait(10)
        if self.poison is not None and np.any(x == self.poison):
            raise RuntimeError("poisoned batch")
        return (x * 2,)


async def _until(condition) -> None:
    while not condition():
        await asyncio.sleep(0.001)


async def test_concurrent_calls_share_one_forward_pass_and_get_their_own_rows():
    run = _Recorder()
    batcher = DynamicBatcher(run, max_batch=64, max_wait_ms=50)
    inputs = [np.full((i % 3 + 1, 2), float(i)) for i in range(16)]
    results = await asyncio.gather(*(batcher.submit(x) for x in inputs))
    assert run.sizes == [sum(len(x) for x in inputs)]
    assert batcher.forward_passes == 1
    for x, (y,) in zip(inputs, results, strict=True):
        np.testing.assert_array_equal(y, x * 2)
    await batcher.close()


async def test_callers_arriving_during_a_pass_form_the_next_batch():
    run = _Recorder(hold_first=True)
    batcher = DynamicBatcher(run, max_batch=64, max_wait_ms=0)
    first = asyncio.create_task(batcher.submit(np.zeros((1, 2))))
    await _until(lambda: run.sizes)
    later = [asyncio.create_task(batcher.submit(np.full((1, 2), float(i)))) for i in range(1, 16)]
    await asyncio.sleep(0)
    run.release.set()
    results = await asyncio.gather(first, *later)
    assert run.sizes == [1, 15]
    assert batcher.forward_passes == 2 and batcher.rows_run == 16
    for i, (y,) in enumerate(results):
        np.testing.assert_array_equal(y, np.full((1, 2), 2.0 * i))
    await batcher.close()


async def test_batches_never_exceed_max_batch_and_large_requests_are_split():
    run = _Recorder()
    batcher = DynamicBatcher(run, max_batch=4, max_wait_ms=5)
    big = np.arange(22, dtype=np.float64).reshape(11, 2)
    small = [np.full((3, 2), -1.0), np.full((2, 2), -2.0)]
    (y,), *rest = await asyncio.gather(batcher.submit(big), *(batcher.submit(x) for x in small))
    np.testing.assert_array_equal(y, big * 2)
    for x, (z,) in zip(small, rest, strict=True):
        np.testing.assert_array_equal(z, x * 2)
    assert max(run.sizes) <= 4
    assert sum(run.sizes) == 16


async def test_an_error_reaches_only_the_callers_of_its_batch():
    run = _Recorder(poison=-7.0)
    batcher = DynamicBatcher(run, max_batch=2, max_wait_ms=5)
    calls = [batcher.submit(np.full((2, 1), float(v))) for v in (1.0, -7.0, 3.0)]
    results = await asyncio.gather(*calls, return_exceptions=True)
    assert isinstance(results[1], RuntimeError)
    np.testing.assert_array_equal(results[0][0], np.full((2, 1), 2.0))
    np.testing.assert_array_equal(results[2][0], np.full((2, 1), 6.0))
    (after,) = await batcher.submit(np.ones((1, 1)))
    assert after[0, 0] == 2.0
    await batcher.close()


async def test_a_closed_batcher_refuses_and_fails_queued_calls():
    run = _Recorder(hold_first=True)
    batcher = DynamicBatcher(run, max_batch=1, max_wait_ms=0)
    first = asyncio.create_task(batcher.submit(np.zeros((1, 1))))
    await _until(lambda: run.sizes)
    queued = asyncio.create_task(batcher.submit(np.ones((1, 1))))
    await asyncio.sleep(0)
    closing = asyncio.create_task(batcher.close())
    await asyncio.sleep(0)
    run.release.set()
    await closing
    for task in (first, queued):
        with pytest.raises(Unavailable):
            await task
    with pytest.raises(Unavailable):
        await batcher.submit(np.zeros((1, 1)))


async def test_batched_evaluation_equals_unbatched_on_the_network(tiny_model, positions):
    registered = RegisteredModel(name="connect4-pv", version="v", architecture="connect4_pv",
                                 parameter_count=1, device="cpu", metadata={}, config={},
                                 module=tiny_model)
    evaluator = PositionEvaluator("connect4-pv", max_batch=256, max_wait_ms=20)
    evaluator.install(ModelRegistry({"connect4-pv": registered}))
    parsed = [Position.from_moves(m) for m in positions]
    planes = np.stack([encode(p) for p in parsed])
    legal = np.stack([legal_mask(p) for p in parsed])
    answers = await asyncio.gather(*(evaluator.evaluate("", planes[i:i + 1], legal[i:i + 1])
                                     for i in range(len(parsed))))
    batcher = evaluator.batcher("connect4-pv")
    assert batcher.forward_passes < len(parsed)
    for i, (model, policy, value) in enumerate(answers):
        assert model is registered
        alone_policy, alone_value = predict(tiny_model, planes[i:i + 1], legal[i:i + 1])
        np.testing.assert_allclose(policy, alone_policy, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(value, alone_value, rtol=1e-5, atol=1e-6)
    await evaluator.close()


async def test_a_new_version_gets_a_new_batcher_and_the_old_one_finishes_its_requests():
    pool = BatcherPool(max_batch=8, max_wait_ms=0)
    old = _Recorder(hold_first=True)
    in_flight = asyncio.create_task(pool.submit("m", "v1", old, np.ones((1, 1))))
    await _until(lambda: old.sizes)
    old_batcher = pool.get("m")

    def new(x):
        return (x * 3,)

    (answer,) = await pool.submit("m", "v2", new, np.ones((1, 1)))
    assert answer[0, 0] == 3 and pool.get("m") is not old_batcher
    assert not old_batcher._closed  # still answering its request
    old.release.set()
    (held,) = await in_flight
    assert held[0, 0] == 2  # answered by the version it was submitted to
    await _until(lambda: old_batcher._closed)
    (again,) = await pool.submit("m", "v2", old, np.ones((1, 1)))
    assert again[0, 0] == 3  # the running batcher keeps its own function
    current = pool.get("m")
    await pool.close()
    assert pool.get("m") is None
    with pytest.raises(Unavailable):
        await current.submit(np.ones((1, 1)))
