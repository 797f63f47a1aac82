"""experiments/2026-11-29-maze-independent-puzzles/maze_puzzles.py, the maze generator independent
of the trainer's: its mazes are perfect (a spanning tree of the lattice: one path between any two
cells), S and G are far enough apart, and the output is what `eval maze` reads."""

from __future__ import annotations

import numpy as np
import pytest

from libs.puzzles.maze import GOAL, OPEN, START, WALL, distances_from, solve_maze
from mcts_mesh.puzzle_files import read_maze_items


@pytest.fixture(scope="module")
def bench(bench_script):
    return bench_script("experiments/2026-11-29-maze-independent-puzzles/maze_puzzles")


@pytest.mark.parametrize("rows, cols", [(4, 4), (5, 5), (3, 6)])
def test_kruskal_mazes_are_spanning_trees_and_differ_by_seed(bench, rows, cols):
    grids = [bench.kruskal(rows, cols, np.random.default_rng(seed)) for seed in range(5)]
    for grid in grids:
        assert grid.shape == (2 * rows + 1, 2 * cols + 1)
        assert (grid[1::2, 1::2] == OPEN).all()
        openings = int((grid != WALL).sum()) - rows * cols
        assert openings == rows * cols - 1  # a tree: one edge fewer than cells
        assert (distances_from(grid, (1, 1))[1::2, 1::2] >= 0).all()  # connected
    assert len({grid.tobytes() for grid in grids}) == 5


def test_start_and_goal_are_at_least_the_minimum_apart_and_have_one_path(bench):
    rng = np.random.default_rng(7)
    for _ in range(20):
        question = bench.maze(4, 4, rng, min_path_length=6)
        start = tuple(np.argwhere(question == START)[0])
        goal = tuple(np.argwhere(question == GOAL)[0])
        assert distances_from(question, start)[goal] >= 6
        assert solve_maze(question) is not None


def test_the_output_file_is_what_eval_maze_reads(bench, tmp_path):
    path = tmp_path / "mazes.txt"
    assert bench.main(["--rows", "4", "--cols", "4", "--count", "12", "--seed", "3",
                       "--output", str(path)]) == 0
    items = read_maze_items(path)
    assert len(items) == 12
    assert all(question.shape == (9, 9) and answer is None for question, answer in items)
