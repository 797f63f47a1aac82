from __future__ import annotations

import pytest

from libs.connect4.board import Position
from libs.connect4.outcome import SolverBudgetExhausted, keeps_outcome
from libs.connect4.solver import Solver


def test_the_solver_best_move_keeps_and_some_move_loses_a_won_position(read_pons) -> None:
    solver = Solver()
    checked = 0
    for moves, score in read_pons("Test_L2_R1", 30):
        if score <= 0:
            continue
        scores = solver.best_moves(moves)
        best = scores.best_columns()[0]
        assert keeps_outcome(moves, best, score, solver=solver)
        for column, s in enumerate(scores.scores, start=1):
            if s is not None and s <= 0:
                assert not keeps_outcome(moves, column, score, solver=solver)
                checked += 1
    assert checked > 0


def test_every_move_keeps_a_lost_position(read_pons) -> None:
    moves, score = next((m, s) for m, s in read_pons("Test_L3_R1", 50) if s < 0)
    pos = Position.from_moves(moves)
    assert all(keeps_outcome(moves, c + 1, score) for c in pos.legal_columns())


def test_illegal_columns_do_not_keep_it() -> None:
    assert not keeps_outcome("444444", 4, 1)
    assert not keeps_outcome("", 8, 1)


def test_an_immediate_win_keeps_a_won_position() -> None:
    assert keeps_outcome("112233", 4, 18)


def test_budget_exhausted_is_reported(read_pons) -> None:
    moves, score = next((m, s) for m, s in read_pons("Test_L2_R2", 40) if s >= 0)
    with pytest.raises(SolverBudgetExhausted):
        keeps_outcome(moves, 1, score, max_nodes=5, solver=Solver())
