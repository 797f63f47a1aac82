"""A policy/value network plays one board size: its config records it, the runners (torch, ONNX)
take its shape, and the evaluator gives a request on a board to a network of that board, or fails
with FAILED_PRECONDITION naming the board; the standard 7x6 board keeps its default model."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from libs.connect4.board import Position, encode, legal_mask
from libs.connect4.geometry import STANDARD, Board
from libs.errors import FailedPrecondition, InvalidArgument, NotFound, Unavailable
from services.neural.checkpoint import CheckpointError, save_checkpoint
from services.neural.evaluator import PositionEvaluator
from services.neural.models.connect4_onnx import OnnxPolicyValue
from services.neural.models.connect4_pv import (
    ARCHITECTURE,
    Connect4PV,
    Connect4PVConfig,
    predict,
)
from services.neural.registry import ModelRegistry
from services.neural.warmup import warm_up

SMALL = Board(5, 4)


def network(board: Board = STANDARD, seed: int = 5) -> Connect4PV:
    torch.manual_seed(seed)
    return Connect4PV(Connect4PVConfig(channels=8, blocks=1, value_hidden=16,
                                       columns=board.columns, rows=board.rows)).eval()


def batch(board: Board, *moves: str) -> tuple[np.ndarray, np.ndarray]:
    positions = [Position.from_moves(m, board) for m in moves]
    return (np.stack([encode(p) for p in positions]),
            np.stack([legal_mask(p) for p in positions]))


def test_a_small_board_network_takes_its_planes_and_answers_a_policy_per_column():
    planes, legal = batch(SMALL, "", "3333", "12")
    assert planes.shape == (3, 2, 4, 5) and legal.shape == (3, 5)
    policy, value = predict(network(SMALL), planes, legal)
    assert policy.shape == (3, 5) and value.shape == (3,)
    assert policy[1][2] == 0.0  # column 3 is full on four rows
    np.testing.assert_allclose(policy.sum(axis=1), 1.0, atol=1e-5)


def test_the_onnx_runner_matches_torch_on_a_small_board():
    model = network(SMALL)
    planes, legal = batch(SMALL, "", "3333", "1254")
    policy, value = OnnxPolicyValue(model).predict(planes, legal)
    expected_policy, expected_value = predict(model, planes, legal)
    np.testing.assert_allclose(policy, expected_policy, atol=1e-5)
    np.testing.assert_allclose(value, expected_value, atol=1e-5)


@pytest.fixture
def registry(tmp_path) -> ModelRegistry:
    save_checkpoint(tmp_path / "connect4-pv", network(), ARCHITECTURE)
    save_checkpoint(tmp_path / "connect4-small-b", network(SMALL, 6), ARCHITECTURE)
    save_checkpoint(tmp_path / "connect4-small-a", network(SMALL, 7), ARCHITECTURE)
    return ModelRegistry.load(tmp_path, "cpu")


def test_the_registry_reads_the_board_from_the_config(registry, tmp_path):
    assert {m.name: m.board for m in registry.list()} == {
        "connect4-pv": STANDARD, "connect4-small-a": SMALL, "connect4-small-b": SMALL}
    config = json.loads((tmp_path / "connect4-small-a" / "config.json").read_text())
    assert (config["config"]["columns"], config["config"]["rows"]) == (5, 4)


def test_a_config_without_a_board_plays_7x6_and_an_impossible_board_fails_loading(tmp_path):
    save_checkpoint(tmp_path / "old", network(), ARCHITECTURE)
    path = tmp_path / "old" / "config.json"
    document = json.loads(path.read_text())
    del document["config"]["columns"], document["config"]["rows"]
    path.write_text(json.dumps(document))
    assert ModelRegistry.load(tmp_path, "cpu").get("old").board == STANDARD
    save_checkpoint(tmp_path / "huge", Connect4PV(Connect4PVConfig(
        channels=8, blocks=1, value_hidden=16, columns=8, rows=6)), ARCHITECTURE)
    with pytest.raises(CheckpointError, match="huge.*board.*48 cells"):
        ModelRegistry.load(tmp_path, "cpu")


def test_a_request_goes_to_a_network_of_its_board(registry):
    evaluator = PositionEvaluator("connect4-pv", max_batch=8, max_wait_ms=0.0)
    evaluator.install(registry)
    assert evaluator.network_for("", STANDARD).name == "connect4-pv"
    assert evaluator.network_for("", SMALL).name == "connect4-small-a"  # first by name
    assert evaluator.network_for("connect4-small-b", SMALL).name == "connect4-small-b"
    with pytest.raises(FailedPrecondition, match="'connect4-pv' plays the 7x6 board; the "
                                                 "positions are on 5x4; loaded for 5x4: "
                                                 "connect4-small-a"):
        evaluator.network_for("connect4-pv", SMALL)
    with pytest.raises(FailedPrecondition, match="no policy/value network of the 6x5 board"):
        evaluator.network_for("", Board(6, 5))
    with pytest.raises(FailedPrecondition, match="plays the 5x4 board; the positions are on 7x6"):
        evaluator.network_for("connect4-small-a", STANDARD)
    with pytest.raises(NotFound):
        evaluator.network_for("nope", SMALL)


def test_the_default_model_answers_its_own_board_first(registry):
    evaluator = PositionEvaluator("connect4-small-b", max_batch=8, max_wait_ms=0.0)
    evaluator.install(registry)
    assert evaluator.network_for("", SMALL).name == "connect4-small-b"
    with pytest.raises(FailedPrecondition, match="plays the 5x4 board; the positions are on 7x6"):
        evaluator.network_for("", STANDARD)  # 7x6 keeps its rule: the default model or nothing


async def test_evaluate_runs_the_small_network(registry):
    evaluator = PositionEvaluator("connect4-pv", max_batch=8, max_wait_ms=0.0, runtime="torch")
    evaluator.install(registry)
    planes, legal = batch(SMALL, "", "3333")
    try:
        model, policy, value = await evaluator.evaluate("", planes, legal, SMALL)
    finally:
        await evaluator.close()
    expected_policy, expected_value = predict(registry.get("connect4-small-a").module, planes,
                                              legal)
    assert model.name == "connect4-small-a"
    np.testing.assert_allclose(policy, expected_policy, atol=1e-6)
    np.testing.assert_allclose(value, expected_value, atol=1e-6)


def test_no_registry_or_no_model_is_unavailable(tmp_path):
    evaluator = PositionEvaluator("connect4-pv", max_batch=8, max_wait_ms=0.0)
    with pytest.raises(Unavailable):
        evaluator.network_for("", SMALL)
    evaluator.install(ModelRegistry.load(tmp_path / "none", "cpu"))
    with pytest.raises(Unavailable):
        evaluator.network_for("", SMALL)


def test_a_network_of_another_game_loads_but_evaluates_no_connect_four(tmp_path):
    """Tic-tac-toe's network (3x3 planes, 9 actions) is a connect4_pv of another game."""
    save_checkpoint(tmp_path / "tictactoe-az", Connect4PV(Connect4PVConfig(
        channels=8, blocks=1, value_hidden=16, columns=3, rows=3, actions=9)), ARCHITECTURE)
    registry = ModelRegistry.load(tmp_path, "cpu")
    assert registry.get("tictactoe-az").board is None
    warm_up(registry.get("tictactoe-az"))  # its own shape: no Connect Four board
    evaluator = PositionEvaluator("connect4-pv", max_batch=8, max_wait_ms=0.0)
    evaluator.prepare(registry)
    evaluator.install(registry)
    with pytest.raises(InvalidArgument, match="network of another game"):
        evaluator.network_for("tictactoe-az", SMALL)
    with pytest.raises(FailedPrecondition, match="no policy/value network of the 5x4 board"):
        evaluator.network_for("", SMALL)
