"""The model registry: every checkpoint directory under a models folder, loaded at start-up and
reloaded one at a time on request.

A model's name is its directory's name (`models/connect4-pv/` serves "connect4-pv"); its version is
the SHA-256 prefix of its weights (see `services.neural.checkpoint`). A reasoning model (HRM, TRM)
also has a task ("sudoku-6x6", "maze-9x9") read from its checkpoint's metadata
(`services.neural.reasoning_task`); a game network has none.

This module does not import torch (the service reads its cached ONNX graphs before torch is
imported: `services.neural.fast_start`); loading a checkpoint does, in `services.neural.loading`.

A reload builds the new model completely (and warms it up) before it replaces the old entry, so a
corrupt or mismatched checkpoint leaves the previous model serving.
"""

from __future__ import annotations

import importlib
import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from libs.connect4.geometry import STANDARD, Board
from libs.errors import NotFound, Unavailable
from services.neural import architectures
from services.neural.checkpoint_format import CheckpointError

if TYPE_CHECKING:
    from services.neural.reasoning_task import GridTask

REASONING_ARCHITECTURES = architectures.REASONING

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
    module: Any
    """The torch module (`torch.nn.Module`); None for an entry of the fast start's partial
    registry, which only onnxruntime runs (`services.neural.fast_start`)."""
    task: GridTask | None = None
    """What a reasoning model solves; None for a game network."""
    sha256: str = ""
    """Hex SHA-256 of the weights (`version` is its prefix); keys the ONNX graph cache."""

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


def board_of_config(architecture: str, config: dict[str, Any]) -> Board | None:
    """The Connect Four board a checkpoint's network plays: a policy/value network's config
    records it as "columns" and "rows" (a config without them, written before boards had a size,
    plays 7x6); None for another architecture, or a network of another game (a config with
    "actions", such as tic-tac-toe's policy over 9 cells).

    Raises:
        ValueError: columns or rows outside the limits of `libs.connect4.geometry.Board`.
    """
    if architecture != architectures.CONNECT4_PV or config.get("actions", 0):
        return None
    return Board(config.get("columns", STANDARD.columns), config.get("rows", STANDARD.rows))


class ModelRegistry:
    """Name -> `RegisteredModel`. Build one with `ModelRegistry.load(models_dir, device)`.

    `reload` replaces the whole name -> model dict by a new one (one reference assignment), so
    requests never see a half-loaded model.
    """

    def __init__(self, models: dict[str, RegisteredModel], models_dir: Path | None = None,
                 device: str = "cpu", complete: bool = True) -> None:
        self._models = dict(models)
        self.models_dir = models_dir
        self.device = device
        self.complete = complete
        """False for the fast start's partial registry (the Connect Four networks whose ONNX
        graphs were cached), which the complete one replaces once torch has loaded every
        checkpoint (`services.neural.fast_start`)."""
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
            models[directory.name] = _loading().load_model(directory, device)
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
            model = _loading().load_model(directory, self.device)
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


def _loading():
    """`services.neural.loading` (torch), imported on the first load rather than with this
    module."""
    return importlib.import_module("services.neural.loading")
