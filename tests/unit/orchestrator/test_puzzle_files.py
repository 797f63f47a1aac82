"""The command line's puzzle files: the held-out sets it writes are exactly the trainer's, and the
maze line format reads back."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

from libs.puzzles.readers import PuzzleFileError
from mcts_mesh.puzzle_files import (
    maze_line,
    parse_maze_line,
    read_maze_items,
    read_sudoku_items,
    write_held_out,
)
from training.reasoning.data import (
    MazeTask,
    SudokuTask,
    encode_maze,
    encode_sudoku,
    held_out_set,
)


@pytest.mark.parametrize("file_format", ["csv", "lines"])
def test_sudoku_held_out_file_is_the_trainers_held_out_set(tmp_path, file_format):
    task = SudokuTask(size=6, blanks=16)
    path = tmp_path / "heldout.txt"
    with path.open("w") as out:
        assert write_held_out(task, 25, 7, out, file_format) == 25
    items = read_sudoku_items(path)
    expected = held_out_set(task, 25, 7)
    inputs = torch.from_numpy(np.stack([encode_sudoku(q) for q, _ in items]))
    assert torch.equal(inputs, expected.inputs)
    if file_format == "csv":
        labels = torch.from_numpy(np.stack([encode_sudoku(a) for _, a in items]))
        assert torch.equal(labels.long(), expected.labels)
    else:
        assert all(answer is None for _, answer in items)


@pytest.mark.parametrize("file_format", ["csv", "lines"])
def test_maze_held_out_file_is_the_trainers_held_out_set(tmp_path, file_format):
    task = MazeTask()
    path = tmp_path / "mazes"
    with path.open("w") as out:
        write_held_out(task, 12, 2, out, file_format)
    items = read_maze_items(path)
    expected = held_out_set(task, 12, 2)
    inputs = torch.from_numpy(np.stack([encode_maze(q) for q, _ in items]))
    assert torch.equal(inputs, expected.inputs)
    if file_format == "csv":
        labels = torch.from_numpy(np.stack([encode_maze(a) for _, a in items]))
        assert torch.equal(labels.long(), expected.labels)


def test_maze_lines_round_trip_and_bad_lines_name_the_line(tmp_path):
    text = "#####/#S G#/#####"
    assert maze_line(parse_maze_line(text)) == text
    path = tmp_path / "bad.txt"
    path.write_text("# two mazes\n" + text + "\n\n#####/#S G#/####\n")
    with pytest.raises(PuzzleFileError, match=r"bad.txt:4: ragged rows: row 3"):
        read_maze_items(path)
    assert len(read_maze_items(path, limit=1)) == 1


def test_non_square_mazes_are_refused_as_csv():
    with pytest.raises(ValueError, match="lines format"):
        write_held_out(MazeTask(rows=3, cols=4), 2, 0, io.StringIO(), "csv")
