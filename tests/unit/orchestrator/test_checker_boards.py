"""The exact checker on boards of other sizes: its tactics and scores follow the position's board,
every small-board position gets the full budget (so it votes beside the other agents rather than
settling first), the problem's routing feature counts the board's cells, and the routing log
names the board."""

from __future__ import annotations

import time

from libs.connect4 import Position
from libs.connect4.geometry import Board
from libs.connect4.solver import best_moves
from services.orchestrator.agents.checker import CheckerAgent, CheckerBudget, budget_moves
from services.orchestrator.loop.types import Round
from services.orchestrator.problems.connect_four import ConnectFourProblem, Outcome
from services.orchestrator.routing.log import problem_fields

SMALL = Board(5, 4)
RULES_BUDGET = CheckerBudget(max_nodes=2_000_000, min_moves=8, base_nodes=2_000,
                             early_nodes=2_000, score_min_moves=10)
"""The orchestrator's default budget."""


def round_of(moves: str, board: Board = SMALL) -> Round:
    return Round(problem=ConnectFourProblem(Position.from_moves(moves, board)), iteration=1,
                 simulations=1, seed=0, deadline=time.monotonic() + 60)


async def test_an_immediate_win_scores_on_the_boards_cells():
    # Three stones of the first player in column 1 of 5x4; the fourth wins with stone 4.
    proposal = await CheckerAgent(0).propose(round_of("121212"))
    assert proposal.answer == "1" and proposal.verified
    assert proposal.detail.score == (20 + 1 - 6) // 2
    assert proposal.detail.outcome is Outcome.WIN


async def test_two_threats_lose_with_the_boards_score():
    # 5x4: the first player threatens columns 1 and 5 at once; the second is to move.
    proposal = await CheckerAgent(0).propose(round_of("522333144"))
    assert "threatens columns 1, 5" in proposal.rationale
    assert proposal.verified and proposal.detail.outcome is Outcome.LOSS
    assert proposal.detail.score == -((20 - 9) // 2)


async def test_a_small_board_is_solved_exactly_and_not_first():
    agent = CheckerAgent(RULES_BUDGET, first_max_nodes=16_000)
    problem = ConnectFourProblem(Position.from_moves("3", SMALL))
    assert budget_moves(problem.position) == 1 + 42 - 20
    assert not agent.settles_first(problem)
    assert agent.settles_first(ConnectFourProblem(Position.from_moves("4")))  # 7x6 as before
    proposal = await agent.propose(round_of("3"))
    scores = best_moves(problem.position)
    assert proposal.verified and proposal.rationale.startswith("exact:")
    assert proposal.detail.score == max(s for s in scores.scores if s is not None)
    assert int(proposal.answer) in scores.best_columns()
    assert len(proposal.detail.column_scores) == 5


def test_the_routing_feature_counts_the_boards_cells():
    assert ConnectFourProblem(Position.from_moves("3333", SMALL)).query_length_norm == 4 / 20
    assert ConnectFourProblem(Position.from_moves("3333")).query_length_norm == 4 / 42
    assert ConnectFourProblem(Position.from_moves("", SMALL)).legal_answers() == (
        "1", "2", "3", "4", "5")


def test_the_routing_log_names_a_board_other_than_7x6():
    assert problem_fields(ConnectFourProblem(Position.from_moves("33", SMALL))) == {
        "board": "5x4"}
    assert problem_fields(ConnectFourProblem(Position.from_moves("33"))) is None
