"""Readers for the puzzle files: one-puzzle-per-line Sudoku lists and the HRM CSV format.

- Line files: Norvig's lists (`shared/data/sudoku-norvig/`, '.' or '0' blanks) and tdoku's
  benchmark sets (`shared/data/sudoku-tdoku-bench/`, '#' comment lines, some with CRLF endings).
  Blank lines and lines starting with '#' are skipped; trailing '\\r' is stripped.
- CSV: `source,question,answer,rating` with a header row, as in HRM's Sudoku-Extreme and
  Maze-Hard releases (sapientinc/sudoku-extreme, sapientinc/maze-30x30-hard-1k), read from a
  local path (nothing is downloaded).
"""

from __future__ import annotations

import csv
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from libs.puzzles.maze import MalformedMaze, parse_maze
from libs.puzzles.sudoku import BoxShape, MalformedPuzzle, parse_puzzle

CSV_COLUMNS = ("source", "question", "answer", "rating")


class PuzzleFileError(Exception):
    """A puzzle file line or CSV row that does not parse; the message names the file and line."""

    def __init__(self, message: str, path: Path, line: int) -> None:
        super().__init__(f"{path}:{line}: {message}")
        self.path = path
        self.line = line


def iter_puzzle_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """`(line number, text)` for each puzzle line (1-based numbers; comments and blanks skipped)."""
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            text = line.strip()
            if text and not text.startswith("#"):
                yield number, text


def read_sudoku_file(
    path: str | Path, limit: int | None = None, shape: BoxShape | None = None
) -> list[np.ndarray]:
    """Read a Norvig or tdoku file, or any file of one N*N-character puzzle per line.

    Args:
        path: the file.
        limit: read at most this many puzzles (None: all).
        shape: box shape; defaults to `box_shape_for(N)` per puzzle.
    Returns:
        `[N, N]` int8 grids, 0 for blanks, in file order.
    Raises:
        FileNotFoundError: no such file.
        PuzzleFileError: a line is not a puzzle (wrong length or character).
    """
    path = Path(path)
    puzzles = []
    for number, text in itertools.islice(iter_puzzle_lines(path), limit):
        try:
            puzzles.append(parse_puzzle(text, shape))
        except MalformedPuzzle as error:
            raise PuzzleFileError(error.message, path, number) from error
    return puzzles


@dataclass(frozen=True)
class CsvRecord:
    """One row of an HRM-format CSV: `question` and `answer` as stored (strings), `rating` as int
    (Sudoku-Extreme: backtracking difficulty; Maze-Hard: shortest-path length)."""

    source: str
    question: str
    answer: str
    rating: int


def read_puzzle_csv(path: str | Path, limit: int | None = None) -> list[CsvRecord]:
    """Read `source,question,answer,rating` rows (header required) from a local CSV.

    Raises:
        FileNotFoundError: no such file.
        PuzzleFileError: the header differs from `CSV_COLUMNS`, a row has another number of
            fields, or `rating` is not an integer.
    """
    path = Path(path)
    records = []
    with open(path, newline="", encoding="utf-8") as handle:
        rows = csv.reader(handle)
        header = next(rows, None)
        if header is None or tuple(h.strip() for h in header) != CSV_COLUMNS:
            raise PuzzleFileError(f"expected header {','.join(CSV_COLUMNS)}, got {header}", path, 1)
        for row in rows:
            if limit is not None and len(records) >= limit:
                break
            if len(row) != len(CSV_COLUMNS):
                raise PuzzleFileError(f"expected 4 fields, got {len(row)}", path, rows.line_num)
            source, question, answer, rating = row
            try:
                rating_value = int(rating)
            except ValueError as error:
                raise PuzzleFileError(
                    f"rating {rating!r} is not an integer", path, rows.line_num
                ) from error
            records.append(CsvRecord(source, question, answer, rating_value))
    return records


def read_sudoku_csv(
    path: str | Path, limit: int | None = None, shape: BoxShape | None = None
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Sudoku-Extreme CSV as `(puzzle, solution)` pairs of `[N, N]` int8 grids.

    Raises:
        PuzzleFileError: a question or answer that does not parse, or an answer with blanks.
    """
    path = Path(path)
    pairs = []
    for row, record in enumerate(read_puzzle_csv(path, limit), start=2):
        try:
            puzzle = parse_puzzle(record.question, shape)
            solution = parse_puzzle(record.answer, shape)
        except MalformedPuzzle as error:
            raise PuzzleFileError(error.message, path, row) from error
        if not solution.all():
            raise PuzzleFileError("answer has blank cells", path, row)
        pairs.append((puzzle, solution))
    return pairs


def read_maze_csv(
    path: str | Path, limit: int | None = None
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Maze-Hard CSV as `(question, answer)` pairs of square `[S, S]` uint8 token grids
    (`libs.puzzles.maze` ids; the side S is the square root of the string length).

    Raises:
        PuzzleFileError: a string whose length is not a square, or a character outside "# SGo".
    """
    path = Path(path)
    pairs = []
    for row, record in enumerate(read_puzzle_csv(path, limit), start=2):
        try:
            pairs.append((parse_maze(record.question), parse_maze(record.answer)))
        except MalformedMaze as error:
            raise PuzzleFileError(error.message, path, row) from error
    return pairs
