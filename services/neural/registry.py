"""The model registry: every checkpoint directory under a models folder, loaded at start-up and
reloaded one at a time on request.

A model's name is its directory's name (`models/connect4-pv/` serves "connect4-pv"); its version is
the SHA-256 prefix of its weights (see `services.neural.checkpoint`). A reasoning model (HRM, TRM)
also has a task ("sudoku-6x6", "maze-9x9") read from its checkpoint's metadata
(`services.neural.reasoning_task`); a game network has none.

A reload builds the new model completely (and warms it up) before it replaces the old entry, so a
corrupt or mismatched checkpoint leaves the previous model serving.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from libs.connect4.geometry import STANDARD, Board
from libs.errors import FailedPrecondition, NotFound, Unavailable
from services.neural import metrics
from services.neural.checkpoint import CheckpointError, load_checkpoint
from services.neural.models import connect4_pv, hrm, trm
from services.neural.reasoning_task import GridTask, TaskError, task_from_metadata

REASONING_ARCHITECTURES = (hrm.ARCHITECTURE, trm.ARCHITECTURE)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RegisteredModel:
    """A loaded model and the facts the service reports about it."""

    name: str
    version: str
    architecture: str
    parameter_count: int
    device: str
    metadata: dict[str, Any]
    config: dict[str, Any]
    module: nn.Module
    task: GridTask | None = None
    """What a reasoning model solves; None for a game network."""

    @property
    def task_name(self) -> str:
        """The task's name ("sudoku-6x6"), or "" for a game network."""
        return self.task.name if self.task is not None else ""

    @cached_property
    def board(self) -> Board | None:
        """The Connect Four board a policy/value network plays (`board_of_config`, checked when
        the checkpoint loads); None for other models (and networks of other games)."""
        return board_of_config(self.architecture, self.config)

    @property
    def is_reasoning(self) -> bool:
        """Whether the model is an HRM or a TRM."""
        return self.architecture in REASONING_ARCHITECTURES

    @cached_property
    def _metadata_strings(self) -> dict[str, str]:
        # Made once per loaded model: every EvaluatePositions response carries it, and encoding
        # the training history as JSON per call cost about 5% of the service's CPU.
        return {key: value if isinstance(value, str) else json.dumps(value, sort_keys=True)
                for key, value in self.metadata.items()}

    def metadata_strings(self) -> dict[str, str]:
        """`metadata` with every value as a string (JSON for anything but a string); a new dict
        each call, the encoding made once."""
        return dict(self._metadata_strings)


def select_device(requested: Literal["auto", "cpu", "cuda"]) -> str:
    """The torch device to load models on: "cuda:<n>" or "cpu".

    "auto" picks CUDA when `torch.cuda.is_available()`, else the CPU.
    Raises:
        FailedPrecondition: "cuda" was asked for and torch sees no GPU.
    """
    if requested == "cpu":
        return "cpu"
    if torch.cuda.is_available():
        return f"cuda:{torch.cuda.current_device()}"
    if requested == "cuda":
        raise FailedPrecondition("device \"cuda\" was requested but torch sees no CUDA device")
    return "cpu"


def board_of_config(architecture: str, config: dict[str, Any]) -> Board | None:
    """The Connect Four board a checkpoint's network plays: a policy/value network's config
    records it as "columns" and "rows" (a config without them, written before boards had a size,
    plays 7x6); None for another architecture, or a network of another game (a config with
    "actions", such as tic-tac-toe's policy over 9 cells).

    Raises:
        ValueError: columns or rows outside the limits of `libs.connect4.geometry.Board`.
    """
    if architecture != connect4_pv.ARCHITECTURE or config.get("actions", 0):
        return None
    return Board(config.get("columns", STANDARD.columns), config.get("rows", STANDARD.rows))


def load_model(directory: Path, device: str) -> RegisteredModel:
    """Loads the checkpoint directory `directory` as the model named after it.

    Raises:
        CheckpointError: the checkpoint cannot be loaded (see `load_checkpoint`), a reasoning
            model's task is missing, malformed, or does not fit its config (vocabulary, length),
            or a policy/value network's board is outside the limits.
    """
    started = time.perf_counter()
    checkpoint = load_checkpoint(directory, device=device)
    try:
        board = board_of_config(checkpoint.architecture, checkpoint.config)
    except ValueError as error:
        raise CheckpointError(f"{directory}: the config's board: {error}") from error
    task = None
    if checkpoint.architecture in REASONING_ARCHITECTURES:
        try:
            task = task_from_metadata(checkpoint.metadata)
        except TaskError as error:
            raise CheckpointError(f"{directory}: {error}") from error
        if task is not None:
            config = checkpoint.model.config
            if (config.vocab_size, config.seq_len) != (task.vocab_size, task.cells):
                raise CheckpointError(
                    f"{directory}: task {task.name} needs vocab_size {task.vocab_size} and "
                    f"seq_len {task.cells}; the config has {config.vocab_size} and "
                    f"{config.seq_len}")
    model = RegisteredModel(
        name=directory.name,
        version=checkpoint.version,
        architecture=checkpoint.architecture,
        parameter_count=sum(p.numel() for p in checkpoint.model.parameters() if p.requires_grad),
        device=device,
        metadata=checkpoint.metadata,
        config=checkpoint.config,
        module=checkpoint.model,
        task=task,
    )
    metrics.MODEL_LOAD_SECONDS.labels(model.name).set(time.perf_counter() - started)
    log.info("loaded model %s version %s (%s%s, %d parameters) on %s", model.name, model.version,
             model.architecture, f", {model.task_name}" if task else
             (f", {board.name}" if board else ""), model.parameter_count, device)
    return model


class ModelRegistry:
    """Name -> `RegisteredModel`. Build one with `ModelRegistry.load(models_dir, device)`.

    `reload` replaces the whole name -> model dict by a new one (one reference assignment), so
    requests never see a half-loaded model.
    """

    def __init__(self, models: dict[str, RegisteredModel], models_dir: Path | None = None,
                 device: str = "cpu") -> None:
        self._models = dict(models)
        self.models_dir = models_dir
        self.device = device
        self._reload_lock = threading.Lock()

    @classmethod
    def load(cls, models_dir: Path, device: str) -> ModelRegistry:
        """Loads every subdirectory of `models_dir` (hidden ones skipped) as a checkpoint.

        A missing `models_dir` gives an empty registry (the service then answers UNAVAILABLE).
        Raises:
            CheckpointError: a checkpoint directory cannot be loaded; start-up should fail loudly
                rather than serve a partial registry.
        """
        models: dict[str, RegisteredModel] = {}
        if not models_dir.is_dir():
            log.warning("models folder %s does not exist: no model loaded", models_dir)
            return cls(models, models_dir, device)
        for directory in sorted(models_dir.iterdir()):
            if not directory.is_dir() or directory.name.startswith("."):
                continue
            models[directory.name] = load_model(directory, device)
        if not models:
            log.warning("models folder %s holds no checkpoint", models_dir)
        return cls(models, models_dir, device)

    def get(self, name: str) -> RegisteredModel:
        """The model called `name`.

        Raises:
            Unavailable: the registry holds no model at all.
            NotFound: no model has that name.
        """
        if not self._models:
            raise Unavailable(f"no checkpoint is loaded (models folder {self.models_dir})")
        model = self._models.get(name)
        if model is None:
            raise NotFound(f"model {name!r} is not in the registry; loaded: "
                           f"{sorted(self._models)}")
        return model

    def find(self, name: str) -> RegisteredModel | None:
        """The model called `name`, or None."""
        return self._models.get(name)

    def reload(self, name: str,
               warm_up: Callable[[RegisteredModel], None] | None = None) -> RegisteredModel:
        """Re-reads `models_dir/name` and serves it under `name` (a new name adds a model).

        The new model is loaded and `warm_up` run on it before it replaces the old entry; if
        either fails, the registry is unchanged. Reloads run one at a time. Blocking: call it
        from a worker thread.
        Raises:
            NotFound: the registry has no models folder, or `models_dir/name` is not a directory.
            CheckpointError: the checkpoint is corrupt or mismatched (see `load_model`), or the
                warm-up forward pass failed on it.
        """
        if self.models_dir is None:
            raise NotFound("the registry has no models folder to reload from")
        if not name or Path(name).name != name or name.startswith("."):
            raise NotFound(f"{name!r} is not a checkpoint directory name")
        directory = self.models_dir / name
        if not directory.is_dir():
            raise NotFound(f"no checkpoint directory {directory}")
        with self._reload_lock:
            model = load_model(directory, self.device)
            if warm_up is not None:
                try:
                    warm_up(model)
                except (RuntimeError, ValueError) as error:
                    raise CheckpointError(f"{directory}: the warm-up forward pass failed: "
                                          f"{error}") from error
            previous = self._models.get(name)
            # Copy on write: readers iterating the old dict never see it change size.
            self._models = {**self._models, name: model}
        log.info("reloaded model %s: version %s (was %s)", name, model.version,
                 previous.version if previous is not None else "not loaded")
        return model

    def list(self) -> list[RegisteredModel]:
        """Every loaded model, by name."""
        models = self._models
        return [models[name] for name in sorted(models)]

    def __len__(self) -> int:
        return len(self._models)
