"""The mcts service's Connect Four game on boards other than 7x6 (`services.mcts.games.connect4
.game(board)`): its kernels follow `libs.connect4.board.Position` on that board, its rollouts play
legal games to their end, and a search on a small board finds the winning column."""

from __future__ import annotations

import random

import numpy as np
import pytest

from libs.connect4.board import Position
from libs.connect4.geometry import STANDARD, Board
from services.mcts.core.config import SearchConfig
from services.mcts.games.connect4 import GAME, UNIFORM_GAME, from_position, game, initial_state
from services.mcts.native.kernel_cache import _function_key
from services.mcts.rollout.connect4 import search_position

BOARDS = [Board(4, 4), Board(5, 4), Board(6, 5), Board(9, 4)]


def test_the_standard_board_is_the_module_game() -> None:
    assert game() is GAME and game(STANDARD, decisive=False) is UNIFORM_GAME
    assert game(Board(5, 4)).name == "connect4-5x4" and game(Board(5, 4)).num_actions == 5


@pytest.mark.parametrize("board", BOARDS, ids=lambda b: b.name)
def test_legal_actions_and_play_follow_the_position(board: Board) -> None:
    g = game(board)
    rng = random.Random(board.bits)
    out = np.zeros(board.columns, dtype=np.int64)
    for _ in range(30):
        position = Position.from_moves("", board)
        state = initial_state()
        while True:
            count = g.legal_actions(state, out)
            assert out[:count].tolist() == position.legal_columns()
            if count == 0:
                break
            col = rng.choice(position.legal_columns())
            over = g.play(state, col)
            position = position.play(col)
            assert over == position.is_finished
            assert state.tolist() == from_position(position).tolist()
        assert g.outcome(state, None) == (1.0 if position.won else 0.0)
        assert g.encode(state).shape == (2, board.rows, board.columns)


@pytest.mark.parametrize("board", BOARDS, ids=lambda b: b.name)
@pytest.mark.parametrize("decisive", [True, False])
def test_rollouts_play_legal_games_to_their_end(board: Board, decisive: bool) -> None:
    rollout = game(board, decisive).rollout
    rng = np.array([12345], dtype=np.uint64)
    moves = np.zeros(board.cells, dtype=np.int64)
    for _ in range(50):
        result, ply = rollout(initial_state(), rng, moves, 0, True)
        position = Position.from_moves("".join(str(c + 1) for c in moves[:ply]), board)
        assert position.is_finished
        assert result == (1.0 if position.won else 0.0)


def test_a_search_on_a_small_board_takes_the_win() -> None:
    board = Board(5, 4)
    root = Position.from_moves("1212123", board)  # the second player wins in column 2
    result = search_position(root, 2_000, SearchConfig(seed=3))
    assert result.best_action == 2


def test_the_kernel_cache_tells_the_board_sizes_apart() -> None:
    # The rollout kernel's disk cache names a game function by what it is; two board sizes'
    # kernels share their code and differ only by the constants they closed over.
    from_key = _function_key
    small, standard = game(Board(5, 4)), game(STANDARD)
    for name in ("legal_actions", "play", "rollout"):
        a = from_key(getattr(small, name).py_func)
        b = from_key(getattr(standard, name).py_func)
        assert a != b and a == from_key(getattr(game(Board(5, 4)), name).py_func)
