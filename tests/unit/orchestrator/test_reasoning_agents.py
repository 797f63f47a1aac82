"""The HRM and TRM agents against a fake NeuralService stub: model lookup by architecture and task,
the Solve request they send, the answer they propose, their errors, and the servicer's choice of
puzzle agents (models that exist for the grid, plus the solver as fallback)."""

from __future__ import annotations

import json
import time

import grpc
import numpy as np
import pytest
from google.rpc import status_pb2
from mesh.neural.v1 import neural_service_pb2 as neural_pb
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

from libs.errors import FailedPrecondition, Unavailable
from libs.puzzles.maze import generate_maze, solve_maze
from libs.puzzles.sudoku import BoxShape, format_grid, generate
from services.orchestrator.agents.puzzle_checker import PuzzleCheckerAgent
from services.orchestrator.agents.reasoning import (
    ReasoningAgent,
    ReasoningModels,
    TrainedOn,
    choose_model,
    trained_on,
)
from services.orchestrator.agents.solver import SolverAgent
from services.orchestrator.api.servicer import OrchestratorServicer
from services.orchestrator.loop.types import AgentName, Round
from services.orchestrator.problems.maze import format_rows, parse_maze_grid
from services.orchestrator.problems.sudoku import parse_sudoku
from services.orchestrator.routing.selection import AgentSet
from services.orchestrator.settings import OrchestratorSettings


def sudoku6(seed: int) -> tuple[str, str]:
    puzzle, solution = generate(BoxShape(2, 3), 16, np.random.default_rng(seed))
    return format_grid(puzzle), format_grid(solution)


PUZZLE, SOLUTION = sudoku6(1)
MAZE_Q, MAZE_A = generate_maze(4, 4, np.random.default_rng(2), extra_openings=2,
                               min_path_length=4)
MAZE, MAZE_ANSWER = format_rows(MAZE_Q), format_rows(MAZE_A)

MODELS = [
    neural_pb.Model(name="connect4-pv", architecture="connect4_pv", version="c4"),
    neural_pb.Model(name="trm-sudoku6-b", architecture="trm", task="sudoku-6x6", version="v2"),
    neural_pb.Model(name="trm-sudoku6-a", architecture="trm", task="sudoku-6x6", version="v1"),
    neural_pb.Model(name="hrm-sudoku6", architecture="hrm", task="sudoku-6x6", version="h1"),
    neural_pb.Model(name="trm-maze9", architecture="trm", task="maze-9x9", version="m1"),
]


def rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


def service_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    """An error as a mesh service sends it: with a google.rpc.Status in the trailers."""
    status = status_pb2.Status(code=code.value[0], message=details)
    trailers = grpc.aio.Metadata(("grpc-status-details-bin", status.SerializeToString()))
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), trailers, details)


class FakeNeural:
    """A NeuralService stub: lists `models`; Solve answers `answers[grid]` (row-major, no
    separators) with halt probability 0.8 after 3 segments, or raises `solve_error`."""

    def __init__(self, models=MODELS, answers=None, list_error=None, solve_error=None) -> None:
        self.models = list(models)
        self.answers = answers or {}
        self.list_error = list_error
        self.solve_error = solve_error
        self.list_calls = 0
        self.solve_requests: list[neural_pb.SolveRequest] = []
        self.timeouts: list[float] = []

    async def ListModels(self, request, timeout):
        self.list_calls += 1
        self.timeouts.append(timeout)
        if self.list_error is not None:
            raise self.list_error
        return neural_pb.ListModelsResponse(models=self.models)

    async def Solve(self, request, timeout):
        self.solve_requests.append(request)
        self.timeouts.append(timeout)
        if self.solve_error is not None:
            raise self.solve_error
        model = next(m for m in self.models if m.name == request.model)
        return neural_pb.SolveResponse(grid=self.answers[request.grid], segments_used=3,
                                       halt_probability=0.8, model=model, latency_ms=2.0)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def round_for(problem) -> Round:
    return Round(problem, 1, 1, 0, time.monotonic() + 10)


def agent(stub, name=AgentName.TRM, **kwargs) -> ReasoningAgent:
    return ReasoningAgent(name, stub, ReasoningModels(stub, 5.0, 30.0), 5.0, **kwargs)


# The grids' tasks and encodings.

def test_problems_name_their_model_task_and_encode_their_grid():
    problem = parse_sudoku(PUZZLE)
    assert problem.model_task == "sudoku-6x6"
    assert problem.model_input() == PUZZLE and "." in PUZZLE
    assert parse_sudoku("0" * 36, 3, 2).model_task == "sudoku-6x6-3x2"
    assert problem.answer_from_model(SOLUTION[:18] + "\n" + SOLUTION[18:]) == SOLUTION
    maze = parse_maze_grid(MAZE)
    assert maze.model_task == "maze-9x9"
    assert maze.model_input() == MAZE.replace("\n", "") and len(maze.model_input()) == 81
    assert maze.answer_from_model(MAZE_ANSWER.replace("\n", "")) == MAZE_ANSWER
    assert maze.answer_from_model(MAZE_ANSWER) == MAZE_ANSWER
    assert maze.answer_from_model("#S") == "#S"  # passed on for the checker to reject


# The model listing.

async def test_models_are_found_by_architecture_and_task_first_by_name_and_cached():
    stub, clock = FakeNeural(), Clock()
    models = ReasoningModels(stub, 5.0, 30.0, clock)
    assert (await models.find("trm", "sudoku-6x6")).name == "trm-sudoku6-a"
    assert (await models.find("trm", "sudoku-6x6", "trm-sudoku6-b")).version == "v2"
    assert (await models.find("hrm", "sudoku-6x6")).name == "hrm-sudoku6"
    assert await models.find("hrm", "maze-9x9") is None
    assert await models.find("trm", "sudoku-9x9") is None
    assert await models.find("trm", "sudoku-6x6", "trm-maze9") is None
    assert stub.list_calls == 1
    stub.models.append(neural_pb.Model(name="hrm-maze9", architecture="hrm", task="maze-9x9"))
    clock.now += 29.0
    assert await models.find("hrm", "maze-9x9") is None  # the cached listing
    clock.now += 1.0
    assert (await models.find("hrm", "maze-9x9")).name == "hrm-maze9"
    assert stub.list_calls == 2
    models.forget()
    await models.find("hrm", "maze-9x9")
    assert stub.list_calls == 3


async def test_a_failed_listing_is_unavailable_and_not_cached():
    stub = FakeNeural(list_error=rpc_error(grpc.StatusCode.UNAVAILABLE, "connection refused"))
    models = ReasoningModels(stub, 5.0, 30.0)
    with pytest.raises(Unavailable, match="neural failed: UNAVAILABLE: not reachable"):
        await models.find("trm", "sudoku-6x6")
    stub.list_error = None
    assert (await models.find("trm", "sudoku-6x6", timeout_s=1.5)).name == "trm-sudoku6-a"
    assert stub.timeouts == [5.0, 1.5]


# The model choice: the blank count is the feature.

def trained(name: str, blanks: int | None, exact: float | None, task="sudoku-6x6",
            act_exact: float | None = None) -> neural_pb.Model:
    metadata = {}
    if blanks is not None:
        metadata["task"] = json.dumps({"blanks": blanks, "size": 6})
    metrics = {}
    if exact is not None:
        metrics["paper"] = {"exact_accuracy": exact}
    if act_exact is not None:
        metrics["act"] = {"exact_accuracy": act_exact}
    if metrics:
        metadata["metrics"] = json.dumps(metrics)
    return neural_pb.Model(name=name, architecture="trm", task=task, version="v",
                           metadata=metadata)


B16 = trained("trm-sudoku6-b16", 16, 0.987, act_exact=0.976)
B22 = trained("trm-sudoku6-b22", 22, 0.998)


def test_the_training_facts_are_read_from_the_checkpoint_metadata():
    assert trained_on(B16) == TrainedOn(16, 0.987)
    assert trained_on(B16, "act") == TrainedOn(16, 0.976)
    assert trained_on(B22, "act") == TrainedOn(22, 0.998)  # act not evaluated: paper's figure
    assert trained_on(neural_pb.Model(name="x")) == TrainedOn(None, None)
    garbled = neural_pb.Model(name="x", metadata={"task": "sudoku-6x6", "metrics": "[1"})
    assert trained_on(garbled) == TrainedOn(None, None)


def test_the_model_trained_nearest_the_puzzles_blank_count_is_chosen():
    candidates = [B16, B22]
    assert [choose_model(candidates, blanks).name for blanks in (10, 16, 18, 19, 20, 22, 30)] \
        == ["trm-sudoku6-b16"] * 3 + ["trm-sudoku6-b22"] * 4
    # 19 is as near 16 as 22: the tie goes to the better held-out exact accuracy (b22's 99.8%).
    tied = [trained("trm-sudoku6-p", 16, 0.95), trained("trm-sudoku6-q", 22, 0.90)]
    assert choose_model(tied, 19).name == "trm-sudoku6-p"
    # A model that records no blank count ranks after those that do; no blank count (a maze)
    # lets accuracy, then name, decide.
    unknown = trained("trm-sudoku6-a", None, 1.0)
    assert choose_model([unknown, B16], 30).name == "trm-sudoku6-b16"
    assert choose_model([unknown, B16], None).name == "trm-sudoku6-a"
    assert choose_model([trained("b", None, None), trained("a", None, None)], 5).name == "a"
    assert choose_model([], 16) is None


async def test_the_agent_asks_the_model_that_fits_the_puzzle_and_says_why():
    puzzle16, solution16 = sudoku6(3)
    puzzle22, solution22 = (format_grid(grid) for grid in
                            generate(BoxShape(2, 3), 22, np.random.default_rng(4)))
    stub = FakeNeural(models=[B22, B16], answers={puzzle16: solution16, puzzle22: solution22})
    trm = agent(stub)
    first = await trm.propose(round_for(parse_sudoku(puzzle16)))
    second = await trm.propose(round_for(parse_sudoku(puzzle22)))
    assert [request.model for request in stub.solve_requests] == ["trm-sudoku6-b16",
                                                                   "trm-sudoku6-b22"]
    assert first.rationale == ("trm-sudoku6-b16 v (trained on 16 blanks, puzzle has 16, "
                               "held-out exact 98.7%): 3 segments, halt 0.80")
    assert second.rationale.startswith("trm-sudoku6-b22 v (trained on 22 blanks, puzzle has 22")
    named = agent(FakeNeural(models=[B22, B16], answers={puzzle22: solution22}),
                  model="trm-sudoku6-b16")
    proposal = await named.propose(round_for(parse_sudoku(puzzle22)))
    assert proposal.rationale == "trm-sudoku6-b16 v (named in the settings): 3 segments, halt 0.80"


# The agent's proposals.

async def test_trm_proposes_its_decoded_sudoku_prediction_in_paper_mode():
    stub = FakeNeural(answers={PUZZLE: SOLUTION})
    proposal = await agent(stub).propose(round_for(parse_sudoku(PUZZLE)))
    assert proposal.answer == SOLUTION
    assert proposal.confidence == pytest.approx(0.8)
    assert proposal.rationale == "trm-sudoku6-a v1 (puzzle has 16): 3 segments, halt 0.80"
    (request,) = stub.solve_requests
    assert request.model == "trm-sudoku6-a" and request.grid == PUZZLE
    assert request.halting_mode == neural_pb.HALTING_MODE_PAPER
    assert not request.HasField("max_segments")
    assert 0 < stub.timeouts[-1] <= 5.0


async def test_act_mode_segments_and_a_named_model_reach_the_request():
    stub = FakeNeural(answers={PUZZLE: SOLUTION})
    hrm = agent(stub, AgentName.HRM, halting_mode="act", max_segments=12)
    await hrm.propose(round_for(parse_sudoku(PUZZLE)))
    trm = agent(stub, model="trm-sudoku6-b")
    await trm.propose(round_for(parse_sudoku(PUZZLE)))
    first, second = stub.solve_requests
    assert (first.model, first.halting_mode, first.max_segments) == (
        "hrm-sudoku6", neural_pb.HALTING_MODE_ACT, 12)
    assert second.model == "trm-sudoku6-b"


async def test_trm_proposes_a_maze_path_as_rows():
    stub = FakeNeural(answers={MAZE.replace("\n", ""): MAZE_ANSWER.replace("\n", "")})
    proposal = await agent(stub).propose(round_for(parse_maze_grid(MAZE)))
    assert proposal.answer == MAZE_ANSWER
    assert parse_maze_grid(MAZE).check(proposal.answer).accepted
    assert stub.solve_requests[0].model == "trm-maze9"


async def test_no_model_for_the_grid_is_failed_precondition():
    stub = FakeNeural()
    with pytest.raises(FailedPrecondition, match="no hrm model for maze-9x9"):
        await agent(stub, AgentName.HRM).propose(round_for(parse_maze_grid(MAZE)))
    assert not stub.solve_requests


async def test_solve_errors_become_unavailable_and_a_refusal_drops_the_listing():
    stub = FakeNeural(solve_error=service_error(grpc.StatusCode.UNAVAILABLE, "no checkpoint"))
    trm = agent(stub)
    with pytest.raises(Unavailable, match="no checkpoint"):
        await trm.propose(round_for(parse_sudoku(PUZZLE)))
    assert stub.list_calls == 1
    stub.solve_error = rpc_error(grpc.StatusCode.INVALID_ARGUMENT, "unknown model")
    with pytest.raises(Unavailable, match="neural refused Solve with trm-sudoku6-a: "
                                          "INVALID_ARGUMENT: unknown model"):
        await trm.propose(round_for(parse_sudoku(PUZZLE)))
    stub.solve_error = None
    stub.answers[PUZZLE] = SOLUTION
    await trm.propose(round_for(parse_sudoku(PUZZLE)))
    assert stub.list_calls == 2  # listed again after the refusal


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"halting_mode": "fast"}, "unknown halting mode"),
    ({"max_segments": 65}, "max_segments"),
])
def test_bad_agent_settings_are_refused(kwargs, words):
    with pytest.raises(ValueError, match=words):
        agent(FakeNeural(), **kwargs)
    with pytest.raises(ValueError, match="not a reasoning agent"):
        agent(FakeNeural(), AgentName.SOLVER)


# The servicer: which agents take part, and which one answered.

class FakeContext:
    def time_remaining(self) -> float:
        return 10.0


def servicer_with(stub) -> OrchestratorServicer:
    models = ReasoningModels(stub, 5.0, 30.0)
    agents = [ReasoningAgent(name, stub, models, 5.0) for name in (AgentName.HRM, AgentName.TRM)]
    return OrchestratorServicer(OrchestratorSettings(), AgentSet(
        puzzle=[*agents, SolverAgent(10.0), PuzzleCheckerAgent()]))


async def test_default_agents_are_the_models_for_the_grid_then_the_solver():
    # HRM answers wrongly, TRM rightly: the checker accepts TRM's answer in round 1.
    wrong = SOLUTION[::-1]
    stub = FakeNeural(answers={PUZZLE: SOLUTION})
    stub.models = [m for m in MODELS if m.name != "trm-sudoku6-a"]
    hrm_stub_answer = {PUZZLE: wrong}

    async def solve(request, timeout):
        answers = hrm_stub_answer if request.model.startswith("hrm") else stub.answers
        stub.solve_requests.append(request)
        model = next(m for m in stub.models if m.name == request.model)
        return neural_pb.SolveResponse(grid=answers[request.grid], segments_used=2,
                                       halt_probability=0.9, model=model)

    stub.Solve = solve
    response = await servicer_with(stub).SolveProblem(
        pb.SolveProblemRequest(sudoku=pb.SudokuProblem(puzzle=PUZZLE)), FakeContext())
    assert response.sudoku.solution == SOLUTION and response.sudoku.valid
    assert response.answered_by == pb.AGENT_TRM
    assert list(response.agents) == [pb.AGENT_HRM, pb.AGENT_TRM, pb.AGENT_CHECKER]
    assert response.iterations == 1
    assert response.votes[-1].rationale.startswith("trm's answer is valid")


async def test_a_wrong_model_answer_is_replaced_by_the_solver():
    stub = FakeNeural(answers={PUZZLE: SOLUTION[::-1]})
    response = await servicer_with(stub).SolveProblem(
        pb.SolveProblemRequest(sudoku=pb.SudokuProblem(puzzle=PUZZLE),
                               agents=[pb.AGENT_TRM, pb.AGENT_SOLVER]), FakeContext())
    assert response.sudoku.solution == SOLUTION
    assert response.answered_by == pb.AGENT_SOLVER
    assert list(response.agents) == [pb.AGENT_TRM, pb.AGENT_SOLVER, pb.AGENT_CHECKER]
    assert response.iterations == 2


async def test_models_without_a_model_for_the_grid_are_left_out_by_default():
    maze_answer = format_rows(solve_maze(MAZE_Q))
    stub = FakeNeural(answers={MAZE.replace("\n", ""): maze_answer})
    response = await servicer_with(stub).SolveProblem(
        pb.SolveProblemRequest(maze=pb.MazeProblem(grid=MAZE)), FakeContext())
    assert response.maze.optimal and response.answered_by == pb.AGENT_TRM
    assert list(response.agents) == [pb.AGENT_TRM, pb.AGENT_CHECKER]  # no HRM maze model
    nine = "4.....8.5.3..........7......2.....6.....8.4......1.......6.3.7.5..2.....1.4......"
    response = await servicer_with(stub).SolveProblem(
        pb.SolveProblemRequest(sudoku=pb.SudokuProblem(puzzle=nine)), FakeContext())
    assert response.answered_by == pb.AGENT_SOLVER
    assert list(response.agents) == [pb.AGENT_SOLVER, pb.AGENT_CHECKER]


@pytest.mark.parametrize(("agents", "words"), [
    ([pb.AGENT_HRM], "AGENT_HRM: the neural service has no hrm model for maze-9x9"),
    ([pb.AGENT_TRM, pb.AGENT_HRM, pb.AGENT_SOLVER], "no hrm model for maze-9x9"),
])
async def test_a_named_model_without_a_model_for_the_grid_is_failed_precondition(agents, words):
    stub = FakeNeural()
    with pytest.raises(FailedPrecondition, match=words):
        await servicer_with(stub).SolveProblem(
            pb.SolveProblemRequest(maze=pb.MazeProblem(grid=MAZE), agents=agents), FakeContext())
    assert not stub.solve_requests


async def test_neural_down_the_solver_answers_and_a_model_alone_is_unavailable():
    down = rpc_error(grpc.StatusCode.UNAVAILABLE, "connection refused")
    stub = FakeNeural(list_error=down)
    servicer = servicer_with(stub)
    response = await servicer.SolveProblem(
        pb.SolveProblemRequest(sudoku=pb.SudokuProblem(puzzle=PUZZLE)), FakeContext())
    assert response.answered_by == pb.AGENT_SOLVER
    assert list(response.agents) == [pb.AGENT_SOLVER, pb.AGENT_CHECKER]
    response = await servicer.SolveProblem(
        pb.SolveProblemRequest(sudoku=pb.SudokuProblem(puzzle=PUZZLE),
                               agents=[pb.AGENT_TRM, pb.AGENT_SOLVER]), FakeContext())
    assert response.answered_by == pb.AGENT_SOLVER
    with pytest.raises(Unavailable, match="neural failed: UNAVAILABLE: not reachable"):
        await servicer.SolveProblem(
            pb.SolveProblemRequest(sudoku=pb.SudokuProblem(puzzle=PUZZLE),
                                   agents=[pb.AGENT_TRM]), FakeContext())
