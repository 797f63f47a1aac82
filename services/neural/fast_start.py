"""The neural service's fast start: serve the Connect Four networks from ONNX graphs cached on
disk before torch is imported, then load every checkpoint with torch in the background.

Importing torch costs about 1.1-1.3 s of CPU on this machine, and loading and warming the models
with it about 0.7 s more: 2.4 CPU-s before the service could report SERVING (3.5 s of wall time on
the loaded 2-core machine). The networks that most requests need (the mcts service's PUCT
searches and the orchestrator's Connect Four votes call `EvaluatePositions`) run in onnxruntime
anyway (`services.neural.runners`); their exported graphs are cached by the weights' SHA-256
(`onnx_graphs.GraphCache`, written when a start exports them). When every Connect Four network's
graph is in the cache, the service reads the checkpoints' config files, checks each weights
file's SHA-256 against its config (as `checkpoint.load_checkpoint` does), opens the cached graphs
in onnxruntime, and is ready: a partial registry of those networks (`registry.ModelRegistry` with
`complete` False). Torch then loads every checkpoint (`torch_start.load_models`) and the complete
registry replaces the partial one; requests that need another model, or torch (`Solve`, the
routers, `ReloadModel`, `ListModels`), wait for it within their deadline. This is per-model
readiness as Triton's model repository reports it, behind one service-level SERVING.

It applies on the CPU only: with `device` "cuda", or "auto" on a machine with a GPU driver
(`gpu_driver_present`), the networks run in torch on the GPU, so the service loads them first.
A start with a cold cache, or any checkpoint that fails the checks here, loads everything first
as before (a broken checkpoint then fails the start with its `CheckpointError`).
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from services.neural import architectures
from services.neural.checkpoint_format import VERSION_LENGTH, CheckpointError, read_checked
from services.neural.onnx_graphs import GraphCache, OnnxGraphSession
from services.neural.registry import ModelRegistry, RegisteredModel, board_of_config
from services.neural.settings import NeuralSettings

log = logging.getLogger(__name__)

GPU_DRIVER_PATHS = (Path("/proc/driver/nvidia"), Path("/dev/kfd"))
"""NVIDIA's kernel driver and AMD's ROCm device: without either, torch can see no GPU."""


def gpu_driver_present() -> bool:
    """Whether a GPU driver torch could use is present (`GPU_DRIVER_PATHS`)."""
    return any(path.exists() for path in GPU_DRIVER_PATHS)


def applies(settings: NeuralSettings) -> bool:
    """Whether the service may start fast (module doc): `fast_start` on, onnxruntime the
    networks' runtime, and the CPU the device."""
    on_cpu = settings.device == "cpu" or (settings.device == "auto" and not gpu_driver_present())
    return settings.fast_start and settings.pv_runtime == "onnxruntime" and on_cpu


def partial_registry(models_dir: Path, cache: GraphCache, threads: int
                     ) -> tuple[ModelRegistry, dict[tuple[str, str], object]] | None:
    """The Connect Four networks of `models_dir` served from cached graphs, and their runners
    ((name, version) -> predict); None when the fast start does not apply: no models folder,
    a network whose graph is not cached, no network at all, or a checkpoint that fails the
    checks (the full load reports it).
    """
    if not models_dir.is_dir():
        return None
    models: dict[str, RegisteredModel] = {}
    runners: dict[tuple[str, str], object] = {}
    for directory in sorted(models_dir.iterdir()):
        if not directory.is_dir() or directory.name.startswith("."):
            continue
        try:
            found = _network(directory, cache, threads)
        except (CheckpointError, ValueError, OSError, RuntimeError) as error:
            log.info("fast start not taken: %s", error)
            return None
        if found is None:
            continue
        model, predict = found
        models[model.name] = model
        runners[(model.name, model.version)] = predict
    if not models:
        return None
    return ModelRegistry(models, models_dir, "cpu", complete=False), runners


def _network(directory: Path, cache: GraphCache, threads: int
             ) -> tuple[RegisteredModel, object] | None:
    """A checked checkpoint directory: its network and runner when it is a Connect Four network,
    None for another model.

    Raises:
        CheckpointError: the checks failed, or a network's graph is not cached.
        ValueError: the config's board is outside the limits.
        RuntimeError: onnxruntime refused the cached graph.
    """
    document, _, sha256 = read_checked(directory)
    board = board_of_config(document["architecture"], document["config"])
    if board is None:
        return None
    cached = cache.read(sha256)
    if cached is None:
        raise CheckpointError(f"{directory}: no cached graph for its weights")
    graph, facts = cached
    session = OnnxGraphSession(graph, threads)
    # One forward pass of the empty board: onnxruntime's first run allocates its buffers.
    session.predict(np.zeros((1, 2, board.rows, board.columns), dtype=np.float32),
                    np.ones((1, board.columns), dtype=np.bool_))
    model = RegisteredModel(
        name=directory.name, version=sha256[:VERSION_LENGTH],
        architecture=architectures.CONNECT4_PV,
        parameter_count=int(facts.get("parameter_count", 0)), device="cpu",
        metadata=document["metadata"], config=document["config"], module=None, sha256=sha256)
    return model, session.predict
