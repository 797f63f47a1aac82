"""Where the data sets are: one place that answers it for the CLI, the demo, trainers and benches.

Two folders are searched, in order, for a set `name` (a folder such as `connect4-pons`):
1. the evaluation data folder: `MCTS_MESH_DATA_DIR` when set, else `../shared/data` beside the
   repository (where the project's own machines keep the larger public sets: SciFact, GSM8K,
   StrategyQA, HotpotQA, Norvig's and tdoku's Sudoku lists, ARC);
2. the repository's own `data/` folder, which ships the small sets the demo and the default tests
   need (Pons' Connect Four files, a SciFact subset), each with a README naming its source and
   licence, so that a clone alone runs `make run` and `make test`.

A set found in neither raises `MissingDataset`, whose message is one line naming the set, the
folders looked in and how to provide it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

ENV_VAR = "MCTS_MESH_DATA_DIR"
REPO_DATA = Path(__file__).resolve().parents[1] / "data"
"""The repository's `data/` folder (small sets shipped with the code)."""
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
"""`../shared/data` beside the repository: the default evaluation data folder."""


class MissingDataset(FileNotFoundError):
    """A data set is in none of the folders searched; `str()` is one line saying what to do."""

    def __init__(self, name: str, looked: tuple[Path, ...]) -> None:
        self.name = name
        self.looked = looked
        where = ", ".join(str(folder) for folder in looked)
        super().__init__(f"data set {name!r} not found (looked in {where}); put the folder "
                         f"{name}/ in a data folder and point {ENV_VAR} at it")


def evaluation_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The evaluation data folder: `MCTS_MESH_DATA_DIR` from `environ` (the process environment
    when None) or `../shared/data` beside the repository. It may not exist."""
    if environ is None:
        environ = os.environ
    value = environ.get(ENV_VAR, "").strip()
    return Path(value) if value else SHARED_DATA


def search_dirs(data_dir: str | Path | None = None) -> tuple[Path, ...]:
    """The folders searched for a set: `data_dir` (or the evaluation data folder), then the
    repository's `data/`."""
    first = Path(data_dir) if data_dir else evaluation_dir()
    return (first, REPO_DATA) if first.resolve() != REPO_DATA else (REPO_DATA,)


def dataset(name: str, data_dir: str | Path | None = None) -> Path:
    """The folder of the data set `name`: the first of `search_dirs(data_dir)` holding it.

    Raises:
        MissingDataset: no searched folder holds `name`.
    """
    folders = search_dirs(data_dir)
    for folder in folders:
        candidate = folder / name
        if candidate.is_dir():
            return candidate
    raise MissingDataset(name, folders)
