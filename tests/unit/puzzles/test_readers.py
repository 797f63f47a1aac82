"""Readers: Norvig and tdoku line files, HRM-format CSVs."""


import numpy as np
import pytest

from libs.puzzles.maze import check_path, format_maze, generate_maze
from libs.puzzles.readers import (
    PuzzleFileError,
    read_maze_csv,
    read_puzzle_csv,
    read_sudoku_csv,
    read_sudoku_file,
)
from libs.puzzles.sudoku import BoxShape, check_solution, format_grid, generate, solve


def test_reads_norvig_files_both_blank_styles(data_dir):
    top95 = read_sudoku_file(data_dir / "sudoku-norvig" / "py_sudoku-top95.txt")
    assert len(top95) == 95
    seventeen = read_sudoku_file(data_dir / "sudoku-norvig" / "ipynb_sudokus_17.txt", limit=3)
    assert len(seventeen) == 3 and all(int((p != 0).sum()) == 17 for p in seventeen)


def test_reads_tdoku_files_skipping_comments_and_crlf(data_dir):
    forum = read_sudoku_file(data_dir / "sudoku-tdoku-bench" / "puzzles5_forum_hardest_1905_11+", 5)
    assert len(forum) == 5 and forum[0].shape == (9, 9)
    serg = read_sudoku_file(data_dir / "sudoku-tdoku-bench" / "puzzles7_serg_benchmark", limit=2)
    assert len(serg) == 2


def test_line_reader_handles_comments_and_reports_bad_lines(tmp_path):
    path = tmp_path / "six.txt"
    path.write_text("# six by six\n\n" + "." * 36 + "\r\n" + "7" + "." * 35 + "\n")
    with pytest.raises(PuzzleFileError) as caught:
        read_sudoku_file(path)
    assert caught.value.line == 4
    assert len(read_sudoku_file(path, limit=1)) == 1


def test_sudoku_csv(tmp_path):
    rng = np.random.default_rng(2)
    rows = ["source,question,answer,rating"]
    expected = []
    for i in range(3):
        puzzle, solution = generate(BoxShape(3, 3), 40, rng)
        rows.append(f"gen{i},{format_grid(puzzle)},{format_grid(solution)},{i}")
        expected.append((puzzle, solution))
    path = tmp_path / "test.csv"
    path.write_text("\n".join(rows) + "\n")
    records = read_puzzle_csv(path)
    assert [r.rating for r in records] == [0, 1, 2] and records[1].source == "gen1"
    pairs = read_sudoku_csv(path, limit=2)
    assert len(pairs) == 2
    for (puzzle, solution), (want_p, want_s) in zip(pairs, expected, strict=False):
        assert np.array_equal(puzzle, want_p) and np.array_equal(solution, want_s)
        assert check_solution(puzzle, solution).valid
        assert np.array_equal(solve(puzzle).solution, solution)


def test_maze_csv(tmp_path):
    question, answer = generate_maze(4, 4, np.random.default_rng(0), min_path_length=4)
    # HRM's mazes are square strings; ours here is 9x9.
    path = tmp_path / "maze.csv"
    path.write_text(
        f"source,question,answer,rating\ngen,{format_maze(question)},{format_maze(answer)},7\n"
    )
    [(q, a)] = read_maze_csv(path)
    assert np.array_equal(q, question) and np.array_equal(a, answer)
    assert check_path(q, a).optimal


@pytest.mark.parametrize(
    "text",
    [
        "source,puzzle,answer,rating\n",
        "source,question,answer,rating\nx,1,2\n",
        "source,question,answer,rating\nx," + "." * 81 + "," + "1" * 81 + ",hard\n",
        "source,question,answer,rating\nx," + "." * 80 + "," + "1" * 81 + ",3\n",
    ],
)
def test_csv_errors(tmp_path, text):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(PuzzleFileError):
        read_sudoku_csv(path)
