"""What runs a loaded Connect Four policy/value network (torch side of
`services.neural.evaluator.PositionEvaluator`): onnxruntime on the CPU (the graph exported once
per model version, and cached on disk when a cache is given), CUDA graphs on a GPU, torch's eager
mode when either is refused."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import numpy as np

from services.neural.cuda_graphs import GraphedPolicyValue
from services.neural.models import connect4_pv
from services.neural.models.connect4_onnx import OnnxPolicyValue, export_graph
from services.neural.onnx_graphs import GraphCache
from services.neural.registry import ModelRegistry, RegisteredModel

log = logging.getLogger(__name__)

Predict = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


def make_runner(model: RegisteredModel, runtime: str, cpu_threads: int, cuda_graphs: bool,
                max_batch: int, cache: GraphCache | None = None) -> Predict:
    """The function computing `model`'s policy and value (`connect4_pv.predict`'s contract).

    Args:
        model: a loaded policy/value network (its `module` set).
        runtime: "onnxruntime" or "torch" on the CPU (`NeuralSettings.pv_runtime`).
        cpu_threads: onnxruntime's intra-op threads (0: its default).
        cuda_graphs: on a GPU, replay CUDA graphs (`cuda_graphs.GraphedPolicyValue`).
        max_batch: the largest batch the graphs are captured for.
        cache: where an exported ONNX graph is kept for the next start (None: not kept).
    """
    module = model.module
    if runtime == "onnxruntime" and model.device == "cpu":
        try:
            runner = OnnxPolicyValue(module, cpu_threads)
        except Exception as error:  # an export the installed torch or onnxruntime refuses
            log.warning("model %s: onnxruntime unavailable (%s: %s); running it with torch",
                        model.name, type(error).__name__, error)
        else:
            if cache is not None:
                cache.write(model.sha256, runner.graph, model.parameter_count)
            return runner.predict
    if cuda_graphs and model.device != "cpu":
        try:
            graphed = GraphedPolicyValue(module, max_batch)
            graphed.capture_all()
            return graphed.predict
        except Exception as error:  # a capture this torch or driver refuses
            log.warning("model %s: CUDA graphs unavailable (%s: %s); running it with torch",
                        model.name, type(error).__name__, error)
    return lambda planes, legal: connect4_pv.predict(module, planes, legal)


def cache_graphs(models_dir: Path, cache: GraphCache) -> list[str]:
    """Exports the ONNX graph of every Connect Four network of `models_dir` into `cache` (what a
    start exports and caches; an image bakes them in so that its first start is fast).

    Returns:
        the names of the networks cached, by name.
    Raises:
        CheckpointError: a checkpoint directory cannot be loaded.
    """
    cached = []
    for model in ModelRegistry.load(models_dir, "cpu").list():
        if model.board is not None:
            cache.write(model.sha256, export_graph(model.module), model.parameter_count)
            cached.append(model.name)
    return cached
