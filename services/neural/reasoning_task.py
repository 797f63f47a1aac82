"""What a reasoning checkpoint solves, and the grid alphabet <-> token ids of that task.

A task is named `<kind>-<height>x<width>`: "sudoku-6x6", "sudoku-9x9", "maze-9x9", "maze-30x30".
The trainer (`training.reasoning.trainer.train`) records it in the checkpoint's metadata as
"task_kind" ("SudokuTask" or "MazeTask") and "task" (the task dataclass as a dict); a checkpoint
imported from elsewhere may give "task" as the name itself.

Token encodings are shared with the trainer (`services.neural.models.reasoning_tokens`), so a
served model sees exactly the ids it was trained on:
- Sudoku N x N: '.' or '0' blank -> 1, digit d -> d + 1 (0 is padding); vocabulary N + 2.
- Maze: '#' 1, ' ' 2, 'S' 3, 'G' 4, 'o' 5 (`libs.puzzles.maze.CHARSET`, 0 padding); vocabulary 6.
  A question holds no 'o'; an answer marks the shortest path with 'o'.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from libs.errors import InvalidArgument
from libs.puzzles import maze as maze_lib
from libs.puzzles import sudoku as sudoku_lib
from services.neural.models.reasoning_tokens import (
    decode_sudoku,
    encode_maze,
    encode_sudoku,
    sudoku_vocab_size,
)

SUDOKU = "sudoku"
MAZE = "maze"
PADDING_CHAR = "?"
"""A maze cell where the model predicts the padding token (no answer holds it)."""

_NAME = re.compile(r"^(sudoku|maze)-(\d+)x(\d+)$")


class TaskError(ValueError):
    """Checkpoint metadata that names no task, or a malformed one; the message says which."""


@dataclass(frozen=True)
class GridTask:
    """A grid puzzle kind and size: `kind` is "sudoku" or "maze", the grid `height x width`."""

    kind: str
    height: int
    width: int

    def __post_init__(self) -> None:
        if self.kind not in (SUDOKU, MAZE):
            raise TaskError(f"unknown task kind {self.kind!r}; expected {SUDOKU!r} or {MAZE!r}")
        if self.height < 1 or self.width < 1:
            raise TaskError(f"task grid {self.height}x{self.width} is empty")
        if self.kind == SUDOKU:
            if self.height != self.width or not 4 <= self.height <= sudoku_lib.MAX_STRING_SIZE:
                raise TaskError(f"a Sudoku task is N x N with N in 4..9, not "
                                f"{self.height}x{self.width}")
            try:
                sudoku_lib.box_shape_for(self.height)
            except sudoku_lib.MalformedPuzzle as error:
                raise TaskError(error.message) from error

    @property
    def name(self) -> str:
        """"sudoku-6x6", "maze-9x9", ..."""
        return f"{self.kind}-{self.height}x{self.width}"

    @property
    def cells(self) -> int:
        """L: grid cells, the model's `seq_len`."""
        return self.height * self.width

    @property
    def vocab_size(self) -> int:
        """Token ids the model must have: N + 2 for Sudoku, 6 for mazes."""
        if self.kind == SUDOKU:
            return sudoku_vocab_size(self.height)
        return len(maze_lib.CHARSET) + 1

    def alphabet(self) -> str:
        """The characters a request grid may hold."""
        if self.kind == SUDOKU:
            return sudoku_lib.BLANK_CHARS + "".join(str(d) for d in range(1, self.height + 1))
        return maze_lib.CHARSET.replace("o", "")

    def encode(self, grid: str) -> np.ndarray:
        """A request grid (row-major, one character per cell) -> int32 [L] token ids.

        Raises:
            InvalidArgument("grid"): not `cells` characters, a character outside `alphabet()`,
                or (maze) not exactly one 'S' and one 'G'.
        """
        if len(grid) != self.cells:
            raise InvalidArgument("grid", f"a {self.name} grid has {self.cells} characters "
                                          f"({self.height} rows of {self.width}), got {len(grid)}")
        allowed = self.alphabet()
        for index, char in enumerate(grid):
            if char not in allowed:
                raise InvalidArgument("grid", f"cell {index} (row {index // self.width + 1}, "
                                              f"column {index % self.width + 1}): {char!r} is "
                                              f"not one of {allowed!r}")
        if self.kind == SUDOKU:
            shape = sudoku_lib.box_shape_for(self.height)
            return encode_sudoku(sudoku_lib.parse_puzzle(grid, shape))
        for marker in "SG":
            if grid.count(marker) != 1:
                raise InvalidArgument("grid", f"a maze needs exactly one {marker!r}, found "
                                              f"{grid.count(marker)}")
        return encode_maze(maze_lib.parse_maze(grid, self.width))

    def decode(self, tokens: np.ndarray) -> str:
        """Predicted token ids int [L] -> a grid string in the request alphabet: Sudoku digits
        with '.' for a predicted blank or padding; maze characters with 'o' on the path and
        `PADDING_CHAR` for predicted padding."""
        tokens = np.asarray(tokens, dtype=np.int64).reshape(-1)
        if self.kind == SUDOKU:
            return sudoku_lib.format_grid(decode_sudoku(tokens, self.height))
        characters = np.array([PADDING_CHAR, *maze_lib.CHARSET])
        return "".join(characters[np.clip(tokens, 0, len(maze_lib.CHARSET))])

    def placeholder(self) -> str:
        """A valid request grid with no content (every cell blank or open), for warm-up."""
        if self.kind == SUDOKU:
            return "." * self.cells
        return "S" + " " * (self.cells - 2) + "G"


def parse_task_name(name: str) -> GridTask:
    """"sudoku-6x6" -> GridTask("sudoku", 6, 6). Raises TaskError for another shape of string."""
    match = _NAME.match(name)
    if match is None:
        raise TaskError(f"task {name!r} is not '<sudoku|maze>-<height>x<width>'")
    return GridTask(match.group(1), int(match.group(2)), int(match.group(3)))


def task_from_metadata(metadata: dict[str, Any]) -> GridTask | None:
    """The task of a checkpoint, from the metadata the trainer writes; None when it names none
    (a game network).

    Reads "task_kind" "SudokuTask" with "task" {"size": N, ...}, "task_kind" "MazeTask" with
    "task" {"rows": r, "cols": c, ...} (grid (2r + 1) x (2c + 1)), or "task" as a task name.
    Raises:
        TaskError: a task is given but malformed or of an unknown kind.
    """
    task = metadata.get("task")
    kind = metadata.get("task_kind")
    if task is None and kind is None:
        return None
    if isinstance(task, str) and kind is None:
        return parse_task_name(task)
    if not isinstance(task, dict):
        raise TaskError(f"metadata \"task\" {task!r} is neither a task name nor the trainer's "
                        "task fields")
    try:
        if kind == "SudokuTask":
            return GridTask(SUDOKU, int(task["size"]), int(task["size"]))
        if kind == "MazeTask":
            return GridTask(MAZE, 2 * int(task["rows"]) + 1, 2 * int(task["cols"]) + 1)
    except (KeyError, TypeError, ValueError) as error:
        raise TaskError(f"metadata \"task\" {task!r} does not describe a {kind}: {error}") \
            from error
    raise TaskError(f"metadata \"task_kind\" {kind!r} is not SudokuTask or MazeTask")
