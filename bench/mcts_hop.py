"""What a gRPC hop costs a search: MctsService.Search over loopback against `uct_search` in-process.

The mcts service starts in this process on port 0 (`services.mcts.main.build_servicers` +
`libs.server.start_server`, kernels warmed up before SERVING); a grpc.aio client on the same event
loop sends Connect Four searches from the empty board (UCT, c = 2, `simulations` simulations, seed
r for round r), alternating with the same `uct_search` call made directly. The hop's cost is the
difference of the median wall times, in ms, and their ratio. The service runs the search in a
worker thread and the kernel releases the GIL, so the difference is serialization, the HTTP/2
round trip, the interceptors (tracing, errors) and the thread hand-off.
"""

from __future__ import annotations

import asyncio
import statistics
import time

import grpc
from mesh.common.v1 import common_pb2
from mesh.mcts.v1 import mcts_service_pb2 as pb
from mesh.mcts.v1 import mcts_service_pb2_grpc

from libs.server import start_server
from services.mcts.main import NAME, build_servicers
from services.mcts.rollout.connect4 import uct_search
from services.mcts.settings import MctsSettings


async def _hop(simulations: int, rounds: int, exploration: float) -> dict:
    settings = MctsSettings(port=0, host="127.0.0.1")
    # The neural channel is opened lazily and never used by UCT searches.
    neural = grpc.aio.insecure_channel(settings.neural_target)
    servicers, ready = await build_servicers(settings, neural)
    server = await start_server(NAME, settings, servicers, ready)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
    stub = mcts_service_pb2_grpc.MctsServiceStub(channel)
    walls: dict[str, list[float]] = {"grpc": [], "in_process": []}
    server_ms: list[float] = []
    try:
        request = pb.SearchRequest(game=pb.GAME_CONNECT_FOUR,
                                   connect_four=common_pb2.ConnectFourPosition(moves=""),
                                   simulations=simulations, exploration=exploration, seed=0)
        await stub.Search(request, timeout=60)  # connection set-up, not timed
        for round_ in range(rounds):
            request.seed = round_
            started = time.perf_counter()
            response = await stub.Search(request, timeout=120)
            walls["grpc"].append(time.perf_counter() - started)
            server_ms.append(response.statistics.elapsed_ms)
            started = time.perf_counter()
            await asyncio.to_thread(uct_search, "", simulations, exploration, round_)
            walls["in_process"].append(time.perf_counter() - started)
    finally:
        await channel.close()
        await neural.close()
        await server.stop(0)
    grpc_ms = statistics.median(walls["grpc"]) * 1e3
    local_ms = statistics.median(walls["in_process"]) * 1e3
    return {"simulations": simulations, "rounds": rounds,
            "grpc_ms": grpc_ms, "in_process_ms": local_ms,
            "search_ms_in_service": statistics.median(server_ms),
            "hop_ms": grpc_ms - local_ms, "hop_ratio": grpc_ms / local_ms}


def measure_hop(simulations: int, rounds: int, exploration: float = 2.0) -> dict:
    """Median wall ms of a Search over gRPC and of the same search in-process.

    Returns:
        {"simulations", "rounds", "grpc_ms", "in_process_ms", "search_ms_in_service" (the
         service's own `elapsed_ms`), "hop_ms" (grpc - in-process), "hop_ratio" (grpc /
         in-process)}.
    """
    return asyncio.run(_hop(simulations, rounds, exploration))
