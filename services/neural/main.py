"""Entry point of the neural service: `mcts-mesh serve neural` calls `build_servicers`; `main()`
runs it standalone.

Start-up (`Startup`): on the CPU with the Connect Four networks' ONNX graphs cached, the service
is ready before torch is imported and loads the rest in the background (`fast_start`); otherwise
it loads every model with torch first (`torch_start`). This module imports no torch.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from mesh.neural.v1 import neural_service_pb2, neural_service_pb2_grpc

from libs.server import Servicer, run_service, serve
from services.neural import fast_start
from services.neural.evaluator import PositionEvaluator
from services.neural.onnx_graphs import GraphCache
from services.neural.servicer import NeuralServicer
from services.neural.settings import NeuralSettings
from services.neural.torch_side import TorchSide

NAME = "neural"
SERVICE_NAME = neural_service_pb2.DESCRIPTOR.services_by_name["NeuralService"].full_name

log = logging.getLogger(__name__)


def make_evaluator(settings: NeuralSettings) -> PositionEvaluator:
    """The policy/value evaluator the settings describe (caching its ONNX exports when the fast
    start is on)."""
    cache = GraphCache(settings.graph_cache_dir) if settings.fast_start else None
    return PositionEvaluator(settings.default_model, settings.max_batch, settings.max_wait_ms,
                             settings.pv_runtime, settings.torch_threads, settings.cuda_graphs,
                             cache)


def _torch_start():
    """`services.neural.torch_start`, which imports torch (about 1.2 CPU-s)."""
    return importlib.import_module("services.neural.torch_start")


class Startup:
    """Loads the service's models: `ready` is the service's ready hook, `close` stops what it
    started.

    Args:
        settings: the service's settings.
        evaluator: the Connect Four evaluator the servicer uses.
        solver: an HRM/TRM solver made by the caller (tests); None: made when torch loads.
    Attributes:
        torch_side: the servicer's torch-backed operations, attached once loaded.
        fast: whether the last `ready` took the fast start.
    """

    def __init__(self, settings: NeuralSettings, evaluator: PositionEvaluator,
                 solver: Any = None) -> None:
        self.settings = settings
        self.evaluator = evaluator
        self.solver = solver
        self.torch_side = TorchSide()
        self.fast = False
        self._background: asyncio.Task | None = None

    async def ready(self) -> None:
        """Returns once the service can answer: the fast start's partial registry installed
        (the rest loading in the background), or every model loaded.

        Raises:
            CheckpointError: a checkpoint directory cannot be loaded (full load).
            FailedPrecondition: device "cuda" requested without a GPU.
        """
        settings = self.settings
        if fast_start.applies(settings) and self.evaluator.graph_cache is not None:
            found = await asyncio.to_thread(
                fast_start.partial_registry, settings.resolved_models_dir(),
                self.evaluator.graph_cache, settings.torch_threads)
            if found is not None:
                registry, runners = found
                self.evaluator.install(registry, runners)
                self.fast = True
                log.info("neural: serving %s from cached ONNX graphs; loading every model with "
                         "torch in the background", ", ".join(m.name for m in registry.list()))
                self._background = asyncio.create_task(self._load_in_background())
                return
        await self._load()

    async def _load(self) -> None:
        torch_start = await asyncio.to_thread(_torch_start)  # off the loop: it may be serving
        if self.solver is None:
            self.solver = torch_start.make_solver(self.settings, self.evaluator)
        registry = await asyncio.to_thread(torch_start.load_models, self.settings,
                                           self.evaluator, self.solver)
        self.evaluator.install(registry)
        self.torch_side.attach(torch_start.torch_ops(self.solver))

    async def _load_in_background(self) -> None:
        try:
            await self._load()
        except Exception as error:  # noqa: BLE001 - reported by readiness and to the waiters
            reason = f"{type(error).__name__}: {error}"
            log.error("neural: loading the models failed after the fast start: %s", reason)
            self.evaluator.fail(reason)
            self.torch_side.fail(reason)
        else:
            log.info("neural: every model loaded; the fast start's registry replaced")

    async def loaded(self) -> None:
        """Waits until the background load (if any) has ended."""
        if self._background is not None:
            await asyncio.shield(self._background)

    async def close(self) -> None:
        """Cancels the background load and closes the solver's batchers."""
        if self._background is not None:
            self._background.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._background
        if self.solver is not None:
            await self.solver.close()


async def build_servicers(
    settings: NeuralSettings, evaluator: PositionEvaluator | None = None,
    solver: Any = None, startup: Startup | None = None,
) -> tuple[list[Servicer], Callable[[], Awaitable[None]]]:
    """The neural servicer and its readiness hook (`Startup.ready`), which loads the models of
    `settings.models_dir` (every checkpoint on the selected device, one warm-up forward pass per
    model), or after a fast start serves the cached Connect Four graphs and loads the rest in the
    background.

    Args:
        evaluator, solver: made by the caller (tests); None: made from the settings.
        startup: the caller's `Startup` (to close it); None: one is made.
    Raises (from the hook):
        CheckpointError: a checkpoint directory cannot be loaded.
        FailedPrecondition: device "cuda" requested without a GPU.
    """
    if startup is None:
        startup = Startup(settings, evaluator or make_evaluator(settings), solver)
    if startup.solver is not None:
        startup.torch_side.attach(_torch_start().torch_ops(startup.solver))
    servicer = NeuralServicer(startup.evaluator, startup.torch_side)
    return [Servicer(neural_service_pb2_grpc.add_NeuralServiceServicer_to_server, servicer,
                     SERVICE_NAME)], startup.ready


def main(settings: NeuralSettings | None = None,
         on_listening: Callable[[dict[str, int]], None] | None = None) -> None:
    """Reads `NEURAL_*` settings (unless given), logs them, and serves until SIGTERM.

    `on_listening(ports)` is called once the service is SERVING (the launcher learns the port).
    """
    settings = settings or NeuralSettings()

    async def run() -> None:
        evaluator = make_evaluator(settings)
        startup = Startup(settings, evaluator)
        servicers, ready = await build_servicers(settings, startup=startup)
        try:
            await serve(NAME, settings, servicers, ready, on_listening=on_listening,
                        probe=evaluator.readiness)
        finally:
            await startup.close()
            await evaluator.close()

    run_service(NAME, settings, run)


if __name__ == "__main__":
    main()
