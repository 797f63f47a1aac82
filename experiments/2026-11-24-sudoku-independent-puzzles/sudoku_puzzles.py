"""Sudoku puzzles from a generator independent of the trainer's, for measuring the reasoning models
on puzzles they were not drawn from (issue 13's model-choice target).

The trainer (`libs.puzzles.sudoku.generate`) draws a full grid by a shuffled candidate-bitmask
search, then blanks cells one by one in a random order, keeping each removal whose solution stays
unique, until it has `blanks`. This generator uses a different construction on both halves:

1. the full grid: plain cell-by-cell backtracking in row-major order, the digits of each cell tried
   in a fresh random order (no candidate masks, no most-constrained-cell heuristic);
2. the blanks: a set of `blanks` cells drawn uniformly at random all at once, accepted only when
   the exact solver (`libs.puzzles.sudoku.solve`, limit 2) finds exactly one solution, redrawn
   otherwise. Every unique-solution blank set of that size is equally likely, where the trainer's
   greedy removal favours the cells it happened to visit first.

    .venv/bin/python experiments/2026-11-24-sudoku-independent-puzzles/sudoku_puzzles.py \\
        --blanks 22 --count 500 --seed 7 --output b22.txt
    .venv/bin/mcts-mesh eval sudoku b22.txt --agents trm

The output is one puzzle a line ('.' for a blank), the format `mcts-mesh eval sudoku` reads.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from libs.puzzles.sudoku import BoxShape, box_shape_for, format_grid, solve

MAX_DRAWS = 10_000
"""Blank sets drawn per puzzle at most before giving up (6x6 with 22 blanks needs a few)."""


def full_grid(shape: BoxShape, rng: np.random.Generator) -> np.ndarray:
    """A random complete grid, `[N, N]` int8, by row-major backtracking with shuffled digits."""
    n = shape.size
    grid = np.zeros((n, n), dtype=np.int8)
    cells = [(r, c) for r in range(n) for c in range(n)]
    orders: list[list[int]] = [[] for _ in cells]

    def allowed(r: int, c: int, digit: int) -> bool:
        r0, c0 = r - r % shape.box_rows, c - c % shape.box_cols
        return not (digit in grid[r] or digit in grid[:, c]
                    or digit in grid[r0:r0 + shape.box_rows, c0:c0 + shape.box_cols])

    index = 0
    orders[0] = [int(d) for d in rng.permutation(np.arange(1, n + 1))]
    while index < len(cells):
        r, c = cells[index]
        grid[r, c] = 0
        while orders[index] and not allowed(r, c, orders[index][0]):
            orders[index].pop(0)
        if not orders[index]:
            index -= 1  # dead end: back to the previous cell, which tries its next digit
            if index < 0:
                raise RuntimeError("no full grid exists for this box shape")
            orders[index].pop(0)
            continue
        grid[r, c] = orders[index][0]
        index += 1
        if index < len(cells):
            orders[index] = [int(d) for d in rng.permutation(np.arange(1, n + 1))]
    return grid


def puzzle(shape: BoxShape, blanks: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """`(puzzle, solution)`, `[N, N]` int8 each: `blanks` cells chosen uniformly at once, redrawn
    until the puzzle has exactly one solution.

    Raises:
        ValueError: `blanks` outside 0..N*N.
        RuntimeError: no unique blank set in `MAX_DRAWS` draws (too many blanks for the size).
    """
    n = shape.size
    if not 0 <= blanks <= n * n:
        raise ValueError(f"blanks must be in 0..{n * n}, got {blanks}")
    solution = full_grid(shape, rng)
    for _ in range(MAX_DRAWS):
        question = solution.copy()
        question.reshape(-1)[rng.choice(n * n, size=blanks, replace=False)] = 0
        if solve(question, shape, limit=2).count == 1:
            return question, solution
    raise RuntimeError(f"no {n}x{n} blank set of {blanks} with one solution in {MAX_DRAWS} draws")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=6)
    parser.add_argument("--blanks", type=int, required=True)
    parser.add_argument("--count", type=int, default=500)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--output", default="-", help="file to write (default stdout)")
    args = parser.parse_args(argv)
    shape = box_shape_for(args.size)
    rng = np.random.default_rng(args.seed)
    lines = [format_grid(puzzle(shape, args.blanks, rng)[0]) for _ in range(args.count)]
    text = "\n".join(lines) + "\n"
    if args.output == "-":
        sys.stdout.write(text)
    else:
        with open(args.output, "w", encoding="utf-8") as handle:
            handle.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
