"""The demo's maze section sends the trainer's held-out mazes of both sizes (9x9 and 11x11 grids)
through SolveProblem and says, per maze, which agent and checkpoint answered."""

from __future__ import annotations

from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

from mcts_mesh import demo
from mcts_mesh.puzzle_files import held_out_rows, maze_rows
from training.reasoning.data import MazeTask


class RecordingStub:
    """Answers every maze as trm-maze<grid>'s verified path would, and keeps the requests."""

    def __init__(self) -> None:
        self.grids: list[str] = []

    def SolveProblem(self, request: pb.SolveProblemRequest, timeout: float):
        self.grids.append(request.maze.grid)
        side = len(request.maze.grid.splitlines())
        return pb.SolveProblemResponse(
            maze=pb.MazeAnswer(grid=request.maze.grid, path_length=7, optimal=True),
            answered_by=pb.AGENT_TRM,
            votes=[pb.AgentVote(agent=pb.AGENT_TRM, rationale=f"trm-maze{side} (held-out exact)")])


def test_the_demo_sends_both_maze_sizes_and_names_who_answered(capsys):
    stub = RecordingStub()
    demo._mazes(stub)
    expected = [maze_rows(question) for cells in demo.MAZE_CELLS
                for question, _ in held_out_rows(MazeTask(rows=cells, cols=cells), demo.MAZES,
                                                 seed=1)]
    assert stub.grids == expected
    assert {len(grid.splitlines()) for grid in stub.grids} == {9, 11}
    printed = capsys.readouterr().out
    assert printed.count("answered by trm (trm-maze9)") == demo.MAZES
    assert printed.count("answered by trm (trm-maze11)") == demo.MAZES
