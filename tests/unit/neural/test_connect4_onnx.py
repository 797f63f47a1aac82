"""The onnxruntime runner of the Connect Four network answers what torch answers, and the
evaluator uses it on the CPU unless told to use torch."""

from __future__ import annotations

import numpy as np

from libs.connect4.board import Position, encode, legal_mask
from services.neural.checkpoint import save_checkpoint
from services.neural.evaluator import PositionEvaluator
from services.neural.models.connect4_onnx import OnnxPolicyValue
from services.neural.models.connect4_pv import ARCHITECTURE, predict
from services.neural.registry import ModelRegistry


def _batch(positions: list[str]) -> tuple[np.ndarray, np.ndarray]:
    boards = [Position.from_moves(moves) for moves in positions]
    return (np.stack([encode(board) for board in boards]).astype(np.float32),
            np.stack([legal_mask(board) for board in boards]))


def test_onnx_policy_and_value_match_torch_at_every_batch_size(tiny_model, positions):
    runner = OnnxPolicyValue(tiny_model)
    planes, legal = _batch(positions)
    for rows in (1, 3, len(positions)):
        policy, value = runner.predict(planes[:rows], legal[:rows])
        expected_policy, expected_value = predict(tiny_model, planes[:rows], legal[:rows])
        assert policy.dtype == np.float32 and value.dtype == np.float32
        assert policy.shape == (rows, 7) and value.shape == (rows,)
        np.testing.assert_allclose(policy, expected_policy, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(value, expected_value, rtol=1e-5, atol=1e-6)
    # Column 4 is full in the third position: no probability there, the rest sums to 1.
    policy, _ = runner.predict(planes, legal)
    assert policy[2, 3] == 0.0
    np.testing.assert_allclose(policy.sum(axis=1), 1.0, rtol=1e-5)


def test_the_evaluator_runs_onnxruntime_on_the_cpu_and_torch_when_asked(tmp_path, tiny_model,
                                                                         positions):
    save_checkpoint(tmp_path / "connect4-pv", tiny_model, ARCHITECTURE)
    registry = ModelRegistry.load(tmp_path, "cpu")
    model = registry.get("connect4-pv")
    onnx = PositionEvaluator("connect4-pv", max_batch=8, max_wait_ms=0)
    plain = PositionEvaluator("connect4-pv", max_batch=8, max_wait_ms=0, runtime="torch")
    onnx.prepare(registry)
    assert getattr(onnx.runner(model), "__self__", None).__class__ is OnnxPolicyValue
    assert getattr(plain.runner(model), "__self__", None) is None
    planes, legal = _batch(positions)
    expected = predict(tiny_model, planes, legal)
    for runner in (onnx.runner(model), plain.runner(model)):
        for got, want in zip(runner(planes, legal), expected, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
