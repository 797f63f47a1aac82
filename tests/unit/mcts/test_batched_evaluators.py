"""Leaf evaluators of the batched search: built-in games replayed from the leaf's path (legal
masks and terminal outcomes from the game), and Connect Four by a network in one call per batch."""

from __future__ import annotations

import subprocess
import sys

import numpy as np

from libs.connect4.board import Position, legal_mask
from services.mcts.batched.evaluators import (
    GameEvaluator,
    NeuralConnectFourEvaluator,
    replay,
    run_batched_async,
)
from services.mcts.batched.search import BatchedSearch, run_batched
from services.mcts.core.config import BatchedConfig
from services.mcts.games import connect4, tictactoe


def test_game_evaluator_masks_illegal_actions_and_scores_terminal_leaves_exactly():
    # X: 0, 1; O: 3, 4; X to move: cell 2 wins at once.
    root = tictactoe.from_moves([0, 3, 1, 4])
    evaluator = GameEvaluator(tictactoe.GAME, root, seed=1)
    search = BatchedSearch(9, 1, BatchedConfig())
    root_batch = search.next_batch()
    priors, values, terminal = evaluator(root_batch)
    assert priors[0].tolist() == [0, 0, 0.2, 0, 0, 0.2, 0.2, 0.2, 0.2]
    assert not terminal[0] and -1 <= values[0] <= 1
    search.submit(priors, values, terminal)
    batch = search.next_batch()
    assert batch.paths == [[2]]
    priors, values, terminal = evaluator(batch)
    # The player to move at the leaf (O) has lost.
    assert terminal.tolist() == [True] and values.tolist() == [-1.0]


def test_puct_with_rollouts_finds_the_winning_move():
    root = tictactoe.from_moves([0, 3, 1, 4])
    search = BatchedSearch(9, 300, BatchedConfig(batch_size=4, c_puct=1.5))
    result = run_batched(search, GameEvaluator(tictactoe.GAME, root, seed=2))
    assert result.action == 2 and result.values[2] == 1.0


def test_connect_four_replay_detects_the_end_of_the_game():
    root = connect4.from_position(Position.from_moves("112233"))
    state, ended = replay(connect4.GAME, root, [3])
    assert ended
    state, ended = replay(connect4.GAME, root, [4, 3])
    assert not ended


async def test_the_neural_evaluator_makes_one_call_per_batch_and_never_sends_finished_games():
    calls = []

    async def evaluate_positions(moves: list[str]):
        calls.append(list(moves))
        policy = np.stack([legal_mask(Position.from_moves(m)).astype(np.float32)
                           for m in moves])
        policy /= policy.sum(axis=1, keepdims=True)
        return policy, np.zeros(len(moves), dtype=np.float32)

    evaluator = NeuralConnectFourEvaluator("112233", evaluate_positions)
    search = BatchedSearch(7, 200, BatchedConfig(batch_size=8, c_puct=2.0))
    result = await run_batched_async(search, evaluator)
    assert result.action == 3 and result.values[3] == 1.0
    assert evaluator.calls == len(calls) <= result.batches
    assert sum(len(c) for c in calls) < result.evaluations
    for batch_moves in calls:
        assert all(m.startswith("112233") for m in batch_moves)
        # Every position sent goes on (Position.from_moves would reject a finished game's moves).
        assert all(not Position.from_moves(m).is_finished for m in batch_moves)


def test_the_batched_core_imports_no_grpc():
    code = ("import sys; import services.mcts.batched.search, services.mcts.batched.evaluators; "
            "assert not any(m == 'grpc' or m.startswith('grpc.') for m in sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
