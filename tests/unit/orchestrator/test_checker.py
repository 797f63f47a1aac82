"""The exact checker on positions whose answers are known."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time

import pytest

import libs.connect4.solver as checker_module
from libs.connect4 import Position
from libs.connect4.solver import CancelToken, MoveScores, Solver
from libs.data import REPO_DATA
from services.orchestrator.agents.checker import CheckerAgent, CheckerBudget
from services.orchestrator.loop.types import AgentName, Proposal, Round, Tally
from services.orchestrator.problems.connect_four import (
    ConnectFourProblem,
    ExactResult,
    Outcome,
    synthesize_connect_four,
)

PONS = REPO_DATA / "connect4-pons" / "Test_L3_R1"


def round_of(moves: str) -> Round:
    return Round(problem=ConnectFourProblem(Position.from_moves(moves)), iteration=1,
                 simulations=1, seed=0, deadline=time.monotonic() + 60)


async def test_immediate_win_is_exact():
    # First player has three stones in column 1 (moves 1,3,5) and plays column 1 again.
    proposal = await CheckerAgent(0).propose(round_of("121212"))
    assert proposal.answer == "1" and proposal.verified
    assert proposal.detail.score == (43 - 6) // 2
    assert proposal.detail.outcome is Outcome.WIN


async def test_forced_block_is_verified_without_a_solve():
    # Second player to move; first player threatens column 1 (three stones stacked).
    proposal = await CheckerAgent(0).propose(round_of("12131"))
    assert proposal.answer == "1" and proposal.verified
    assert proposal.detail.score is None


async def test_two_threats_are_an_exact_loss():
    # The first player holds columns 2, 3, 4 of the bottom row; 1 and 5 are open: two threats.
    proposal = await CheckerAgent(0).propose(round_of("27374"))
    assert proposal.verified and proposal.detail.outcome is Outcome.LOSS
    assert proposal.detail.score == -((42 - 5) // 2)
    assert proposal.answer in {"1", "5"}


async def test_solver_result_matches_pons_scores():
    if not PONS.exists():
        pytest.skip("shared Pons data not present")
    checker = CheckerAgent(2_000_000)
    for line in PONS.read_text().splitlines()[:5]:
        moves, score = line.split()
        proposal = await checker.propose(round_of(moves))
        assert proposal.verified
        assert proposal.detail.score == int(score)
        column_scores = proposal.detail.column_scores
        # The chosen column keeps the outcome: its score is the position's score.
        assert column_scores[int(proposal.answer) - 1] == int(score)


def test_unsolved_position_abstains_and_excludes_the_move_that_loses_at_once():
    # Playing column 3 here puts a stone right below the opponent's winning cell.
    problem = ConnectFourProblem(Position.from_moves("4247255"))
    unsolved = MoveScores(scores=(None,) * 7, nodes=100, complete=False)
    proposal = CheckerAgent.from_scores(problem, unsolved)
    assert proposal.answer is None and not proposal.verified
    assert proposal.excluded == frozenset({"3"})


def test_partial_scores_with_a_proved_win_give_that_column():
    problem = ConnectFourProblem(Position.from_moves("4247255"))
    partial = MoveScores(scores=(None, None, None, 5, None, None, None), nodes=100,
                         complete=False)
    proposal = CheckerAgent.from_scores(problem, partial)
    assert proposal.answer == "4" and proposal.verified and proposal.detail.score is None


def test_complete_scores_pick_the_best_column_nearest_the_centre():
    problem = ConnectFourProblem(Position.from_moves("4247255"))
    complete = MoveScores(scores=(-2, 1, 1, 0, 1, -3, -4), nodes=100, complete=True)
    proposal = CheckerAgent.from_scores(problem, complete)
    assert proposal.answer == "3" and proposal.detail.score == 1
    assert proposal.detail.outcome is Outcome.WIN and proposal.value == 1.0


def test_the_node_budget_follows_the_moves_played():
    budget = CheckerBudget(max_nodes=2_000_000, min_moves=8, base_nodes=2_000)
    assert [budget.nodes_for(n) for n in (0, 7, 8, 9, 10, 11, 12, 30)] == [
        0, 0, 2_000, 16_000, 128_000, 1_024_000, 2_000_000, 2_000_000]
    assert CheckerBudget(max_nodes=5).nodes_for(0) == 5  # the flat budget of old
    early = CheckerBudget(max_nodes=2_000_000, min_moves=8, base_nodes=2_000, early_nodes=500)
    assert [early.nodes_for(n) for n in (0, 7, 8, 9)] == [500, 500, 2_000, 16_000]
    assert CheckerBudget(max_nodes=100, min_moves=8, early_nodes=500).nodes_for(3) == 100
    assert CheckerBudget(max_nodes=0, base_nodes=10).nodes_for(20) == 0
    with pytest.raises(ValueError):
        CheckerBudget(time_budget_s=0)


async def test_an_early_budget_proves_a_winning_column_of_an_early_position():
    # Pons Test_L1 "362363" (6 moves): 2,000 nodes do not finish the solve but prove column 4
    # winning, so the checker answers with the position's value, as a proof it may settle with.
    checker = CheckerAgent(CheckerBudget(min_moves=8, base_nodes=2_000, early_nodes=2_000),
                           first_max_nodes=16_000)
    problem = ConnectFourProblem(Position.from_moves("362363"))
    assert checker.settles_first(problem)
    proposal = await checker.propose(round_of("362363"))
    assert proposal.answer == "4" and proposal.verified and proposal.value == 1.0
    assert proposal.detail.nodes == 2_000 and "proved win" in proposal.rationale


async def test_below_score_min_moves_the_solve_stops_at_the_first_winning_column():
    # Pons Test_L1 "7413637" (7 moves): column 4 is proved winning after 615 nodes; going on for
    # the exact score would spend the whole 2,000 without finishing.
    def checker(score_min_moves: int) -> CheckerAgent:
        return CheckerAgent(CheckerBudget(min_moves=8, base_nodes=2_000, early_nodes=2_000,
                                          score_min_moves=score_min_moves))

    stopped = await checker(10).propose(round_of("7413637"))
    assert stopped.answer == "4" and stopped.value == 1.0 and stopped.verified
    assert stopped.detail.nodes < 1_000 and stopped.detail.outcome is Outcome.WIN
    assert stopped.detail.score is None
    full = await checker(0).propose(round_of("7413637"))
    assert full.answer == "4" and full.value == 1.0 and full.detail.nodes == 2_000
    with pytest.raises(ValueError):
        CheckerBudget(score_min_moves=-1)


def test_a_proved_win_beats_the_forced_block_that_it_is():
    # The opponent threatens column 4 and column 4 is proved winning: the proposal carries the
    # position's value (it may settle the round), not only the forced block's column.
    problem = ConnectFourProblem(Position.from_moves("635673616"))
    partial = MoveScores(scores=(None, None, None, 11, None, None, None), nodes=894,
                         complete=False)
    proposal = CheckerAgent.from_scores(problem, partial)
    assert proposal.answer == "4" and proposal.value == 1.0 and "proved win" in proposal.rationale
    assert proposal.detail.outcome is Outcome.WIN


async def test_an_early_position_is_not_solved_and_abstains_at_once():
    checker = CheckerAgent(CheckerBudget(min_moves=8, base_nodes=2_000))
    proposal = await checker.propose(round_of("4453"))
    assert proposal.answer is None and not proposal.verified
    assert "fewer than 8" in proposal.rationale
    assert proposal.detail.nodes == 0


async def test_the_time_budget_stops_a_solve_the_nodes_would_allow():
    # Two moves in: no budget of 50,000,000 nodes finishes this, so the 20 ms budget ends it.
    checker = CheckerAgent(CheckerBudget(max_nodes=50_000_000, time_budget_s=0.02))
    proposal = await checker.propose(round_of("44"))
    assert proposal.answer is None
    assert "not solved within 20 ms" in proposal.rationale
    assert proposal.detail.nodes < 50_000_000


async def test_a_cancelled_request_stops_the_solver(monkeypatch):
    finished: list[MoveScores] = []
    done = threading.Event()

    def recording(*args):
        try:
            finished.append(checker_module.best_moves(*args))
        finally:
            done.set()
        return finished[-1]

    monkeypatch.setattr("services.orchestrator.agents.checker.best_moves", recording)
    checker = CheckerAgent(CheckerBudget(max_nodes=50_000_000))
    task = asyncio.create_task(checker.propose(round_of("44")))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # The worker thread returns once cancelled instead of running its 50M nodes.
    assert await asyncio.to_thread(done.wait, 30)
    assert not finished[0].complete and finished[0].nodes < 50_000_000


def test_a_cancel_token_stops_the_kernel_from_another_thread():
    solver = Solver(table_size=(1 << 18) + 3)
    token = CancelToken()
    timer = threading.Timer(0.02, token.cancel)
    timer.start()
    scores = solver.best_moves("4", 50_000_000, cancel=token)
    timer.join()
    assert not scores.complete and token.cancelled
    assert scores.nodes < 50_000_000
    # A token cancelled before the call makes it return without a node.
    assert solver.best_moves("4", 50_000_000, cancel=token).nodes == 0


def test_the_checker_settles_first_only_where_its_node_budget_is_small() -> None:
    budget = CheckerBudget(min_moves=8, base_nodes=2_000)  # 2,000 at 8 moves, 16,000 at 9
    checker = CheckerAgent(budget, first_max_nodes=16_000)
    first = {n: checker.settles_first(ConnectFourProblem(Position.from_moves(m)))
             for n, m in [(4, "4453"), (8, "44536712"), (9, "445367121"), (10, "4453671212")]}
    assert first == {4: True, 8: True, 9: True, 10: False}
    assert not CheckerAgent(budget).settles_first(ConnectFourProblem(Position.from_moves("4453")))
    with pytest.raises(ValueError):
        CheckerAgent(budget, first_max_nodes=-1)


def test_a_proved_win_without_its_score_gives_the_answer_value_one() -> None:
    problem = ConnectFourProblem(Position.from_moves("4453"))
    proved = Proposal("4", 1.0, "proved win (score +3 after the move)", value=1.0,
                      verified=True)
    tally = Tally("4", 1.0, 1.0, True, True)
    answer = synthesize_connect_four(problem, tally, {AgentName.CHECKER: proved})
    assert answer.value == 1.0 and answer.outcome is None
    # With the solver's column scores, the proof gives the outcome too, without the score.
    proof = ExactResult(None, (None, None, None, 3, None, None, None), 100)
    answer = synthesize_connect_four(problem, tally, {AgentName.CHECKER: dataclasses.replace(
        proved, detail=proof)})
    assert (answer.value, answer.outcome, answer.score) == (1.0, Outcome.WIN, 0)
    searched = Proposal("4", 0.5, "visits", value=0.25)
    abstained = Proposal(None, 0.0, "not solved")
    answer = synthesize_connect_four(problem, tally, {AgentName.CHECKER: abstained,
                                                      AgentName.MCTS: searched})
    assert answer.value == 0.25
