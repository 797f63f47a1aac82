"""CUDA graphs answer exactly what eager torch answers on the same GPU: the Connect Four
policy/value network at padded and unpadded batch sizes (with stale padded rows from an earlier,
larger call), and the shipped TRM's segment loop in both halting modes; the evaluator and the
solver use them on a GPU when asked. The GPU tests run only where torch sees CUDA (never in CI:
`bench/gpu.sh` runs them on a lent GPU); the padding arithmetic and the refusals run everywhere."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
import torch

from libs.connect4.board import Position, encode, legal_mask
from services.neural.checkpoint import load_checkpoint
from services.neural.cuda_graphs import (
    GraphedPolicyValue,
    GraphedSegments,
    padded_size,
    padded_sizes,
)
from services.neural.evaluator import PositionEvaluator
from services.neural.models.connect4_pv import predict
from services.neural.reasoning_segments import run_segments
from services.neural.reasoning_solver import ReasoningSolver, solve_batch
from services.neural.registry import ModelRegistry

ROOT = Path(__file__).resolve().parents[3]
PONS = ROOT.parent / "shared" / "data" / "connect4-pons" / "Test_L2_R1"
cuda = pytest.mark.skipif(not torch.cuda.is_available(),
                          reason="needs a CUDA GPU, torch sees none (bench/gpu.sh runs it on one)")


def test_batches_pad_to_the_next_power_of_two_within_the_largest_batch():
    assert [padded_size(rows, 256) for rows in (1, 2, 3, 5, 64, 65, 200, 256)] == [
        1, 2, 4, 8, 64, 128, 256, 256]
    assert padded_size(101, 100) is None and padded_size(65, 100) == 100
    assert padded_sizes(256) == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert padded_sizes(100) == [1, 2, 4, 8, 16, 32, 64, 100] and padded_sizes(1) == [1]
    with pytest.raises(ValueError, match="at least one row"):
        padded_size(0, 8)


def test_graphs_refuse_a_model_on_the_cpu():
    network = load_checkpoint(ROOT / "models" / "connect4-pv").model
    with pytest.raises(ValueError, match="CUDA device"):
        GraphedPolicyValue(network, 8)
    trm = load_checkpoint(ROOT / "models" / "trm-sudoku6-b16").model
    with pytest.raises(ValueError, match="CUDA device"):
        GraphedSegments(trm, 8)


def _positions(rows: int, offset: int = 0) -> tuple[np.ndarray, np.ndarray]:
    moves = [line.split()[0] for line in PONS.read_text().splitlines() if line.strip()]
    boards = [Position.from_moves(moves[(offset + i) % len(moves)]) for i in range(rows)]
    return (np.stack([encode(b) for b in boards]).astype(np.float32),
            np.stack([legal_mask(b) for b in boards]))


@cuda
def test_policy_value_graphs_answer_what_eager_torch_answers():
    network = load_checkpoint(ROOT / "models" / "connect4-pv", device="cuda").model
    graphed = GraphedPolicyValue(network, max_batch=64)
    graphed.capture_all()
    for rows, offset in ((64, 0), (3, 100), (1, 7), (37, 200), (80, 300)):  # 80: eager fallback
        planes, legal = _positions(rows, offset)
        policy, value = graphed.predict(planes, legal)
        expected_policy, expected_value = predict(network, planes, legal)
        assert policy.shape == (rows, 7) and value.shape == (rows,)
        np.testing.assert_allclose(policy, expected_policy, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(value, expected_value, rtol=1e-5, atol=1e-6)
        assert np.all(policy[~legal] == 0.0)


@cuda
@pytest.mark.parametrize("act", [False, True])
def test_segment_graphs_answer_what_the_eager_segment_loop_answers(act):
    model = load_checkpoint(ROOT / "models" / "trm-sudoku6-b16", device="cuda").model.eval()
    step = GraphedSegments(model, max_batch=8)
    generator = torch.Generator().manual_seed(3)
    vocab = model.config.vocab_size
    for rows in (8, 1, 5):  # 5 pads to 8 over the rows the first call left
        inputs = torch.randint(1, vocab, (rows, model.config.seq_len), generator=generator)
        inputs = inputs.to("cuda", torch.int32)
        ids = torch.zeros(rows, dtype=torch.int32, device="cuda")
        eager = run_segments(model, inputs, ids, 6, act)
        graphed = run_segments(model, inputs, ids, 6, act, step=step)
        # With graphs the stop is read at once (eager CUDA reads it a segment late), so an
        # "act" run may hold one segment fewer: compare the segments both ran.
        ran = min(len(graphed.predictions), len(eager.predictions))
        assert torch.equal(graphed.predictions[:ran], eager.predictions[:ran])
        assert torch.equal(graphed.segments_used, eager.segments_used)
        assert torch.equal(graphed.answers, eager.answers)
        # bf16 under autocast: a padded batch is another matrix shape, so cuBLAS may pick
        # another kernel and round differently (the H100 gave 2 bf16 ulps, 0.03 on logits ~4).
        torch.testing.assert_close(graphed.q_halt_logits[:ran], eager.q_halt_logits[:ran],
                                   rtol=2e-2, atol=6e-2)


@cuda
def test_the_evaluator_and_the_solver_use_graphs_on_a_gpu():
    registry = ModelRegistry.load(ROOT / "models", "cuda:0")
    evaluator = PositionEvaluator("connect4-pv", max_batch=16, max_wait_ms=0, runtime="torch",
                                  cuda_graphs=True)
    evaluator.prepare(registry)
    evaluator.install(registry)
    planes, legal = _positions(5)
    _, policy, value = asyncio.run(evaluator.evaluate("", planes, legal))
    expected_policy, expected_value = predict(registry.get("connect4-pv").module, planes, legal)
    np.testing.assert_allclose(policy, expected_policy, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(value, expected_value, rtol=1e-5, atol=1e-6)

    solver = ReasoningSolver(lambda: registry, max_batch=16, max_wait_ms=0, cuda_graphs=True)
    solver.prepare(registry)
    model = registry.get("trm-sudoku6-b16")
    assert solver.graphs(model) is not None
    grid = model.task.placeholder()
    solution = asyncio.run(solver.solve("trm-sudoku6-b16", grid, "act", max_segments=12))
    inputs = model.task.encode(grid)[None]
    predictions, _, used = solve_batch(model.module, inputs, np.array([12]), np.array([True]))
    assert solution.segments_used == int(used[0])
    assert solution.grid == model.task.decode(predictions[0, solution.segments_used - 1])
