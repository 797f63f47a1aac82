"""A Sudoku problem for the consensus loop: validation of the request's grid, the exact solver and
checker over it, and the synthesis of the answer.

Grids come from `libs.puzzles.sudoku` (`[N, N]` int8, 0 for a blank). Answers are solution strings
of N*N digits, row-major. Every error names the request field ("sudoku.puzzle", "sudoku.box_rows",
"sudoku.box_cols").
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass

import numpy as np

from libs.errors import InvalidArgument
from libs.puzzles.sudoku import (
    MAX_STRING_SIZE,
    BoxShape,
    MalformedPuzzle,
    SearchStopped,
    box_shape_for,
    check_solution,
    find_conflict,
    format_grid,
    parse_puzzle,
    solve,
)
from services.orchestrator.loop.types import AgentName, Proposal, Tally
from services.orchestrator.problems.puzzle import Solved, Verdict, verified

PUZZLE_FIELD = "sudoku.puzzle"
SUPPORTED_SIZES = tuple(n for n in range(4, MAX_STRING_SIZE + 1)
                        if any(n % d == 0 for d in range(2, n)))
"""Grid sides N with a box shape and one character per cell: 4, 6, 8, 9."""


@dataclass(frozen=True)
class SudokuProblem:
    """Fill in `grid` (validated: right size, digits in range, no two equal givens in a unit).

    Attributes:
        grid: `[N, N]` int8, 0 for a blank.
        shape: the box shape, `shape.size == N`.
    """

    grid: np.ndarray
    shape: BoxShape

    @property
    def size(self) -> int:
        return self.shape.size

    @property
    def puzzle(self) -> str:
        """The puzzle string, '.' for blanks."""
        return format_grid(self.grid)

    @property
    def blanks(self) -> int:
        """Blank cells (the feature of the reasoning model choice, `agents.reasoning`)."""
        return int((self.grid == 0).sum())

    @property
    def query_length_norm(self) -> float:
        """Share of blank cells, in [0, 1] (routing feature 8: more blanks, a harder puzzle)."""
        return float((self.grid == 0).sum()) / self.grid.size

    @property
    def model_task(self) -> str:
        """The neural service's `Model.task` for this grid: "sudoku-NxN" for the usual box
        shape of N (the shape the trainer generates), "sudoku-NxN-RxC" for another."""
        n = self.size
        if self.shape == box_shape_for(n):
            return f"sudoku-{n}x{n}"
        return f"sudoku-{n}x{n}-{self.shape.box_rows}x{self.shape.box_cols}"

    def model_input(self) -> str:
        """The grid for NeuralService.Solve: N*N characters, '.' for a blank."""
        return self.puzzle

    def answer_from_model(self, grid: str) -> str:
        """A model's predicted grid as an answer string (whitespace dropped; not checked)."""
        return "".join(grid.split())

    def solve(self, stop: threading.Event | None = None) -> Solved | None:
        """The first solution of the exact solver (propagation plus depth-first search,
        `libs.puzzles.sudoku.solve` with `limit=1`). CPU-bound: milliseconds for 9x9 puzzles.
        None when `stop` is set first (checked every 64 search nodes).

        Raises:
            InvalidArgument: "sudoku.puzzle" has no solution (its givens agree, but the exhaustive
                search completes no grid).
        """
        try:
            result = solve(self.grid, self.shape, limit=1, stop=stop)
        except SearchStopped:
            return None
        if result.solution is None:
            raise InvalidArgument(PUZZLE_FIELD, f"has no solution: the givens do not repeat a "
                                                f"digit, but no grid completes them (exhaustive "
                                                f"search, {result.nodes} nodes)")
        return Solved(format_grid(result.solution), f"exact: {result.nodes} search nodes")

    def check(self, answer: str) -> Verdict:
        """Accepts `answer` when it is N*N digits 1..N, every row, column and box holds each
        digit once, and every given of the puzzle is kept."""
        n = self.size
        if len(answer) != n * n or any(not ("1" <= c <= "9") or int(c) > n for c in answer):
            return Verdict(False, f"not {n * n} digits 1..{n}")
        candidate = np.array([int(c) for c in answer], dtype=np.int8).reshape(n, n)
        result = check_solution(self.grid, candidate, self.shape)
        if result.changed_givens:
            r, c = result.changed_givens[0]
            return Verdict(False, f"changes the given at r{r + 1}c{c + 1} "
                                  f"({len(result.changed_givens)} givens changed)")
        if result.violations:
            unit, index = result.violations[0]
            return Verdict(False, f"{unit} {index + 1} does not hold 1..{n} once "
                                  f"({len(result.violations)} units broken)")
        givens = int((self.grid != 0).sum())
        return Verdict(True, f"valid: {3 * n} units complete, {givens} givens kept")


def parse_sudoku(puzzle: str, box_rows: int | None = None,
                 box_cols: int | None = None) -> SudokuProblem:
    """Validates the request's Sudoku: the edge of the service.

    Args:
        puzzle: N*N characters, '.' or '0' for a blank, '1'..'N' for a given; surrounding
            whitespace is ignored.
        box_rows, box_cols: the box shape, both or neither (None: the usual shape for N).
    Raises:
        InvalidArgument: "sudoku.puzzle" is empty, not N*N characters, of an unsupported N, holds a
            character outside '.', '0', '1'..'N', or has contradictory givens (two equal digits in
            a row, column or box; the message says which); "sudoku.box_rows" / "sudoku.box_cols"
            is set alone, below 2, or does not tile the grid.
    """
    text = puzzle.strip()
    if not text:
        raise InvalidArgument(PUZZLE_FIELD, "must not be empty")
    size = math.isqrt(len(text))
    if size * size != len(text):
        raise InvalidArgument(PUZZLE_FIELD, f"has {len(text)} characters; a Sudoku needs N*N "
                                            f"({', '.join(str(n * n) for n in SUPPORTED_SIZES)})")
    if size not in SUPPORTED_SIZES:
        raise InvalidArgument(PUZZLE_FIELD, f"N = {size} is not supported; N is one of "
                                            f"{', '.join(map(str, SUPPORTED_SIZES))}")
    shape = _box_shape(size, box_rows, box_cols)
    try:
        grid = parse_puzzle(text, shape)
    except MalformedPuzzle as error:
        if error.index is None:
            raise InvalidArgument(PUZZLE_FIELD, error.message) from error
        row, col = divmod(error.index, size)
        raise InvalidArgument(PUZZLE_FIELD, f"cell {error.index} (row {row + 1}, column "
                                            f"{col + 1}): {text[error.index]!r} is not '.', '0' "
                                            f"or a digit 1..{size}") from error
    conflict = find_conflict(grid, shape)
    if conflict is not None:
        cells = ", ".join(f"r{r + 1}c{c + 1}" for r, c in conflict.cells)
        raise InvalidArgument(PUZZLE_FIELD, f"contradictory givens: digit {conflict.digit} twice "
                                            f"in {conflict.unit} {conflict.unit_index + 1} "
                                            f"({cells})")
    return SudokuProblem(grid, shape)


def _box_shape(size: int, box_rows: int | None, box_cols: int | None) -> BoxShape:
    if box_rows is None and box_cols is None:
        return box_shape_for(size)
    if box_rows is None or box_cols is None:
        missing, given = ("box_rows", "box_cols") if box_rows is None else ("box_cols", "box_rows")
        raise InvalidArgument(f"sudoku.{missing}", f"set it together with {given}, or neither")
    for name, value in (("box_rows", box_rows), ("box_cols", box_cols)):
        if value < 2:
            raise InvalidArgument(f"sudoku.{name}", f"is {value}; a box has at least 2 rows and "
                                                    f"2 columns")
    if box_rows * box_cols != size:
        raise InvalidArgument("sudoku.box_rows", f"boxes of {box_rows}x{box_cols} do not tile a "
                                                 f"{size}x{size} grid (box_rows * box_cols must "
                                                 f"be {size})")
    return BoxShape(box_rows, box_cols)


@dataclass(frozen=True)
class SudokuAnswer:
    """The loop's answer: `solution` (N*N digits) and the checker's verdict on it."""

    solution: str
    valid: bool


def synthesize_sudoku(problem: SudokuProblem, tally: Tally, proposals: dict[AgentName, Proposal],
                      context: tuple = ()) -> SudokuAnswer:
    """The answer from the final tally, checked once more.

    Raises:
        ValueError: the tally's answer fails the checker (the loop counts only verified answers,
            so this is a bug).
    """
    verified(problem, tally.answer)
    return SudokuAnswer(tally.answer, True)
