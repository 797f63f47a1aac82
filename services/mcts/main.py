"""Entry point of the mcts service: `mcts-mesh serve mcts` calls `build_servicers`; `main()` runs it
standalone."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import grpc
from mesh.mcts.v1 import mcts_service_pb2, mcts_service_pb2_grpc

from libs.channels import Keepalive, open_channel
from libs.server import Servicer, run_service, serve
from services.mcts.api.servicer import MctsServicer
from services.mcts.batched.search import warm_up as batched_warm_up
from services.mcts.rollout.connect4 import uct_search
from services.mcts.settings import MctsSettings

NAME = "mcts"
SERVICE_NAME = mcts_service_pb2.DESCRIPTOR.services_by_name["MctsService"].full_name

log = logging.getLogger(__name__)


def _warm_up() -> None:
    """Compiles (or loads from numba's cache) every kernel a search runs, both rollout modes and the
    threaded path, so the first request pays no JIT time; the tree-parallel kernel (which also
    serves transposition tables) is compiled for the default decisive rollouts only."""
    uct_search("", 64, seed=0, threads=1)
    uct_search("4", 64, seed=0, threads=2, decisive_rollouts=False)
    uct_search("", 64, seed=0, threads=2, parallelism="tree", transpositions=True)
    batched_warm_up()


async def build_servicers(
    settings: MctsSettings, neural_channel: grpc.aio.Channel | None = None,
) -> tuple[list[Servicer], Callable[[], Awaitable[None]]]:
    """The mcts servicer and its readiness hook, which compiles the numba kernels (health turns
    SERVING only after it). `neural_channel` serves LEAF_EVALUATOR_NEURAL searches; None opens
    one to `settings.neural_target` (connected on first use, closed with the process)."""
    if neural_channel is None:
        neural_channel = open_channel(settings.neural_target, keepalive=Keepalive.of(settings),
                                      auth=settings.mesh_auth())

    async def ready() -> None:
        await asyncio.to_thread(_warm_up)
        log.info("mcts: kernels compiled; default %d simulations, c=%.2f, up to %d threads",
                 settings.default_simulations, settings.exploration, settings.max_threads)

    return [Servicer(mcts_service_pb2_grpc.add_MctsServiceServicer_to_server,
                     MctsServicer(settings, neural_channel), SERVICE_NAME)], ready


def main(settings: MctsSettings | None = None,
         on_listening: Callable[[dict[str, int]], None] | None = None) -> None:
    """Reads `MCTS_*` settings (unless given), logs them, and serves until SIGTERM."""
    settings = settings or MctsSettings()

    async def run() -> None:
        servicers, ready = await build_servicers(settings)
        await serve(NAME, settings, servicers, ready, on_listening=on_listening)

    run_service(NAME, settings, run)


if __name__ == "__main__":
    main()
