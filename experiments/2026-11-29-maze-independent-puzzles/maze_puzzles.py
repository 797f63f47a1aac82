"""Mazes from a generator independent of the trainer's, for measuring the reasoning models on mazes
they were not drawn from (the HRM-against-TRM comparison, `bench/reasoning_models.py`).

The trainer (`libs.puzzles.maze.generate_maze`) carves a perfect maze with the recursive backtracker
(randomised depth-first search: long corridors, few branches), then draws S uniformly and G among
the cells at least `min_path_length` steps from S. This generator differs on both halves:

1. the maze: randomised Kruskal (every wall between two lattice cells in a random order, knocked
   down when it joins two regions not yet joined, a union-find over the cells): also a perfect
   maze (one path between any two cells), but with many short dead ends and shorter corridors;
2. S and G: two distinct lattice cells drawn uniformly at once, redrawn until the path between
   them has at least `min_path_length` steps.

    .venv/bin/python experiments/2026-11-29-maze-independent-puzzles/maze_puzzles.py \\
        --rows 4 --cols 4 --count 1000 --seed 7 --output m9.txt
    .venv/bin/mcts-mesh eval maze m9.txt --agents hrm

The output is one maze a line, its rows joined by '/' (the format `mcts-mesh eval maze` reads);
the answer is the only shortest path (`libs.puzzles.maze.solve_maze`), so none is written.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from libs.puzzles.maze import GOAL, OPEN, START, WALL, distances_from, format_maze

MAX_DRAWS = 1_000
"""S-G pairs drawn per maze at most before the maze is redrawn."""


def _root(parents: list[int], cell: int) -> int:
    while parents[cell] != cell:
        parents[cell] = parents[parents[cell]]
        cell = parents[cell]
    return cell


def kruskal(rows: int, cols: int, rng: np.random.Generator) -> np.ndarray:
    """A perfect maze `[2 rows + 1, 2 cols + 1]` uint8 (WALL / OPEN token ids) by randomised
    Kruskal over the `rows x cols` lattice."""
    grid = np.full((2 * rows + 1, 2 * cols + 1), WALL, dtype=np.uint8)
    grid[1::2, 1::2] = OPEN
    walls = [((r, c), (r, c + 1)) for r in range(rows) for c in range(cols - 1)] + \
        [((r, c), (r + 1, c)) for r in range(rows - 1) for c in range(cols)]
    parents = list(range(rows * cols))
    for index in rng.permutation(len(walls)):
        (r1, c1), (r2, c2) = walls[int(index)]
        a, b = _root(parents, r1 * cols + c1), _root(parents, r2 * cols + c2)
        if a != b:
            parents[a] = b
            grid[r1 + r2 + 1, c1 + c2 + 1] = OPEN
    return grid


def maze(rows: int, cols: int, rng: np.random.Generator, min_path_length: int = 4) -> np.ndarray:
    """A question grid (no path marked) with S and G at least `min_path_length` steps apart.

    Raises:
        ValueError: no pair of cells that far apart was drawn (the lattice is too small).
    """
    for _ in range(10):
        grid = kruskal(rows, cols, rng)
        for _ in range(MAX_DRAWS):
            first, second = rng.choice(rows * cols, size=2, replace=False)
            start = (2 * int(first // cols) + 1, 2 * int(first % cols) + 1)
            goal = (2 * int(second // cols) + 1, 2 * int(second % cols) + 1)
            if distances_from(grid, start)[goal] >= min_path_length:
                grid[start], grid[goal] = START, GOAL
                return grid
    raise ValueError(f"no {rows}x{cols} maze with S and G {min_path_length} steps apart")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=4, help="lattice rows (grid 2 rows + 1)")
    parser.add_argument("--cols", type=int, default=4, help="lattice columns (grid 2 cols + 1)")
    parser.add_argument("--min-path-length", type=int, default=4, help="S-G steps at least")
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--output", default="-", help="file to write (default stdout)")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    width = 2 * args.cols + 1
    lines = []
    for _ in range(args.count):
        text = format_maze(maze(args.rows, args.cols, rng, args.min_path_length))
        lines.append("/".join(text[i:i + width] for i in range(0, len(text), width)))
    output = "\n".join(lines) + "\n"
    if args.output == "-":
        sys.stdout.write(output)
    else:
        with open(args.output, "w", encoding="utf-8") as handle:
            handle.write(output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
