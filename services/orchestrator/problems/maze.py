"""A maze problem for the consensus loop: validation of the request's grid, the exact solver and
checker over it, and the synthesis of the answer.

Grids are token grids of `libs.puzzles.maze` (`[H, W]` uint8: wall, open, start, goal, path). On
the wire a maze is its rows joined by '\\n'; an answer is the same text with the cells of a path
strictly between S and G marked 'o'. Moves are 4-connected. Every error names "maze.grid".
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from libs.errors import InvalidArgument
from libs.puzzles.maze import (
    GOAL,
    START,
    MalformedMaze,
    check_path,
    distances_from,
    format_maze,
    parse_maze,
    solve_maze,
)
from services.orchestrator.loop.types import AgentName, Proposal, Tally
from services.orchestrator.problems.puzzle import Solved, Verdict, verified

GRID_FIELD = "maze.grid"
QUESTION_CHARS = "# SG"
"""Characters of a question: wall, open, start, goal (no 'o': a question has no path)."""
MIN_SIDE, MAX_SIDE = 2, 200
"""Rows and columns of a maze, each in 2..200 (HRM's Maze-Hard mazes are 30x30)."""


@dataclass(frozen=True)
class MazeProblem:
    """Find a shortest S-to-G path in `grid` (validated: rectangular, one S, one G, G reachable).

    Attributes:
        grid: `[H, W]` uint8 token grid of `libs.puzzles.maze`, no path cells.
        shortest: the BFS shortest-path length from S to G, in steps.
    """

    grid: np.ndarray
    shortest: int

    @property
    def query_length_norm(self) -> float:
        """Cells over the largest maze's 40,000, in [0, 1] (routing feature 8)."""
        return float(self.grid.size) / (MAX_SIDE * MAX_SIDE)

    @property
    def model_task(self) -> str:
        """The neural service's `Model.task` for this grid: "maze-HxW" (rows x columns)."""
        height, width = self.grid.shape
        return f"maze-{height}x{width}"

    def model_input(self) -> str:
        """The grid for NeuralService.Solve: H*W characters row-major, no row separators."""
        return format_maze(self.grid)

    def answer_from_model(self, grid: str) -> str:
        """A model's predicted grid (H*W characters, or rows joined by '\\n') as an answer:
        rows joined by '\\n'. Any other length is passed on unchanged for the checker to reject.
        """
        height, width = self.grid.shape
        cells = grid.replace("\n", "")
        if len(cells) != height * width:
            return grid
        return "\n".join(cells[i:i + width] for i in range(0, len(cells), width))

    def solve(self, stop: threading.Event | None = None) -> Solved | None:
        """A shortest path by breadth-first search (`libs.puzzles.maze.solve_maze`). Its work is
        bounded by the grid (at most 40,000 cells, a few ms), so `stop` is not consulted."""
        answer = solve_maze(self.grid)
        return Solved(format_rows(answer), f"exact: BFS shortest path, {self.shortest} steps")

    def check(self, answer: str) -> Verdict:
        """Accepts `answer` when it is the maze with 'o' on the open cells of one simple
        4-connected path from S to G (walls, S and G unchanged) whose length is the shortest."""
        rows = answer.removesuffix("\n").split("\n")
        height, width = self.grid.shape
        if len(rows) != height or any(len(row) != width for row in rows):
            return Verdict(False, f"not {height} rows of {width} characters")
        try:
            candidate = parse_maze("".join(rows), width)
        except MalformedMaze as error:
            return Verdict(False, error.message)
        result = check_path(self.grid, candidate)
        if not result.valid:
            return Verdict(False, "not one path of marked open cells from S to G")
        if not result.optimal:
            return Verdict(False, f"a path of {result.length} steps; the shortest has "
                                  f"{result.shortest}", result.length)
        return Verdict(True, f"optimal: {result.length} steps", result.length)


def format_rows(grid: np.ndarray) -> str:
    """The wire text of a token grid: its rows joined by '\\n'."""
    width = grid.shape[1]
    text = format_maze(grid)
    return "\n".join(text[i:i + width] for i in range(0, len(text), width))


def parse_maze_grid(text: str) -> MazeProblem:
    """Validates the request's maze: the edge of the service.

    Args:
        text: rows joined by '\\n' (one trailing '\\n' allowed) over '#', ' ', 'S', 'G'.
    Raises:
        InvalidArgument: "maze.grid" is empty, has fewer than 2 or more than 200 rows or columns,
            ragged rows, a character outside '#', ' ', 'S', 'G', not exactly one S and one G, or a
            goal that no path reaches.
    """
    if not text:
        raise InvalidArgument(GRID_FIELD, "must not be empty")
    rows = text.removesuffix("\n").split("\n")
    width = len(rows[0])
    if not MIN_SIDE <= len(rows) <= MAX_SIDE or not MIN_SIDE <= width <= MAX_SIDE:
        raise InvalidArgument(GRID_FIELD, f"is {len(rows)} rows of {width} characters; rows and "
                                          f"columns must each be in {MIN_SIDE}..{MAX_SIDE}")
    for index, row in enumerate(rows):
        if len(row) != width:
            raise InvalidArgument(GRID_FIELD, f"ragged rows: row {index + 1} has {len(row)} "
                                              f"characters, row 1 has {width}")
        for col, char in enumerate(row):
            if char not in QUESTION_CHARS:
                raise InvalidArgument(GRID_FIELD, f"row {index + 1}, column {col + 1}: {char!r} "
                                                  f"is not '#' (wall), ' ' (open), 'S' or 'G'")
    grid = parse_maze("".join(rows), width)
    for token, name in ((START, "S (start)"), (GOAL, "G (goal)")):
        count = int((grid == token).sum())
        if count != 1:
            raise InvalidArgument(GRID_FIELD, f"has {count} {name}; exactly one is needed")
    start = tuple(int(x) for x in np.argwhere(grid == START)[0])
    goal = tuple(int(x) for x in np.argwhere(grid == GOAL)[0])
    shortest = int(distances_from(grid, start)[goal])
    if shortest < 0:
        raise InvalidArgument(GRID_FIELD, "no path from S reaches G")
    return MazeProblem(grid, shortest)


@dataclass(frozen=True)
class MazeAnswer:
    """The loop's answer: the maze with its path marked 'o', the path's steps, and whether the
    checker proved it shortest."""

    grid: str
    path_length: int
    optimal: bool


def synthesize_maze(problem: MazeProblem, tally: Tally, proposals: dict[AgentName, Proposal],
                    context: tuple = ()) -> MazeAnswer:
    """The answer from the final tally, checked once more.

    Raises:
        ValueError: the tally's answer fails the checker (the loop counts only verified answers,
            so this is a bug).
    """
    verdict = verified(problem, tally.answer)
    return MazeAnswer(tally.answer, verdict.path_length, True)
