"""ARC-AGI tasks: the JSON reader, dihedral and colour augmentation, their inverses, and voting.

Grids are `np.ndarray` `[H, W]` uint8 of colours 0..9 (1x1 up to 30x30), as in the ARC JSON files
(fchollet/ARC-AGI `data/{training,evaluation}/<task id>.json`).

Augmentation follows HRM/TRM `dataset/build_arc_dataset.py` (sapientinc/HRM,
SamsungSAILMontreal/TinyRecursiveModels): one of the 8 dihedral transforms (ids 0..7 as in their
`dataset/common.py`: identity, rot90, rot180, rot270, flip left-right, flip up-down, transpose,
anti-transpose) and a permutation of colours 1..9 that keeps 0 (black, the background) fixed.
The colour map is applied first, then the dihedral transform; the inverse undoes them in reverse.

Voting follows TRM's ARC evaluator: predictions for one test input made under different
augmentations are mapped back through the inverses, identical grids pool their votes, and the
answers rank by vote count, then by mean confidence (the model's halting probability).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MAX_GRID_SIZE = 30
COLOURS = 10
DIHEDRAL_INVERSE = (0, 3, 2, 1, 4, 5, 6, 7)
"""`DIHEDRAL_INVERSE[t]` undoes dihedral transform `t` (rotations by 90 and 270 swap; the rest are
their own inverses)."""


class MalformedTask(Exception):
    """An ARC task file that does not follow the format (message names the file and field)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class ArcPair:
    """A demonstration or test pair; `output` is None for a test input without its answer."""

    input: np.ndarray
    output: np.ndarray | None


@dataclass(frozen=True)
class ArcTask:
    """One ARC task: `task_id` is the file stem (8 hex digits)."""

    task_id: str
    train: tuple[ArcPair, ...]
    test: tuple[ArcPair, ...]


def to_grid(rows: object, where: str = "grid") -> np.ndarray:
    """A list of rows of ints 0..9 as an `[H, W]` uint8 grid.

    Raises:
        MalformedTask: ragged rows, empty, larger than 30x30, or colours outside 0..9.
    """
    if not isinstance(rows, list) or not rows or not all(isinstance(r, list) for r in rows):
        raise MalformedTask(f"{where}: expected a non-empty list of rows")
    width = len(rows[0])
    if width == 0 or any(len(r) != width for r in rows):
        raise MalformedTask(f"{where}: rows are empty or of different lengths")
    if any(not isinstance(v, int) or isinstance(v, bool) for r in rows for v in r):
        raise MalformedTask(f"{where}: cells must be integers")
    grid = np.array(rows, dtype=np.int64)
    if grid.shape[0] > MAX_GRID_SIZE or width > MAX_GRID_SIZE:
        raise MalformedTask(f"{where}: {grid.shape} exceeds {MAX_GRID_SIZE}x{MAX_GRID_SIZE}")
    if grid.min() < 0 or grid.max() >= COLOURS:
        raise MalformedTask(f"{where}: colours must be 0..9")
    return grid.astype(np.uint8)


def read_task(path: str | Path) -> ArcTask:
    """Read one task file `{"train": [pair...], "test": [pair...]}`.

    Raises:
        FileNotFoundError: no such file.
        MalformedTask: invalid JSON, a missing "train"/"test"/"input", or a bad grid.
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise MalformedTask(f"{path}: invalid JSON ({error.msg})") from error

    def pairs(split: str) -> tuple[ArcPair, ...]:
        items = data.get(split) if isinstance(data, dict) else None
        if not isinstance(items, list):
            raise MalformedTask(f"{path}: missing list {split!r}")
        result = []
        for i, item in enumerate(items):
            where = f"{path}: {split}[{i}]"
            if not isinstance(item, dict) or "input" not in item:
                raise MalformedTask(f"{where}: missing 'input'")
            output = item.get("output")
            result.append(
                ArcPair(
                    input=to_grid(item["input"], f"{where}.input"),
                    output=None if output is None else to_grid(output, f"{where}.output"),
                )
            )
        return tuple(result)

    return ArcTask(task_id=path.stem, train=pairs("train"), test=pairs("test"))


def read_split(directory: str | Path, limit: int | None = None) -> list[ArcTask]:
    """Every `*.json` task in `directory` (e.g. `.../arc-agi-1/data/evaluation`), sorted by id."""
    files = sorted(Path(directory).glob("*.json"))
    return [read_task(f) for f in files[:limit]]


def dihedral(grid: np.ndarray, transform: int) -> np.ndarray:
    """Dihedral transform `transform` (0..7, HRM/TRM numbering) of a 2-D grid.

    Raises:
        ValueError: `transform` outside 0..7.
    """
    if transform == 0:
        return grid
    if transform in (1, 2, 3):
        return np.rot90(grid, k=transform)
    if transform == 4:
        return np.fliplr(grid)
    if transform == 5:
        return np.flipud(grid)
    if transform == 6:
        return grid.T
    if transform == 7:
        return np.fliplr(np.rot90(grid, k=1))
    raise ValueError(f"dihedral transform must be 0..7, got {transform}")


def inverse_dihedral(grid: np.ndarray, transform: int) -> np.ndarray:
    """Undo `dihedral(., transform)`."""
    return dihedral(grid, DIHEDRAL_INVERSE[transform])


@dataclass(frozen=True)
class ArcAugmentation:
    """A colour permutation then a dihedral transform, applied to every grid of a task.

    Attributes:
        transform: dihedral id 0..7.
        colour_map: `[10]` uint8 permutation with `colour_map[0] == 0`.
    """

    transform: int
    colour_map: np.ndarray

    def __post_init__(self) -> None:
        if not 0 <= self.transform < 8:
            raise ValueError(f"dihedral transform must be 0..7, got {self.transform}")
        colours = np.asarray(self.colour_map)
        if sorted(colours.tolist()) != list(range(COLOURS)) or colours[0] != 0:
            raise ValueError("colour_map must permute 0..9 and keep 0")

    def apply(self, grid: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(dihedral(self.colour_map[grid], self.transform))

    def invert(self, grid: np.ndarray) -> np.ndarray:
        """Map a grid predicted in augmented space back: `invert(apply(x)) == x`."""
        inverse_colours = np.argsort(self.colour_map).astype(np.uint8)
        return np.ascontiguousarray(inverse_colours[inverse_dihedral(grid, self.transform)])

    def apply_task(self, task: ArcTask) -> ArcTask:
        """The task with every input and output augmented (same id)."""

        def pair(p: ArcPair) -> ArcPair:
            return ArcPair(self.apply(p.input), None if p.output is None else self.apply(p.output))

        return ArcTask(
            task.task_id, tuple(pair(p) for p in task.train), tuple(pair(p) for p in task.test)
        )


IDENTITY = ArcAugmentation(0, np.arange(COLOURS, dtype=np.uint8))


def random_arc_augmentation(rng: np.random.Generator) -> ArcAugmentation:
    """A uniformly drawn dihedral transform and colour permutation keeping 0 (HRM/TRM `aug`)."""
    colours = np.concatenate([[0], rng.permutation(np.arange(1, COLOURS))]).astype(np.uint8)
    return ArcAugmentation(int(rng.integers(8)), colours)


@dataclass(frozen=True)
class Prediction:
    """A model's grid for a test input seen under `augmentation`, with its confidence in [0, 1]
    (e.g. sigmoid of the halting logit)."""

    grid: np.ndarray
    augmentation: ArcAugmentation
    confidence: float = 1.0


@dataclass(frozen=True)
class VotedAnswer:
    """A grid in the original frame with its `votes` and `mean_confidence`."""

    grid: np.ndarray
    votes: int
    mean_confidence: float


def vote(predictions: Iterable[Prediction], top_k: int = 2) -> list[VotedAnswer]:
    """Map each prediction back through its augmentation's inverse and pool identical grids.

    Returns:
        At most `top_k` answers, most votes first, ties broken by higher mean confidence, then by
        first appearance. Grids of different shapes are different answers.
    """
    pooled: dict[tuple[tuple[int, ...], bytes], list] = {}
    for prediction in predictions:
        grid = prediction.augmentation.invert(np.asarray(prediction.grid, dtype=np.uint8))
        key = (grid.shape, grid.tobytes())
        entry = pooled.setdefault(key, [grid, 0, 0.0])
        entry[1] += 1
        entry[2] += prediction.confidence
    ranked = sorted(pooled.values(), key=lambda e: (e[1], e[2] / e[1]), reverse=True)
    return [VotedAnswer(grid, votes, total / votes) for grid, votes, total in ranked[:top_k]]
