"""Checkpoints as a directory: `model.safetensors` (the weights) plus `config.json` (architecture,
config fields, training metadata, and the weights' SHA-256), so serving rebuilds a model from the
checkpoint alone.

Loading never unpickles: weights are read with `safetensors` only, and a file that is a pickle or a
`torch.save` archive is refused with a `CheckpointError` that says so.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from services.neural.checkpoint_format import (
    CONFIG_FILE,
    FORMAT,
    FORMAT_VERSION,
    VERSION_LENGTH,
    WEIGHTS_FILE,
    CheckpointError,
    file_sha256,
    read_checked,
)
from services.neural.models import ARCHITECTURES

__all__ = ["CONFIG_FILE", "FORMAT", "FORMAT_VERSION", "VERSION_LENGTH", "WEIGHTS_FILE",
           "Checkpoint", "CheckpointError", "file_sha256", "load_checkpoint", "replace_checkpoint",
           "save_checkpoint"]


@dataclass(frozen=True)
class Checkpoint:
    """A loaded checkpoint: the model in eval mode on `device`, and what config.json said."""

    model: nn.Module
    architecture: str
    config: dict[str, Any]
    metadata: dict[str, Any]
    version: str
    """First `VERSION_LENGTH` hex digits of the SHA-256 of model.safetensors."""
    sha256: str
    device: str


def _write_atomically(path: Path, write) -> None:
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.close(handle)
    try:
        write(Path(temporary))
        os.chmod(temporary, 0o644)  # mkstemp makes 0600; checkpoints are read by other users
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def save_checkpoint(directory: Path | str, model: nn.Module, architecture: str,
                    metadata: dict[str, Any] | None = None) -> str:
    """Writes `model` (whose `config` attribute is its config dataclass) as a checkpoint directory.

    Args:
        directory: created if missing; model.safetensors and config.json are replaced atomically.
        model: a module of `architecture`, with a dataclass `config`.
        architecture: a key of `services.neural.models.ARCHITECTURES`, e.g. "connect4_pv".
        metadata: JSON-serializable facts from the trainer (games, epochs, losses, wall time).
    Returns:
        The version: the SHA-256 prefix of the written weights.
    Raises:
        CheckpointError: unknown architecture, or the model's config is not a dataclass.
    """
    if architecture not in ARCHITECTURES:
        raise CheckpointError(f"unknown architecture {architecture!r}; known: "
                              f"{sorted(ARCHITECTURES)}")
    config = getattr(model, "config", None)
    if config is None or not dataclasses.is_dataclass(config):
        raise CheckpointError(f"{type(model).__name__} has no dataclass `config` to save")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    state = {name: tensor.detach().to("cpu").contiguous()
             for name, tensor in model.state_dict().items()}
    weights = directory / WEIGHTS_FILE
    # One header key only: safetensors writes metadata in hash-map order, and equal weights
    # must give equal bytes (the version is their hash).
    _write_atomically(weights, lambda path: save_file(state, str(path),
                                                      metadata={"format": FORMAT}))
    sha256 = file_sha256(weights)
    document = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "architecture": architecture,
        "config": dataclasses.asdict(config),
        "weights": {"file": WEIGHTS_FILE, "sha256": sha256},
        "metadata": metadata or {},
    }
    text = json.dumps(document, indent=2, sort_keys=True) + "\n"
    _write_atomically(directory / CONFIG_FILE, lambda path: path.write_text(text))
    return sha256[:VERSION_LENGTH]


def replace_checkpoint(directory: Path | str, model: nn.Module, architecture: str,
                       metadata: dict[str, Any] | None = None) -> str:
    """`save_checkpoint` into a hidden temporary sibling of `directory`, then swapped in for it
    (rename the old one aside, rename the new one in, delete the old one) with SIGINT held until
    both renames are done, so an interrupted write (Ctrl-C, an exception) leaves the previous
    checkpoint or the new one, never weights of one with the config of the other. What an
    interruption leaves is hidden (`.name.*`) for the caller to clean up.

    Returns the version, as `save_checkpoint`. Raises `CheckpointError` as `save_checkpoint`.
    """
    target = Path(directory)
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}."))
    stale = target.parent / f".{temporary.name[1:]}.old"
    try:
        version = save_checkpoint(temporary, model, architecture, metadata)
        temporary.chmod(0o755)  # mkdtemp makes 0700; checkpoints are read by other users
        with _interrupts_held():
            if target.exists():
                target.rename(stale)
            temporary.rename(target)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    shutil.rmtree(stale, ignore_errors=True)
    return version


@contextlib.contextmanager
def _interrupts_held():
    """Delays SIGINT (KeyboardInterrupt) to the end of the block; only the main thread can set
    signal handlers, so elsewhere the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda number, frame: received.append(number))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if received and callable(previous):
            previous(signal.SIGINT, None)


def load_checkpoint(directory: Path | str, device: str = "cpu") -> Checkpoint:
    """Rebuilds the model of a checkpoint directory and loads its weights, without unpickling.

    Args:
        directory: holds config.json and model.safetensors.
        device: "cpu" or "cuda[:n]"; the model is moved there and put in eval mode.
    Raises:
        CheckpointError: a file missing or unreadable, a pickle, weights whose SHA-256 differs from
            config.json, an unknown architecture, config fields the architecture does not take,
            a NaN or infinite weight, or weights whose names or shapes do not match the
            architecture.
    """
    directory = Path(directory)
    document, weights, sha256 = read_checked(directory)
    architecture = ARCHITECTURES.get(document["architecture"])
    if architecture is None:
        raise CheckpointError(f"{directory}: unknown architecture {document['architecture']!r}; "
                              f"known: {sorted(ARCHITECTURES)}")
    try:
        config = architecture.config_type(**document["config"])
    except (TypeError, ValueError) as error:
        raise CheckpointError(f"{directory}: config does not fit {architecture.name}: {error}") \
            from error
    try:
        state = load_file(str(weights), device="cpu")
    except (SafetensorError, OSError, ValueError) as error:
        raise CheckpointError(f"{weights}: not a readable safetensors file ({error})") from error
    for key, tensor in state.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise CheckpointError(f"{weights}: tensor {key!r} holds NaN or infinite values")
    try:
        model = architecture.model_type(config)
    except (ValueError, OSError) as error:  # e.g. a text router's packaged encoder changed
        raise CheckpointError(f"{directory}: cannot build {architecture.name}: {error}") \
            from error
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as error:
        raise CheckpointError(f"{weights}: weights do not match {architecture.name} with config "
                              f"{document['config']}: {error}") from error
    model.to(torch.device(device)).eval()
    return Checkpoint(model=model, architecture=architecture.name, config=document["config"],
                      metadata=document["metadata"], version=sha256[:VERSION_LENGTH],
                      sha256=sha256, device=device)
