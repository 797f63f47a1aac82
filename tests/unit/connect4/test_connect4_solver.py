"""The exact solver against the scores of Pascal Pons' benchmark files."""

from __future__ import annotations

import pytest

from libs.connect4.board import IllegalPosition, Position
from libs.connect4.solver import Solver, best_moves, solve


def sign(x: int) -> int:
    return (x > 0) - (x < 0)


@pytest.fixture(scope="module")
def solver() -> Solver:
    return Solver()


@pytest.mark.parametrize(("name", "limit"), [("Test_L3_R1", 100), ("Test_L2_R1", 50),
                                             ("Test_L2_R2", 4)])
def test_strong_scores_match_pons(read_pons, solver: Solver, name: str, limit: int) -> None:
    rows = read_pons(name, limit)
    assert len(rows) == limit
    wrong = [(m, s, solver.solve(m).score) for m, s in rows if solver.solve(m).score != s]
    assert wrong == []


@pytest.mark.parametrize(("name", "limit"), [("Test_L3_R1", 100), ("Test_L2_R1", 50)])
def test_weak_results_match_the_sign_of_pons_scores(read_pons, name: str, limit: int) -> None:
    fresh = Solver(table_size=(1 << 18) + 3)  # an empty table: no help from strong results
    for moves, score in read_pons(name, limit):
        result = fresh.solve(moves, weak=True)
        assert result.complete
        assert result.score == sign(score), moves


def test_best_moves_agree_with_the_position_score(read_pons, solver: Solver) -> None:
    for moves, score in read_pons("Test_L2_R1", 10):
        scores = solver.best_moves(moves)
        assert scores.complete
        known = [s for s in scores.scores if s is not None]
        assert max(known) == score
        pos = Position.from_moves(moves)
        assert [s is not None for s in scores.scores] == [pos.can_play(c) for c in range(7)]
        for column in scores.best_columns():
            assert -solver.solve(pos.play(column - 1)).score == score or pos.is_winning_move(
                column - 1
            )


def test_stop_at_win_keeps_every_score_it_gives_and_a_winning_column(read_pons,
                                                                    solver: Solver) -> None:
    wins = 0
    for moves, score in read_pons("Test_L2_R1", 30):
        full = solver.best_moves(moves)
        stopped = solver.best_moves(moves, stop_at_win=True)
        assert stopped.nodes <= full.nodes
        # Every score it gives is the full solve's; unsolved columns stay None.
        assert all(s is None or s == f for s, f in zip(stopped.scores, full.scores, strict=True))
        if score > 0:
            wins += 1
            assert any(s is not None and s > 0 for s in stopped.scores)
        else:
            assert stopped == full  # no column wins, so nothing stops early
    assert wins >= 5


def test_stop_at_win_spends_fewer_nodes_and_still_scores_the_forced_columns() -> None:
    # Pons Test_L1 "7413637": column 4 proved winning (score 12) after 615 nodes; the full solve
    # spends its 16,000 nodes on columns 2, 3 and 5 without finishing.
    stopped = Solver().best_moves("7413637", 16_000, stop_at_win=True)
    assert stopped.scores == (None, None, None, 12, None, None, None)
    assert stopped.nodes < 1_000 and not stopped.complete
    assert Solver().best_moves("7413637", 16_000).nodes == 16_000
    # "13372526": the opponent threatens column 4; the block wins and every other column hands
    # the opponent the game at once, so those are scored without search and the result is exact.
    forced = Solver().best_moves("13372526", 16_000, stop_at_win=True)
    assert forced == Solver().best_moves("13372526", 16_000)
    assert forced.complete and forced.scores == (-17, -17, -17, 12, -17, -17, -17)


def test_immediate_win_scores_by_stones_played() -> None:
    # First player to move with three on the bottom row: winning with the 4th stone scores 18.
    assert solve("112233").score == 18
    # The winning column is scored without search; the others need far more than 1,000 nodes.
    partial = best_moves("112233", max_nodes=1_000)
    assert partial.scores[3] == 18 and not partial.complete
    assert partial.best_columns() == [4]
    assert solve("112233", weak=True).score == 1


def test_budget_ran_out_gives_no_score(read_pons) -> None:
    moves, _ = read_pons("Test_L2_R2", 1)[0]
    result = Solver().solve(moves, max_nodes=50)
    assert result.score is None and not result.complete
    assert result.nodes == 50
    partial = Solver().best_moves(moves, max_nodes=50)
    assert not partial.complete
    assert any(s is None for s in partial.scores)


def test_finished_games_are_not_solved() -> None:
    with pytest.raises(IllegalPosition):
        solve("1212121")


def test_a_budgeted_call_does_not_depend_on_earlier_calls(read_pons) -> None:
    # Solving a position fully fills the table with its bounds; before every call started from an
    # empty table, the same position with a third of those nodes then finished on the warm solver
    # and not on a fresh one, so identical requests to the checker got different answers.
    moves, _ = read_pons("Test_L2_R2", 1)[0]
    warm = Solver(table_size=(1 << 18) + 3)
    full = warm.best_moves(moves)
    assert full.complete and full.nodes > 3_000
    budget = full.nodes // 3
    again = warm.best_moves(moves, max_nodes=budget)
    cold = Solver(table_size=(1 << 18) + 3).best_moves(moves, max_nodes=budget)
    assert again == cold
    assert not again.complete


def test_results_survive_the_table_zeroing_every_255_calls(read_pons) -> None:
    rows = read_pons("Test_L3_R1", 20)
    solver = Solver(table_size=(1 << 18) + 3)
    for call in range(600):  # past two wraps of the generation
        moves, score = rows[call % len(rows)]
        assert solver.solve(moves).score == score, (call, moves)
