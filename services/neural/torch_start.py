"""Loading the neural service's models with torch: every checkpoint of the models folder on the
selected device, one warm-up forward pass each, the evaluator's runners (ONNX exports cached for
the next start) and the solver's CUDA graphs. Imported by `services.neural.main` only when it
loads them (at start-up, or after a fast start, in the background)."""

from __future__ import annotations

import logging

import torch

from services.neural.evaluator import PositionEvaluator
from services.neural.loading import select_device
from services.neural.models import router_gru, router_text
from services.neural.reasoning_solver import ReasoningSolver
from services.neural.registry import ModelRegistry
from services.neural.settings import NeuralSettings
from services.neural.torch_side import TorchOps
from services.neural.warmup import warm_up

log = logging.getLogger(__name__)


def make_solver(settings: NeuralSettings, evaluator: PositionEvaluator) -> ReasoningSolver:
    """The HRM/TRM solver the settings describe, over `evaluator`'s registry."""
    return ReasoningSolver(lambda: evaluator.registry, settings.max_batch, settings.max_wait_ms,
                           settings.cuda_graphs)


def torch_ops(solver: ReasoningSolver) -> TorchOps:
    """The servicer's torch-backed operations over `solver`."""
    return TorchOps(
        solver=solver, warm_up=warm_up,
        predict_route=lambda model, steps: router_gru.predict(model.module, steps),
        predict_text_route=lambda model, query: router_text.predict(model.module, query))


def load_models(settings: NeuralSettings, evaluator: PositionEvaluator,
                solver: ReasoningSolver) -> ModelRegistry:
    """Loads and warms every model of `settings.models_dir` and prepares the evaluator's and the
    solver's runners for them; blocking (call it off the event loop). The caller installs the
    returned registry.

    Raises:
        CheckpointError: a checkpoint directory cannot be loaded.
        FailedPrecondition: device "cuda" requested without a GPU.
    """
    if settings.torch_threads:
        torch.set_num_threads(settings.torch_threads)
    device = select_device(settings.device)
    models_dir = settings.resolved_models_dir()
    registry = ModelRegistry.load(models_dir, device)
    for model in registry.list():
        warm_up(model)
    evaluator.prepare(registry)
    solver.prepare(registry)
    log.info("neural: %d model(s) from %s on %s; default %r", len(registry), models_dir, device,
             settings.default_model)
    return registry


