"""Token encodings of the grid puzzles HRM and TRM read and write: one place for the trainer
(`training.reasoning.data`) and the neural service (`services.neural.reasoning_task`), so a served
model sees exactly the ids it was trained on.

Token layouts follow the reference dataset builders (sapientinc/HRM
`dataset/build_sudoku_dataset.py` and `dataset/build_maze_dataset.py`), where id 0 is padding:
- Sudoku N x N: a cell value v (0 blank, 1..N digit) becomes token v + 1, so blank is 1 and the
  digits are 2..N+1; the vocabulary has N + 2 ids (8 for 6x6, 11 for 9x9).
- Mazes: the grid already holds ids 1..5 for the characters `# SGo` (`libs.puzzles.maze`), so the
  tokens are the grid's ids (vocabulary 6).
"""

from __future__ import annotations

import numpy as np
import torch

SUDOKU_TOKEN_OFFSET = 1
"""Added to cell values (0 blank, 1..N digits) so that token 0 stays free for padding."""


def sudoku_vocab_size(size: int) -> int:
    """Token ids of an N x N Sudoku: padding, blank, and N digits."""
    return size + 1 + SUDOKU_TOKEN_OFFSET


def encode_sudoku(grid: np.ndarray) -> np.ndarray:
    """[N, N] int grid (0 blank, 1..N) -> int32 [N*N] tokens (1 blank, 2..N+1 digits)."""
    return np.asarray(grid, dtype=np.int32).reshape(-1) + SUDOKU_TOKEN_OFFSET


def decode_sudoku(tokens: np.ndarray | torch.Tensor, size: int) -> np.ndarray:
    """int [N*N] tokens -> int8 [N, N] grid; padding (0) and blank (1) both decode to 0 (blank)."""
    values = np.asarray(tokens, dtype=np.int64).reshape(size, size) - SUDOKU_TOKEN_OFFSET
    return np.clip(values, 0, size).astype(np.int8)


def encode_maze(grid: np.ndarray) -> np.ndarray:
    """[H, W] maze token grid (`libs.puzzles.maze` ids 1..5) -> int32 [H*W] tokens (unchanged)."""
    return np.asarray(grid, dtype=np.int32).reshape(-1)


def decode_maze(tokens: np.ndarray | torch.Tensor, height: int, width: int) -> np.ndarray:
    """int [H*W] tokens -> uint8 [H, W] maze grid."""
    return np.asarray(tokens, dtype=np.int64).reshape(height, width).astype(np.uint8)
