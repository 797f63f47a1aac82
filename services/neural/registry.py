"""The model registry: every checkpoint directory under a models folder, loaded once at start-up.

A model's name is its directory's name (`models/connect4-pv/` serves "connect4-pv"); its version is
the SHA-256 prefix of its weights (see `services.neural.checkpoint`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from libs.errors import FailedPrecondition, NotFound, Unavailable
from services.neural.checkpoint import load_checkpoint

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

    def metadata_strings(self) -> dict[str, str]:
        """`metadata` with every value as a string (JSON for anything but a string)."""
        return {key: value if isinstance(value, str) else json.dumps(value, sort_keys=True)
                for key, value in self.metadata.items()}


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


class ModelRegistry:
    """Name -> `RegisteredModel`. Build one with `ModelRegistry.load(models_dir, device)`."""

    def __init__(self, models: dict[str, RegisteredModel], models_dir: Path | None = None) -> None:
        self._models = dict(models)
        self.models_dir = models_dir

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
            return cls(models, models_dir)
        for directory in sorted(models_dir.iterdir()):
            if not directory.is_dir() or directory.name.startswith("."):
                continue
            checkpoint = load_checkpoint(directory, device=device)
            models[directory.name] = RegisteredModel(
                name=directory.name,
                version=checkpoint.version,
                architecture=checkpoint.architecture,
                parameter_count=sum(p.numel() for p in checkpoint.model.parameters()
                                    if p.requires_grad),
                device=device,
                metadata=checkpoint.metadata,
                config=checkpoint.config,
                module=checkpoint.model,
            )
            log.info("loaded model %s version %s (%s, %d parameters) on %s", directory.name,
                     checkpoint.version, checkpoint.architecture,
                     models[directory.name].parameter_count, device)
        if not models:
            log.warning("models folder %s holds no checkpoint", models_dir)
        return cls(models, models_dir)

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

    def list(self) -> list[RegisteredModel]:
        """Every loaded model, by name."""
        return [self._models[name] for name in sorted(self._models)]

    def __len__(self) -> int:
        return len(self._models)
