"""Puzzle files of the command line: reading the files `eval sudoku|maze` takes, and writing the
trainer's held-out sets (`puzzles heldout`).

Formats (chosen per file by its first line):
- HRM CSV: a header `source,question,answer,rating`, then one puzzle a row with its answer, as in
  HRM's Sudoku-Extreme and Maze-Hard releases (`libs.puzzles.readers.read_puzzle_csv`). Sudoku
  questions are N*N characters ('.' or '0' blank), answers N*N digits, rating free (we write the
  blank count); maze questions and answers are the square grid's rows concatenated ('o' marks the
  answer's path), rating the shortest path's length in steps.
- Sudoku line files: one puzzle a line, N*N characters, '.' or '0' for a blank; blank lines and
  lines starting with '#' are skipped (Norvig's and tdoku's lists). No answers.
- Maze line files: one maze a line, its rows joined by '/', e.g. `#####/#S G#/#####` (rows of
  '#', ' ', 'S', 'G'; trailing spaces of a row are kept, so do not strip lines in an editor). A
  line with no '/' is a comment (start it with '#') or blank. No answers: the reference path is
  the breadth-first-search label the trainer uses (`libs.puzzles.maze.solve_maze`).
"""

from __future__ import annotations

import csv
import io
import itertools
from pathlib import Path
from typing import TextIO

import numpy as np

from libs.puzzles import maze as maze_lib
from libs.puzzles import sudoku as sudoku_lib
from libs.puzzles.readers import (
    CSV_COLUMNS,
    PuzzleFileError,
    read_maze_csv,
    read_sudoku_csv,
    read_sudoku_file,
)
from services.neural.models.reasoning_tokens import decode_maze, decode_sudoku
from training.reasoning.data import MazeTask, SudokuTask, held_out_set

ROW_SEPARATOR = "/"
"""Joins a maze's rows on one line of a maze line file."""
FORMATS = ("csv", "lines")

Item = tuple[np.ndarray, np.ndarray | None]
"""A puzzle and its answer when the file gives one: Sudoku `[N, N]` int8 grids (0 blank), mazes
`[H, W]` uint8 token grids (`libs.puzzles.maze`)."""


def is_hrm_csv(path: str | Path) -> bool:
    """True when the file's first line is the HRM CSV header."""
    with open(path, encoding="utf-8") as handle:
        first = handle.readline()
    return tuple(field.strip() for field in first.strip().split(",")) == CSV_COLUMNS


def read_sudoku_items(path: str | Path, limit: int | None = None) -> list[Item]:
    """Sudoku puzzles of an HRM CSV (with answers) or a line file (without).

    Raises:
        FileNotFoundError: no such file. PuzzleFileError: a line or row that does not parse.
    """
    if is_hrm_csv(path):
        return [(puzzle, solution) for puzzle, solution in read_sudoku_csv(path, limit)]
    return [(puzzle, None) for puzzle in read_sudoku_file(path, limit)]


def read_maze_items(path: str | Path, limit: int | None = None) -> list[Item]:
    """Mazes of an HRM CSV (square, with answers) or a maze line file (without).

    Raises:
        FileNotFoundError: no such file. PuzzleFileError: a line or row that does not parse.
    """
    path = Path(path)
    if is_hrm_csv(path):
        return [(question, answer) for question, answer in read_maze_csv(path, limit)]
    items: list[Item] = []
    with open(path, encoding="utf-8") as handle:
        lines = ((number, line.rstrip("\r\n")) for number, line in enumerate(handle, start=1))
        mazes = ((number, text) for number, text in lines if ROW_SEPARATOR in text)
        for number, text in itertools.islice(mazes, limit):
            try:
                items.append((parse_maze_line(text), None))
            except maze_lib.MalformedMaze as error:
                raise PuzzleFileError(error.message, path, number) from error
    return items


def parse_maze_line(text: str) -> np.ndarray:
    """A maze line (rows joined by '/') -> `[H, W]` uint8 token grid.

    Raises:
        MalformedMaze: ragged rows or a character outside "# SGo".
    """
    rows = text.split(ROW_SEPARATOR)
    width = len(rows[0])
    for index, row in enumerate(rows):
        if len(row) != width:
            raise maze_lib.MalformedMaze(f"ragged rows: row {index + 1} has {len(row)} "
                                         f"characters, row 1 has {width}")
    return maze_lib.parse_maze("".join(rows), width)


def maze_line(grid: np.ndarray) -> str:
    """A token grid as one maze line: its rows joined by '/'."""
    width = grid.shape[1]
    text = maze_lib.format_maze(grid)
    return ROW_SEPARATOR.join(text[i:i + width] for i in range(0, len(text), width))


def maze_rows(grid: np.ndarray) -> str:
    """A token grid as the orchestrator's MazeProblem.grid: its rows joined by '\\n'."""
    return maze_line(grid).replace(ROW_SEPARATOR, "\n")


def held_out_rows(task: SudokuTask | MazeTask, count: int, seed: int
                  ) -> list[tuple[np.ndarray, np.ndarray]]:
    """`held_out_set(task, count, seed)` decoded: (question, answer) grids, in the trainer's
    order (a training run with seed T evaluates on seed T + 1)."""
    data = held_out_set(task, count, seed)
    rows = []
    for inputs, labels in zip(data.inputs.numpy(), data.labels.numpy(), strict=True):
        if isinstance(task, SudokuTask):
            rows.append((decode_sudoku(inputs, task.size), decode_sudoku(labels, task.size)))
        else:
            rows.append((decode_maze(inputs, task.height, task.width),
                         decode_maze(labels, task.height, task.width)))
    return rows


def write_held_out(task: SudokuTask | MazeTask, count: int, seed: int, out: TextIO,
                   file_format: str = "csv") -> int:
    """Writes `held_out_set(task, count, seed)` to `out` in `file_format` ("csv": the HRM CSV
    with answers; "lines": a line file without them). Returns the puzzles written.

    Raises:
        ValueError: unknown format, or a non-square maze as CSV (the CSV reader takes square
            grids only).
    """
    if file_format not in FORMATS:
        raise ValueError(f"unknown format {file_format!r}; expected one of {FORMATS}")
    maze = isinstance(task, MazeTask)
    if maze and file_format == "csv" and task.height != task.width:
        raise ValueError("HRM CSV mazes are square; use the lines format for "
                         f"{task.height}x{task.width} grids")
    rows = held_out_rows(task, count, seed)
    source = (f"heldout-maze{task.height}x{task.width}-seed{seed}" if maze
              else f"heldout-sudoku{task.size}-blanks{task.blanks}-seed{seed}")
    if file_format == "lines":
        # The comment holds no '/': in a maze line file a line with one is a maze.
        out.write(f"# {source}: held_out_set({task}, {count}, {seed}), "
                  f"{count} {'mazes' if maze else 'puzzles'}\n")
        for question, _ in rows:
            out.write((maze_line(question) if maze
                       else sudoku_lib.format_grid(question)) + "\n")
        return len(rows)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for question, answer in rows:
        if maze:
            rating = int((answer == maze_lib.PATH).sum()) + 1
            writer.writerow((source, maze_lib.format_maze(question),
                             maze_lib.format_maze(answer), rating))
        else:
            writer.writerow((source, sudoku_lib.format_grid(question),
                             sudoku_lib.format_grid(answer), int((question == 0).sum())))
    out.write(buffer.getvalue())
    return len(rows)
