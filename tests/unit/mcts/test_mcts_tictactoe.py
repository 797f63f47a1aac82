"""Tic-tac-toe as a game module of the general core: rules, encoding, and UCT finding forced wins
and blocks."""

from __future__ import annotations

import numpy as np
import pytest

from services.mcts.core.config import SearchConfig
from services.mcts.games import tictactoe
from services.mcts.games.tictactoe import GAME, IllegalMove, from_moves
from services.mcts.rollout.engine import search


def test_rules_and_encoding() -> None:
    state = from_moves([4, 0])
    buffer = np.empty(9, dtype=np.int64)
    count = tictactoe.legal_actions(state, buffer)
    assert buffer[:count].tolist() == [1, 2, 3, 5, 6, 7, 8]
    planes = tictactoe.encode(state)
    assert planes.shape == (2, 3, 3) and planes.dtype == np.float32
    assert planes[0, 1, 1] == 1 and planes[1, 0, 0] == 1 and planes.sum() == 2
    won = from_moves([0, 3, 1, 4, 2])
    assert tictactoe.legal_actions(won, buffer) == 0
    assert tictactoe.outcome(won, np.ones(1, dtype=np.uint64)) == 1.0
    drawn = from_moves([0, 1, 2, 4, 3, 5, 7, 6, 8])
    assert tictactoe.legal_actions(drawn, buffer) == 0
    assert tictactoe.outcome(drawn, np.ones(1, dtype=np.uint64)) == 0.0


@pytest.mark.parametrize("moves", [[9], [0, 0], [0, 3, 1, 4, 2, 5]])
def test_illegal_moves_raise(moves: list[int]) -> None:
    with pytest.raises(IllegalMove):
        from_moves(moves)


def test_a_finished_game_cannot_be_searched() -> None:
    with pytest.raises(ValueError):
        search(GAME, from_moves([0, 3, 1, 4, 2]), 10)


@pytest.mark.parametrize("rule", ["uct", "puct"])
@pytest.mark.parametrize(("moves", "answer"), [
    ([0, 3, 1, 4], 2),        # X completes the top row
    ([0, 4, 1], 2),           # O blocks the top row
    ([4, 0, 8, 2], 1),        # X blocks O's top row (0, 2)
    ([0, 4, 8, 2], 6),        # X blocks O's diagonal (2, 4)
    ([0, 1, 4], 8),           # O blocks X's diagonal (0, 4)
])
def test_uct_finds_the_forced_win_or_block(moves: list[int], answer: int, rule: str) -> None:
    result = search(GAME, from_moves(moves), 5_000, SearchConfig(rule=rule, seed=3))
    assert result.action == answer
