"""Entry point of the neural service: `mcts-mesh serve neural` calls `build_servicers`; `main()`
runs it standalone."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import torch
from mesh.neural.v1 import neural_service_pb2, neural_service_pb2_grpc

from libs.server import Servicer, run_service, serve
from services.neural.evaluator import PositionEvaluator
from services.neural.reasoning_solver import ReasoningSolver
from services.neural.registry import ModelRegistry, select_device
from services.neural.servicer import NeuralServicer
from services.neural.settings import NeuralSettings
from services.neural.warmup import warm_up

NAME = "neural"
SERVICE_NAME = neural_service_pb2.DESCRIPTOR.services_by_name["NeuralService"].full_name

log = logging.getLogger(__name__)


def _warm_up(registry: ModelRegistry) -> None:
    for model in registry.list():
        warm_up(model)


def make_evaluator(settings: NeuralSettings) -> PositionEvaluator:
    """The policy/value evaluator the settings describe."""
    return PositionEvaluator(settings.default_model, settings.max_batch, settings.max_wait_ms,
                             settings.pv_runtime, settings.torch_threads, settings.cuda_graphs)


def make_solver(settings: NeuralSettings, evaluator: PositionEvaluator) -> ReasoningSolver:
    """The HRM/TRM solver the settings describe, over `evaluator`'s registry."""
    return ReasoningSolver(lambda: evaluator.registry, settings.max_batch, settings.max_wait_ms,
                           settings.cuda_graphs)


async def build_servicers(
    settings: NeuralSettings, evaluator: PositionEvaluator | None = None,
    solver: ReasoningSolver | None = None,
) -> tuple[list[Servicer], Callable[[], Awaitable[None]]]:
    """The neural servicer and its readiness hook, which loads every checkpoint of
    `settings.models_dir` on the selected device and runs one warm-up forward pass per model
    (Connect Four networks and HRM/TRM alike).

    Raises (from the hook):
        CheckpointError: a checkpoint directory cannot be loaded.
        FailedPrecondition: device "cuda" requested without a GPU.
    """
    evaluator = evaluator or make_evaluator(settings)
    solver = solver or make_solver(settings, evaluator)
    servicer = NeuralServicer(evaluator, solver)

    async def ready() -> None:
        if settings.torch_threads:
            torch.set_num_threads(settings.torch_threads)
        device = select_device(settings.device)
        models_dir = settings.resolved_models_dir()
        registry = await asyncio.to_thread(ModelRegistry.load, models_dir, device)
        await asyncio.to_thread(_warm_up, registry)
        await asyncio.to_thread(evaluator.prepare, registry)
        await asyncio.to_thread(solver.prepare, registry)
        evaluator.install(registry)
        log.info("neural: %d model(s) from %s on %s; default %r", len(registry), models_dir,
                 device, settings.default_model)

    return [Servicer(neural_service_pb2_grpc.add_NeuralServiceServicer_to_server, servicer,
                     SERVICE_NAME)], ready


def main(settings: NeuralSettings | None = None,
         on_listening: Callable[[dict[str, int]], None] | None = None) -> None:
    """Reads `NEURAL_*` settings (unless given), logs them, and serves until SIGTERM.

    `on_listening(ports)` is called once the service is SERVING (the launcher learns the port).
    """
    settings = settings or NeuralSettings()

    async def run() -> None:
        evaluator = make_evaluator(settings)
        solver = make_solver(settings, evaluator)
        servicers, ready = await build_servicers(settings, evaluator, solver)
        try:
            await serve(NAME, settings, servicers, ready, on_listening=on_listening,
                        probe=evaluator.readiness)
        finally:
            await evaluator.close()
            await solver.close()

    run_service(NAME, settings, run)


if __name__ == "__main__":
    main()
