"""HRM and TRM through the real orchestrator server on port 0, against a fake NeuralService
(grpc.aio, port 0, `conftest.FakeReasoningNeural`) whose Solve returns chosen grids: which models
take part, what Solve is asked, which agent answers, and the errors of the contract."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
from mesh.neural.v1 import neural_service_pb2 as neural_pb
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

from libs.puzzles.maze import generate_maze
from libs.puzzles.sudoku import BoxShape, format_grid, generate
from services.orchestrator.problems.maze import format_rows


def sudoku6(seed: int) -> tuple[str, str]:
    puzzle, solution = generate(BoxShape(2, 3), 16, np.random.default_rng(seed))
    return format_grid(puzzle), format_grid(solution)


async def test_trm_answers_a_sudoku_it_solves(reasoning_mesh):
    mesh = await reasoning_mesh()
    fake, stub = mesh.fake, mesh.stub
    puzzle, solution = sudoku6(5)
    fake.answers[puzzle] = solution
    response = await stub.SolveProblem(
        pb.SolveProblemRequest(sudoku=pb.SudokuProblem(puzzle=puzzle)), timeout=30)
    assert response.sudoku.solution == solution and response.sudoku.valid
    assert response.answered_by == pb.AGENT_TRM
    assert list(response.agents) == [pb.AGENT_TRM, pb.AGENT_CHECKER]
    assert response.votes[0].rationale == "trm-sudoku6 t6 (puzzle has 16): 1 segment, halt 0.70"
    assert response.votes[0].confidence == pytest.approx(0.7)
    (request,) = fake.requests
    assert (request.model, request.grid) == ("trm-sudoku6", puzzle)
    assert request.halting_mode == neural_pb.HALTING_MODE_PAPER
    assert not request.HasField("max_segments")


async def test_the_solver_answers_when_trm_is_wrong(reasoning_mesh):
    stub = (await reasoning_mesh()).stub
    puzzle, solution = sudoku6(6)  # the fake echoes the puzzle: blanks, rejected
    response = await stub.SolveProblem(
        pb.SolveProblemRequest(sudoku=pb.SudokuProblem(puzzle=puzzle),
                               agents=[pb.AGENT_TRM, pb.AGENT_SOLVER]), timeout=30)
    assert response.sudoku.solution == solution
    assert response.answered_by == pb.AGENT_SOLVER
    assert list(response.agents) == [pb.AGENT_TRM, pb.AGENT_SOLVER, pb.AGENT_CHECKER]
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.SolveProblem(pb.SolveProblemRequest(
            sudoku=pb.SudokuProblem(puzzle=puzzle), agents=[pb.AGENT_TRM]), timeout=30)
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "no proposal passed the checker" in caught.value.details()


async def test_trm_answers_a_maze_and_act_settings_reach_solve(reasoning_mesh):
    mesh = await reasoning_mesh(reasoning_halting_mode="act", reasoning_max_segments=4,
                             trm_model="trm-maze9")
    fake, stub = mesh.fake, mesh.stub
    question, answer = generate_maze(4, 4, np.random.default_rng(7), extra_openings=2,
                                     min_path_length=4)
    maze, path = format_rows(question), format_rows(answer)
    fake.answers[maze.replace("\n", "")] = path.replace("\n", "")
    response = await stub.SolveProblem(pb.SolveProblemRequest(maze=pb.MazeProblem(grid=maze)),
                                       timeout=30)
    assert response.maze.grid == path and response.maze.optimal
    assert response.answered_by == pb.AGENT_TRM
    (request,) = fake.requests
    assert request.halting_mode == neural_pb.HALTING_MODE_ACT and request.max_segments == 4


async def test_a_named_model_without_a_model_for_the_grid_is_failed_precondition(reasoning_mesh):
    mesh = await reasoning_mesh()
    fake, stub = mesh.fake, mesh.stub
    puzzle, _ = sudoku6(8)
    for agents, words in (([pb.AGENT_HRM], "no hrm model for sudoku-6x6"),
                          ([pb.AGENT_TRM], "no trm model for sudoku-9x9")):
        grid = puzzle if agents == [pb.AGENT_HRM] else "." * 81
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.SolveProblem(pb.SolveProblemRequest(
                sudoku=pb.SudokuProblem(puzzle=grid), agents=agents), timeout=30)
        assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert words in caught.value.details()
    assert not fake.requests
    # By default the grid without a model goes to the solver.
    response = await stub.SolveProblem(
        pb.SolveProblemRequest(sudoku=pb.SudokuProblem(puzzle="." * 81)), timeout=30)
    assert response.answered_by == pb.AGENT_SOLVER and response.sudoku.valid
