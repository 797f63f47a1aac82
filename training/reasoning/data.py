"""Training data for HRM and TRM: an endless seeded stream of generated puzzles with on-the-fly
augmentation (generated in worker processes when asked, so that the training step does not wait
for the generator), and a fixed held-out set.

Tokens are the served models' (`services.neural.models.reasoning_tokens`, id 0 padding). Sudoku:
inputs are the puzzle, labels the solution, every cell supervised (givens included, as in the
references). Mazes: inputs are the question and labels the answer.

A batch is `PuzzleBatch`: inputs int32 [B, L], labels int64 [B, L] (L cells, row-major), and
puzzle identifiers int32 [B] (all 0: generated Sudoku and mazes share one identifier).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from libs.puzzles import maze as maze_lib
from libs.puzzles import sudoku as sudoku_lib
from libs.puzzles.sudoku_augment import random_augmentation
from services.neural.models.reasoning_tokens import (
    SUDOKU_TOKEN_OFFSET,
    encode_maze,
    encode_sudoku,
    sudoku_vocab_size,
)


@dataclass(frozen=True)
class PuzzleBatch:
    """Examples as tensors: inputs int32 [B, L], labels int64 [B, L], puzzle_identifiers int32
    [B]."""

    inputs: torch.Tensor
    labels: torch.Tensor
    puzzle_identifiers: torch.Tensor

    def __len__(self) -> int:
        return self.inputs.shape[0]

    def to(self, device: torch.device | str, non_blocking: bool = False) -> PuzzleBatch:
        """The batch on `device`; `non_blocking` copies asynchronously from pinned memory."""
        return PuzzleBatch(self.inputs.to(device, non_blocking=non_blocking),
                           self.labels.to(device, non_blocking=non_blocking),
                           self.puzzle_identifiers.to(device, non_blocking=non_blocking))

    def slice(self, start: int, stop: int) -> PuzzleBatch:
        return PuzzleBatch(self.inputs[start:stop], self.labels[start:stop],
                           self.puzzle_identifiers[start:stop])


def _batch(inputs: list[np.ndarray], labels: list[np.ndarray], seq_len: int) -> PuzzleBatch:
    if not inputs:
        return PuzzleBatch(torch.zeros(0, seq_len, dtype=torch.int32),
                           torch.zeros(0, seq_len, dtype=torch.int64),
                           torch.zeros(0, dtype=torch.int32))
    stacked_inputs = torch.from_numpy(np.stack(inputs).astype(np.int32))
    stacked_labels = torch.from_numpy(np.stack(labels).astype(np.int64))
    return PuzzleBatch(stacked_inputs, stacked_labels,
                       torch.zeros(len(inputs), dtype=torch.int32))


@dataclass(frozen=True)
class SudokuTask:
    """Generated N x N Sudoku with exactly `blanks` blanks and a unique solution."""

    size: int = 6
    blanks: int = 16

    @property
    def shape(self) -> sudoku_lib.BoxShape:
        return sudoku_lib.box_shape_for(self.size)

    @property
    def seq_len(self) -> int:
        return self.size * self.size

    @property
    def vocab_size(self) -> int:
        return sudoku_vocab_size(self.size)

    def generate(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """One (inputs, labels) pair of int32 [L] token arrays."""
        puzzle, solution = sudoku_lib.generate(self.shape, self.blanks, rng)
        return encode_sudoku(puzzle), encode_sudoku(solution)

    def augment(self, inputs: np.ndarray, labels: np.ndarray,
                rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """The same random validity-preserving relabelling (`random_augmentation`) applied to
        both arrays."""
        augmentation = random_augmentation(self.shape, rng)
        n = self.size
        grids = [(a - SUDOKU_TOKEN_OFFSET).reshape(n, n).astype(np.int8) for a in (inputs, labels)]
        puzzle, solution = (encode_sudoku(augmentation.apply(grid)) for grid in grids)
        return puzzle, solution


@dataclass(frozen=True)
class MazeTask:
    """Generated mazes on a `rows x cols` lattice (grid (2 rows + 1) x (2 cols + 1)) with BFS
    shortest-path labels; no augmentation (the references do not augment mazes).

    The default is a perfect maze (`extra_openings=0`): exactly one path joins S and G, so the
    label is the only optimal answer and exact match equals "optimal path". With loops, 26.9% of
    4x4-cell mazes with 2 extra openings have several shortest paths (2,000 generated), and the
    label picks one arbitrarily: a target the model cannot know, which stalled training (README).
    """

    rows: int = 4
    cols: int = 4
    extra_openings: int = 0
    min_path_length: int = 4

    @property
    def height(self) -> int:
        return 2 * self.rows + 1

    @property
    def width(self) -> int:
        return 2 * self.cols + 1

    @property
    def seq_len(self) -> int:
        return self.height * self.width

    @property
    def vocab_size(self) -> int:
        return len(maze_lib.CHARSET) + 1

    def generate(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        question, answer = maze_lib.generate_maze(self.rows, self.cols, rng, self.extra_openings,
                                                  self.min_path_length)
        return encode_maze(question), encode_maze(answer)

    def augment(self, inputs: np.ndarray, labels: np.ndarray,
                rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        return inputs, labels


Task = SudokuTask | MazeTask


MAX_FRUITLESS_DRAWS = 10_000
"""Consecutive generated puzzles that may all be duplicates (or held out) before a task is judged
too small for the request: a 2x2-cell maze task has a few dozen distinct puzzles in all."""


def held_out_set(task: Task, count: int, seed: int) -> PuzzleBatch:
    """`count` generated puzzles (not augmented), the same for the same `seed`; the evaluation
    set. Duplicates are skipped, so the puzzles are distinct.

    Raises:
        ValueError: `MAX_FRUITLESS_DRAWS` draws in a row gave no new puzzle (the task has fewer
            than `count` distinct puzzles, or nearly so).
    """
    rng = np.random.default_rng([seed, 1])
    seen: set[bytes] = set()
    inputs, labels = [], []
    fruitless = 0
    while len(inputs) < count:
        puzzle, solution = task.generate(rng)
        if puzzle.tobytes() in seen:
            fruitless += 1
            if fruitless >= MAX_FRUITLESS_DRAWS:
                raise ValueError(f"{task} has too few distinct puzzles for {count}: "
                                 f"{len(inputs)} found, then {fruitless} duplicates in a row")
            continue
        fruitless = 0
        seen.add(puzzle.tobytes())
        inputs.append(puzzle)
        labels.append(solution)
    return _batch(inputs, labels, task.seq_len)


CHUNK_SIZE = 32
"""Examples per generated chunk: the unit a worker generates and hands over."""
PREFETCH_CHUNKS = 4
"""Chunks each worker may have ready ahead of the trainer (the queue's bound per worker)."""


class PuzzleChunks(IterableDataset):
    """The stream's examples cut into chunks; chunk i holds `chunk_size` examples drawn with the
    generator `np.random.default_rng([seed, 0, i])`, each a freshly generated puzzle under a
    fresh random augmentation, skipping puzzles whose inputs are in `excluded`.

    Iterated in the main process it yields chunks 0, 1, 2, ...; in worker w of a W-worker
    `DataLoader` it yields chunks w, w + W, w + 2W, ..., and the loader returns its workers'
    chunks round-robin, so the order is 0, 1, 2, ... whatever the number of workers. A chunk is
    (inputs int32 [C, L], labels int64 [C, L]).
    """

    def __init__(self, task: Task, seed: int, excluded: frozenset[bytes],
                 chunk_size: int = CHUNK_SIZE) -> None:
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        self.task = task
        self.seed = seed
        self.excluded = excluded
        self.chunk_size = chunk_size

    def chunk(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Chunk `index` (the same for the same seed, task and exclusions).

        Raises:
            ValueError: `MAX_FRUITLESS_DRAWS` draws in a row were all held out.
        """
        rng = np.random.default_rng([self.seed, 0, index])
        pairs = [self._draw(rng) for _ in range(self.chunk_size)]
        batch = _batch([p for p, _ in pairs], [s for _, s in pairs], self.task.seq_len)
        return batch.inputs, batch.labels

    def _draw(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        for _ in range(MAX_FRUITLESS_DRAWS):
            puzzle, solution = self.task.generate(rng)
            puzzle, solution = self.task.augment(puzzle, solution, rng)
            if puzzle.astype(np.int32).tobytes() not in self.excluded:
                return puzzle, solution
        raise ValueError(f"{self.task}: {MAX_FRUITLESS_DRAWS} generated puzzles in a row were "
                         f"all held out; the held-out set leaves nothing to train on")

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        worker = get_worker_info()
        first, step = (0, 1) if worker is None else (worker.id, worker.num_workers)
        for index in itertools.count(first, step):
            yield self.chunk(index)


class PuzzleStream:
    """An endless seeded stream of fresh training examples (`PuzzleChunks` in order). Puzzles
    whose inputs appear in `exclude` (the held-out set) are skipped, so evaluation never sees a
    training puzzle; `take` raises ValueError when `MAX_FRUITLESS_DRAWS` draws in a row are all
    held out.

    `workers` > 0 generates in that many worker processes of a torch `DataLoader`, each keeping
    up to `prefetch_chunks` chunks ready (a bounded queue), so `take` only waits when the
    generators fall behind; `workers` = 0 generates inside `take`. The examples are the same
    for any number of workers: they depend only on `seed` (and the task and exclusions).
    `pin_memory` (for CUDA) returns page-locked tensors that `PuzzleBatch.to(device,
    non_blocking=True)` copies asynchronously.

    `take(k)` returns the next k examples as a `PuzzleBatch`; `generated` counts the examples
    taken; `wait_seconds` sums the seconds `take` spent waiting for (or, without workers,
    generating) chunks. `close()` stops the workers.
    """

    def __init__(self, task: Task, seed: int, exclude: PuzzleBatch | None = None,
                 workers: int = 0, chunk_size: int = CHUNK_SIZE,
                 prefetch_chunks: int = PREFETCH_CHUNKS, pin_memory: bool = False) -> None:
        if workers < 0 or prefetch_chunks < 1:
            raise ValueError(f"invalid workers {workers} or prefetch_chunks {prefetch_chunks}")
        self.task = task
        excluded: frozenset[bytes] = frozenset()
        if exclude is not None:
            excluded = frozenset(row.astype(np.int32).tobytes()
                                 for row in exclude.inputs.numpy())
        self.chunks = PuzzleChunks(task, seed, excluded, chunk_size)
        self.workers = workers
        self.pin_memory = pin_memory
        # Spawned, not forked: a fork of a process holding threads (JAX's, gRPC's) can deadlock.
        loader = DataLoader(self.chunks, batch_size=None, num_workers=workers,
                            prefetch_factor=prefetch_chunks if workers else None,
                            multiprocessing_context="spawn" if workers else None)
        self._iterator: Iterator[tuple[torch.Tensor, torch.Tensor]] | None = iter(loader)
        self._inputs = torch.zeros(0, task.seq_len, dtype=torch.int32)
        self._labels = torch.zeros(0, task.seq_len, dtype=torch.int64)
        self.generated = 0
        self.wait_seconds = 0.0

    def take(self, count: int) -> PuzzleBatch:
        """The next `count` examples. Raises ValueError (see the class) or RuntimeError after
        `close()`."""
        if self._iterator is None:
            raise RuntimeError("the puzzle stream is closed")
        inputs, labels = [self._inputs], [self._labels]
        ready = len(self._inputs)
        if ready < count:
            started = time.perf_counter()
            while ready < count:
                chunk_inputs, chunk_labels = next(self._iterator)
                inputs.append(chunk_inputs)
                labels.append(chunk_labels)
                ready += len(chunk_inputs)
            self.wait_seconds += time.perf_counter() - started
        if len(inputs) > 1:
            self._inputs, self._labels = torch.cat(inputs), torch.cat(labels)
        taken_inputs, self._inputs = self._inputs[:count], self._inputs[count:]
        taken_labels, self._labels = self._labels[:count], self._labels[count:]
        self.generated += count
        batch = PuzzleBatch(taken_inputs, taken_labels, torch.zeros(count, dtype=torch.int32))
        if self.pin_memory:
            batch = PuzzleBatch(*(field.pin_memory() for field in (
                batch.inputs, batch.labels, batch.puzzle_identifiers)))
        return batch

    def close(self) -> None:
        """Stops the worker processes (dropping the loader's iterator shuts them down)."""
        self._iterator = None

    def __enter__(self) -> PuzzleStream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
