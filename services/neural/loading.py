"""Loading checkpoints with torch: the device to load them on and one model directory as a
`RegisteredModel` (`services.neural.registry` holds them; it imports this module on its first
load, so that reading cached graphs at start-up needs no torch: `services.neural.fast_start`)."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Literal

import torch

from libs.errors import FailedPrecondition
from services.neural import metrics
from services.neural.checkpoint import CheckpointError, load_checkpoint
from services.neural.reasoning_task import TaskError, task_from_metadata
from services.neural.registry import REASONING_ARCHITECTURES, RegisteredModel, board_of_config

log = logging.getLogger(__name__)


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
        sha256=checkpoint.sha256,
    )
    metrics.MODEL_LOAD_SECONDS.labels(model.name).set(time.perf_counter() - started)
    log.info("loaded model %s version %s (%s%s, %d parameters) on %s", model.name, model.version,
             model.architecture, f", {model.task_name}" if task else
             (f", {board.name}" if board else ""), model.parameter_count, device)
    return model
