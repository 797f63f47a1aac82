"""experiments/2026-11-24-sudoku-independent-puzzles/sudoku_puzzles.py, the generator independent
of the trainer's: full grids are valid, puzzles have exactly the blanks asked and one solution,
and the output is what `eval` reads."""

from __future__ import annotations

import numpy as np
import pytest

from libs.puzzles.sudoku import BoxShape, check_solution, parse_puzzle, solve


@pytest.fixture(scope="module")
def bench(bench_script):
    return bench_script("experiments/2026-11-24-sudoku-independent-puzzles/sudoku_puzzles")


def test_full_grids_are_valid_and_differ_by_seed(bench):
    shape = BoxShape(2, 3)
    grids = [bench.full_grid(shape, np.random.default_rng(seed)) for seed in range(5)]
    for grid in grids:
        assert check_solution(np.zeros_like(grid), grid, shape).valid
    assert len({grid.tobytes() for grid in grids}) == 5


@pytest.mark.parametrize("blanks", [16, 22])
def test_puzzles_have_the_blanks_asked_and_one_solution(bench, blanks):
    rng = np.random.default_rng(3)
    for _ in range(5):
        puzzle, solution = bench.puzzle(BoxShape(2, 3), blanks, rng)
        assert int((puzzle == 0).sum()) == blanks
        result = solve(puzzle, BoxShape(2, 3), limit=2)
        assert result.count == 1 and np.array_equal(result.solution, solution)
    with pytest.raises(ValueError):
        bench.puzzle(BoxShape(2, 3), 37, rng)


def test_the_file_is_one_puzzle_a_line(bench, tmp_path):
    output = tmp_path / "b16.txt"
    assert bench.main(["--blanks", "16", "--count", "3", "--seed", "1",
                       "--output", str(output)]) == 0
    lines = output.read_text().splitlines()
    assert len(lines) == 3 and all(line.count(".") == 16 for line in lines)
    assert parse_puzzle(lines[0]).shape == (6, 6)
