"""Sudoku and mazes in the orchestrator: validation at the edge, the solver and checker agents, the
puzzle router, and the consensus loop that only ever answers with a verified answer."""

from __future__ import annotations

import asyncio
import functools
import threading
import time

import numpy as np
import pytest
from mesh.common.v1 import common_pb2
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

from libs.errors import FailedPrecondition, InvalidArgument, Unavailable
from libs.puzzles.maze import generate_maze
from libs.puzzles.sudoku import BoxShape, check_solution, generate, parse_puzzle
from services.orchestrator.agents.puzzle_checker import PuzzleCheckerAgent
from services.orchestrator.agents.solver import SolverAgent
from services.orchestrator.api.servicer import OrchestratorServicer
from services.orchestrator.loop.consensus import ConsensusLoop
from services.orchestrator.loop.routing import FEATURE_NAMES
from services.orchestrator.loop.types import AgentName, Budget, Proposal, Role, Round
from services.orchestrator.problems.maze import format_rows, parse_maze_grid, synthesize_maze
from services.orchestrator.problems.puzzle import Solved, Verdict
from services.orchestrator.problems.sudoku import parse_sudoku, synthesize_sudoku
from services.orchestrator.routing.rules import PuzzleRouter
from services.orchestrator.routing.selection import AgentSet
from services.orchestrator.settings import OrchestratorSettings

NORVIG_FIRST = "4.....8.5.3..........7......2.....6.....8.4......1.......6.3.7.5..2.....1.4......"
SIX = "1....." * 6  # 6x6, blank but for column 1: invalid (1 six times in column 1)
MAZE = "\n".join(["#######",
                  "#S    #",
                  "# ### #",
                  "#   #G#",
                  "#######"])
MAZE_ANSWER = "\n".join(["#######",
                         "#Soooo#",
                         "# ###o#",
                         "#   #G#",
                         "#######"])


class ScriptedProposer:
    """A MODEL-slot stand-in for HRM/TRM: proposes a fixed answer, or fails."""

    def __init__(self, name: AgentName, answer: str | Exception) -> None:
        self.name = name
        self.role = Role.PROPOSER
        self.repeatable = False
        self.answer = answer
        self.calls = 0

    async def propose(self, round_: Round) -> Proposal:
        self.calls += 1
        if isinstance(self.answer, Exception):
            raise self.answer
        return Proposal(self.answer, 0.9, "learned")


def top95_first(data_dir, count: int) -> list[str]:
    with open(data_dir / "sudoku-norvig" / "py_sudoku-top95.txt") as lines:
        return [line.strip() for line, _ in zip(lines, range(count), strict=False)]


def budget(max_iterations: int = 3) -> Budget:
    return Budget(max_iterations=max_iterations, deadline=time.monotonic() + 30.0)


def puzzle_loop(problem, synthesize, *proposers, solver=True) -> ConsensusLoop:
    agents = list(proposers) + ([SolverAgent(10.0)] if solver else []) + [PuzzleCheckerAgent()]
    return ConsensusLoop(agents, PuzzleRouter(), functools.partial(synthesize, problem),
                         problem.query_length_norm)


# Validation at the edge.

@pytest.mark.parametrize(("puzzle", "box", "field", "words"), [
    ("", None, "sudoku.puzzle", "must not be empty"),
    (NORVIG_FIRST[:-1], None, "sudoku.puzzle", "80 characters"),
    ("." * 49, None, "sudoku.puzzle", "N = 7 is not supported"),
    ("." * 100, None, "sudoku.puzzle", "N = 10 is not supported"),
    (NORVIG_FIRST[:40] + "x" + NORVIG_FIRST[41:], None, "sudoku.puzzle",
     "cell 40 (row 5, column 5): 'x'"),
    ("7" + "." * 15, None, "sudoku.puzzle", "'7' is not"),
    ("5" + "." * 7 + "5" + "." * 72, None, "sudoku.puzzle",
     "contradictory givens: digit 5 twice in row 1 (r1c1, r1c9)"),
    (SIX, None, "sudoku.puzzle", "contradictory givens: digit 1 twice in column 1"),
    ("." * 36, (3, None), "sudoku.box_cols", "together with box_rows"),
    ("." * 36, (None, 3), "sudoku.box_rows", "together with box_cols"),
    ("." * 36, (1, 6), "sudoku.box_rows", "at least 2"),
    ("." * 36, (3, 3), "sudoku.box_rows", "do not tile a 6x6 grid"),
])
def test_bad_sudoku_names_the_field(puzzle, box, field, words):
    rows, cols = box if box else (None, None)
    with pytest.raises(InvalidArgument) as caught:
        parse_sudoku(puzzle, rows, cols)
    assert caught.value.field == field
    assert words in caught.value.description


def test_contradictory_givens_in_a_box_are_reported_as_such():
    # 5 at r3c3 and r1c1 share the first box only.
    puzzle = "5" + "." * 19 + "5" + "." * 60
    with pytest.raises(InvalidArgument, match="contradictory givens: digit 5 twice in box 1"):
        parse_sudoku(puzzle)


def test_sudoku_box_shapes_default_by_size_and_can_be_given():
    assert parse_sudoku(NORVIG_FIRST).shape == BoxShape(3, 3)
    assert parse_sudoku("." * 36).shape == BoxShape(2, 3)
    assert parse_sudoku("." * 36, 3, 2).shape == BoxShape(3, 2)
    assert parse_sudoku("0" * 16).shape == BoxShape(2, 2)
    assert parse_sudoku(f"  {NORVIG_FIRST}\n").puzzle == NORVIG_FIRST


@pytest.mark.parametrize(("grid", "words"), [
    ("", "must not be empty"),
    ("#S#G", "1 rows of 4 characters"),
    ("#" * 201 + "\nSG", "201 characters"),
    ("#####\n#S G#\n####", "ragged rows: row 3 has 4 characters, row 1 has 5"),
    ("#####\n#SoG#\n#####", "row 2, column 3: 'o'"),
    ("#####\n#S\tG#\n#####", "row 2, column 3: '\\t'"),
    ("#####\n#S.G#\n#####", "row 2, column 3: '.'"),
    ("#####\n#  G#\n#####", "has 0 S (start)"),
    ("#####\n#SSG#\n#####", "has 2 S (start)"),
    ("#####\n#S  #\n#####", "has 0 G (goal)"),
    ("#####\n#GSG#\n#####", "has 2 G (goal)"),
    ("#####\n#S#G#\n#####", "no path from S reaches G"),
])
def test_bad_maze_names_the_field(grid, words):
    with pytest.raises(InvalidArgument) as caught:
        parse_maze_grid(grid)
    assert caught.value.field == "maze.grid"
    assert words in caught.value.description


def test_maze_allows_one_trailing_newline():
    problem = parse_maze_grid(MAZE + "\n")
    assert problem.shortest == 6 and problem.grid.shape == (5, 7)


# The checker's verdicts.

def test_sudoku_checker_accepts_a_solution_and_names_each_fault():
    problem = parse_sudoku(NORVIG_FIRST)
    solution = problem.solve().answer
    assert problem.check(solution).accepted
    assert "17 givens kept" in problem.check(solution).reason
    assert problem.check(solution[:-1]).reason == "not 81 digits 1..9"
    assert problem.check(solution[:-1] + "0").reason == "not 81 digits 1..9"
    # Swap two digits of the first row: the rows still hold 1..9, columns break; the first cell
    # is a given, so the given changes.
    swapped = solution[1] + solution[0] + solution[2:]
    verdict = problem.check(swapped)
    assert not verdict.accepted and "changes the given at r1c1" in verdict.reason
    # Swap two blank cells of row 1 (columns 2 and 3): givens kept, columns broken.
    swapped = solution[0] + solution[2] + solution[1] + solution[3:]
    verdict = problem.check(swapped)
    assert not verdict.accepted and verdict.reason.startswith("column 2 does not hold 1..9")


def test_sudoku_checker_refuses_a_grid_that_breaks_only_boxes():
    """Rows 3 and 4 of a solution swapped: rows and columns still hold 1..9, six boxes do not."""
    solution = parse_sudoku(NORVIG_FIRST).solve().answer
    rows = [solution[9 * r:9 * r + 9] for r in range(9)]
    rows[2], rows[3] = rows[3], rows[2]
    verdict = parse_sudoku("." * 81).check("".join(rows))
    assert not verdict.accepted
    assert verdict.reason == "box 1 does not hold 1..9 once (6 units broken)"


def test_maze_checker_accepts_only_a_shortest_path():
    problem = parse_maze_grid(MAZE)
    assert problem.check(MAZE_ANSWER).accepted
    assert problem.check(MAZE_ANSWER).path_length == 6
    longer = parse_maze_grid("\n".join(["#######", "#S    #", "# ### #", "#    G#", "#######"]))
    detour = "\n".join(["#######", "#S    #", "#o### #", "#ooooG#", "#######"])
    assert longer.check(detour).accepted  # 6 steps down and across: also shortest
    around = "\n".join(["#######", "#Soooo#", "# ###o#", "#    G#", "#######"])
    assert longer.check(around).accepted
    not_connected = MAZE_ANSWER.replace("#Soooo#", "#S ooo#")
    assert not problem.check(not_connected).accepted
    assert problem.check(MAZE).reason == "not one path of marked open cells from S to G"
    assert problem.check(MAZE_ANSWER[:-1]).reason == "not 5 rows of 7 characters"
    loop_maze = parse_maze_grid("\n".join(["#######", "#S    #", "# ### #", "#     #",
                                           "#### G#", "#######"]))
    long_way = "\n".join(["#######", "#S    #", "#o### #", "#ooooo#", "#### G#", "#######"])
    verdict = loop_maze.check(long_way)
    assert verdict.accepted and verdict.path_length == 7
    wasteful = "\n".join(["#######", "#Soooo#", "#o###o#", "#ooooo#", "#### G#", "#######"])
    assert not loop_maze.check(wasteful).accepted


def test_maze_checker_rejects_a_valid_path_that_is_not_shortest():
    problem = parse_maze_grid("#####\n#S G#\n# # #\n#   #\n#####")
    around = "#####\n#S G#\n#o#o#\n#ooo#\n#####"
    verdict = problem.check(around)
    assert not verdict.accepted and verdict.path_length == 6
    assert verdict.reason == "a path of 6 steps; the shortest has 2"
    assert problem.check("#####\n#SoG#\n# # #\n#   #\n#####").accepted


# The agents.

async def test_solver_agent_proposes_the_exact_answer(data_dir):
    puzzle = top95_first(data_dir, 1)[0]
    problem = parse_sudoku(puzzle)
    proposal = await SolverAgent(10.0).propose(Round(problem, 1, 1, 0, time.monotonic() + 10))
    assert proposal.confidence == 1.0 and proposal.rationale.startswith("exact:")
    solution = parse_puzzle(proposal.answer)
    assert check_solution(problem.grid, solution, problem.shape).valid


async def test_solver_agent_reports_a_puzzle_without_solution():
    # Row 1 holds 1..8 at columns 1..8 and column 9 holds a 9 lower down: r1c9 has no digit left,
    # though no digit repeats in a unit.
    puzzle = "12345678." + "." * 8 + "9" + "." * 63
    problem = parse_sudoku(puzzle)
    with pytest.raises(InvalidArgument) as caught:
        await SolverAgent(10.0).propose(Round(problem, 1, 1, 0, time.monotonic() + 10))
    assert caught.value.field == "sudoku.puzzle"
    assert "has no solution" in caught.value.description


async def test_checker_agent_accepts_the_first_valid_and_excludes_the_rest():
    problem = parse_maze_grid(MAZE)
    wrong = MAZE_ANSWER.replace("#Soooo#", "#S ooo#")
    round_ = Round(problem, 1, 1, 0, time.monotonic() + 10,
                   candidates=((AgentName.HRM, wrong), (AgentName.SOLVER, MAZE_ANSWER)))
    proposal = await PuzzleCheckerAgent().propose(round_)
    assert proposal.answer == MAZE_ANSWER and proposal.verified
    assert proposal.excluded == frozenset({wrong})
    assert proposal.rationale == "solver's answer is optimal: 6 steps"
    only_wrong = Round(problem, 1, 1, 0, time.monotonic() + 10,
                       candidates=((AgentName.HRM, wrong),))
    rejected = await PuzzleCheckerAgent().propose(only_wrong)
    assert rejected.answer is None and not rejected.verified
    assert rejected.rationale.startswith("rejected hrm: not one path")


# The router.

def features(**named) -> np.ndarray:
    values = dict.fromkeys(FEATURE_NAMES, 0.0)
    values.update(named)
    return np.array([values[name] for name in FEATURE_NAMES], dtype=np.float32)


def test_puzzle_router_asks_the_models_first_then_the_solver():
    router = PuzzleRouter()
    everyone = [AgentName.HRM, AgentName.TRM, AgentName.SOLVER]
    assert router.route(features(), everyone).agents == (AgentName.HRM, AgentName.TRM)
    assert router.route(features(), [AgentName.SOLVER]).agents == (AgentName.SOLVER,)
    after_models = features(model_confidence=0.9, last_agent_model=1.0, consensus_score=1.0)
    # The models agree, but agreement is not verification: the solver answers.
    assert router.route(after_models, [AgentName.SOLVER]).agents == (AgentName.SOLVER,)
    verified = features(grounding_confidence=1.0, last_agent_grounding=1.0)
    assert router.route(verified, [AgentName.SOLVER]).agents == ()
    assert router.route(after_models, []).agents == ()


# The loop.

async def test_loop_answers_norvig_puzzles_with_verified_solutions(data_dir):
    for puzzle in top95_first(data_dir, 3):
        problem = parse_sudoku(puzzle)
        result = await puzzle_loop(problem, synthesize_sudoku).run(problem, budget())
        assert result.answer.valid
        assert check_solution(problem.grid, parse_puzzle(result.answer.solution),
                              problem.shape).valid
        assert result.agents == (AgentName.SOLVER, AgentName.CHECKER)
        assert result.consensus_reached and result.iterations == 1
        assert result.tally.verified and result.tally.confidence == 1.0
        assert [t.step for t in result.timings] == ["route", "agents", "verify", "aggregate",
                                                   "consensus", "synthesize"]


async def test_loop_answers_a_generated_maze_with_an_optimal_path():
    rng = np.random.default_rng(11)
    question, answer = generate_maze(7, 7, rng, extra_openings=6, min_path_length=10)
    problem = parse_maze_grid(format_rows(question))
    result = await puzzle_loop(problem, synthesize_maze).run(problem, budget())
    assert result.answer.optimal
    assert result.answer.path_length == problem.shortest >= 10
    assert result.answer.grid.count("o") == problem.shortest - 1
    assert problem.check(result.answer.grid).accepted


async def test_a_wrong_model_answer_never_becomes_the_answer():
    # HRM and TRM agree on a wrong answer; the checker rejects it, the solver answers in round 2.
    problem = parse_maze_grid(MAZE)
    wrong = MAZE_ANSWER.replace("#Soooo#", "#S ooo#")
    hrm, trm = ScriptedProposer(AgentName.HRM, wrong), ScriptedProposer(AgentName.TRM, wrong)
    result = await puzzle_loop(problem, synthesize_maze, hrm, trm).run(problem, budget())
    assert result.answer.grid == MAZE_ANSWER
    assert result.iterations == 2
    assert [(v.agent, v.iteration) for v in result.votes] == [
        (AgentName.HRM, 1), (AgentName.TRM, 1), (AgentName.SOLVER, 2), (AgentName.CHECKER, 2)]
    assert result.agents == (AgentName.HRM, AgentName.TRM, AgentName.SOLVER, AgentName.CHECKER)
    assert [route.agents for route in result.routes] == [
        (AgentName.HRM, AgentName.TRM), (AgentName.SOLVER,)]


async def test_a_right_model_answer_ends_the_loop_before_the_solver():
    problem = parse_maze_grid(MAZE)
    hrm = ScriptedProposer(AgentName.HRM, MAZE_ANSWER)
    solver = SolverAgent(10.0)
    loop = ConsensusLoop([hrm, solver, PuzzleCheckerAgent()], PuzzleRouter(),
                         functools.partial(synthesize_maze, problem), problem.query_length_norm)
    result = await loop.run(problem, budget())
    assert result.agents == (AgentName.HRM, AgentName.CHECKER)
    assert result.iterations == 1 and result.answer.path_length == 6


async def test_no_verified_answer_is_failed_precondition_not_a_wrong_answer():
    problem = parse_sudoku(NORVIG_FIRST)
    wrong = problem.solve().answer[::-1]
    hrm = ScriptedProposer(AgentName.HRM, wrong)
    with pytest.raises(FailedPrecondition, match="no proposal passed the checker"):
        await puzzle_loop(problem, synthesize_sudoku, hrm, solver=False).run(problem, budget())


async def test_a_failed_model_falls_back_to_the_solver():
    problem = parse_sudoku(NORVIG_FIRST)
    hrm = ScriptedProposer(AgentName.HRM, Unavailable("neural: down"))
    result = await puzzle_loop(problem, synthesize_sudoku, hrm).run(problem, budget())
    assert result.answer.valid and result.agents == (AgentName.SOLVER, AgentName.CHECKER)
    assert [name for name, _ in result.failures] == [AgentName.HRM]


# The servicer's choice of agents.

class FakeContext:
    def time_remaining(self) -> float:
        return 10.0


@pytest.fixture
def servicer():
    return OrchestratorServicer(OrchestratorSettings(),
                                AgentSet(puzzle=[SolverAgent(10.0), PuzzleCheckerAgent()]))


@pytest.mark.parametrize("agents", [[pb.AGENT_MCTS], [pb.AGENT_SOLVER, pb.AGENT_LLM],
                                    [pb.AGENT_CHECKER], [pb.AGENT_UNSPECIFIED]])
async def test_agents_that_do_not_apply_to_a_puzzle_are_invalid(servicer, agents):
    request = pb.SolveProblemRequest(sudoku=pb.SudokuProblem(puzzle=NORVIG_FIRST), agents=agents)
    with pytest.raises(InvalidArgument) as caught:
        await servicer.SolveProblem(request, FakeContext())
    assert caught.value.field == "agents"


@pytest.mark.parametrize("agent", [pb.AGENT_HRM, pb.AGENT_TRM])
async def test_hrm_and_trm_not_configured_are_failed_precondition(servicer, agent):
    request = pb.SolveProblemRequest(maze=pb.MazeProblem(grid=MAZE), agents=[agent])
    with pytest.raises(FailedPrecondition, match="not configured here; use AGENT_SOLVER"):
        await servicer.SolveProblem(request, FakeContext())


async def test_puzzle_agents_do_not_apply_to_connect_four(servicer):
    request = pb.SolveProblemRequest(
        connect_four=common_pb2.ConnectFourPosition(moves="44"), agents=[pb.AGENT_SOLVER])
    with pytest.raises(InvalidArgument) as caught:
        await servicer.SolveProblem(request, FakeContext())
    assert caught.value.field == "agents"


async def test_servicer_answers_a_six_by_six_sudoku(servicer):
    puzzle, solution = generate(BoxShape(2, 3), 20, np.random.default_rng(3))
    text = "".join(str(int(v)) for v in puzzle.ravel())
    response = await servicer.SolveProblem(
        pb.SolveProblemRequest(sudoku=pb.SudokuProblem(puzzle=text), agents=[pb.AGENT_SOLVER]),
        FakeContext())
    assert response.sudoku.valid
    assert response.sudoku.solution == "".join(str(int(v)) for v in solution.ravel())
    assert list(response.agents) == [pb.AGENT_SOLVER, pb.AGENT_CHECKER]


class BlockedPuzzle:
    """A puzzle whose exact solve blocks until released: stands in for one too hard for the
    budget."""

    query_length_norm = 0.5

    def __init__(self) -> None:
        self.release = threading.Event()
        self.stopped = threading.Event()

    def solve(self, stop: threading.Event | None = None) -> Solved | None:
        for _ in range(1000):
            if self.release.wait(timeout=0.01):
                break
            if stop is not None and stop.is_set():
                self.stopped.set()
                return None
        return Solved("late", "exact")

    def check(self, answer: str) -> Verdict:
        return Verdict(False, "never")


async def test_solver_abstains_when_its_budget_runs_out_and_the_loop_says_why():
    puzzle = BlockedPuzzle()
    try:
        proposal = await SolverAgent(0.05).propose(Round(puzzle, 1, 1, 0,
                                                         time.monotonic() + 10))
        assert proposal.answer is None and proposal.rationale == "not solved within 0.05 s"
        # The agent told the search to stop: the worker thread does not run on unobserved.
        assert await asyncio.to_thread(puzzle.stopped.wait, 10)
        loop = ConsensusLoop([SolverAgent(0.05), PuzzleCheckerAgent()], PuzzleRouter(),
                             lambda tally, proposals, context: tally.answer, 0.5)
        with pytest.raises(FailedPrecondition, match="solver: not solved within 0.05 s"):
            await loop.run(puzzle, budget())
    finally:
        puzzle.release.set()
