"""Sudoku augmentations, as HRM's `dataset/build_sudoku_dataset.py` (`shuffle_sudoku`,
sapientinc/HRM): optional transpose, then a row permutation (bands shuffled, rows shuffled within
each band) and a column permutation (stacks, then columns within stacks), then a digit permutation
that keeps 0. Grids and box shapes as in `libs.puzzles.sudoku`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from libs.puzzles.sudoku import BoxShape


@dataclass(frozen=True)
class SudokuAugmentation:
    """One validity-preserving relabelling of a Sudoku, as in HRM's `shuffle_sudoku`.

    `apply(x) = digit_map[position_shuffle(transpose?(x))]`, where position cell `(i, j)` takes
    old cell `(row_perm[i], col_perm[j])`.

    Attributes:
        digit_map: `[N + 1]` int8, `digit_map[0] == 0`, a permutation of 1..N on the rest.
        row_perm: `[N]` int64, bands permuted and rows permuted within each band.
        col_perm: `[N]` int64, stacks permuted and columns permuted within each stack.
        transpose: transpose first (only drawn for square boxes, where it keeps the box shape).
    """

    digit_map: np.ndarray
    row_perm: np.ndarray
    col_perm: np.ndarray
    transpose: bool

    def apply(self, grid: np.ndarray) -> np.ndarray:
        """The augmented `[N, N]` grid; blanks stay blank."""
        grid = np.asarray(grid)
        if self.transpose:
            grid = grid.T
        return self.digit_map[grid[np.ix_(self.row_perm, self.col_perm)]]

    def invert(self, grid: np.ndarray) -> np.ndarray:
        """Undo `apply`: `invert(apply(x)) == x`."""
        inverse_digits = np.argsort(self.digit_map).astype(self.digit_map.dtype)
        relabelled = inverse_digits[np.asarray(grid)]
        restored = np.empty_like(relabelled)
        restored[np.ix_(self.row_perm, self.col_perm)] = relabelled
        return restored.T.copy() if self.transpose else restored


def random_augmentation(shape: BoxShape, rng: np.random.Generator) -> SudokuAugmentation:
    """Draw a `SudokuAugmentation` for `shape` (HRM `shuffle_sudoku`, generalised to N x N)."""
    n = shape.size
    digit_map = np.concatenate([[0], rng.permutation(np.arange(1, n + 1))]).astype(np.int8)
    transpose = shape.box_rows == shape.box_cols and bool(rng.random() < 0.5)
    row_perm = np.concatenate(
        [b * shape.box_rows + rng.permutation(shape.box_rows) for b in rng.permutation(shape.bands)]
    )
    col_perm = np.concatenate(
        [
            s * shape.box_cols + rng.permutation(shape.box_cols)
            for s in rng.permutation(shape.stacks)
        ]
    )
    return SudokuAugmentation(digit_map, row_perm, col_perm, transpose)
