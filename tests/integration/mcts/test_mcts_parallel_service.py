"""The mcts service's parallelism and transposition-table fields over a real grpc.aio server on
port 0: tree parallelisation with a table reports hits and per-phase times, and an unknown
Parallelism value is INVALID_ARGUMENT naming the field."""

from __future__ import annotations

import grpc
import pytest
import pytest_asyncio
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from mesh.common.v1 import common_pb2
from mesh.mcts.v1 import mcts_service_pb2, mcts_service_pb2_grpc

from libs.server import start_server
from services.mcts.main import build_servicers
from services.mcts.settings import MctsSettings


def search_request(moves: str = "", **fields) -> mcts_service_pb2.SearchRequest:
    return mcts_service_pb2.SearchRequest(
        game=mcts_service_pb2.GAME_CONNECT_FOUR,
        connect_four=common_pb2.ConnectFourPosition(moves=moves), **fields)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def served():
    """One server for the module: its warm-up compiles three kernels."""
    settings = MctsSettings(port=0, default_simulations=2_000, max_threads=2)
    servicers, ready = await build_servicers(settings)
    server = await start_server("mcts", settings, servicers, ready)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
    yield mcts_service_pb2_grpc.MctsServiceStub(channel)
    await channel.close()
    await server.stop(0)


@pytest.mark.asyncio(loop_scope="module")
async def test_tree_parallel_search_with_a_table_reports_hits_and_phase_times(served):
    reply = await served.Search(
        search_request("112233", simulations=5_000, seed=3, threads=2,
                       parallelism=mcts_service_pb2.PARALLELISM_TREE, transpositions=True),
        timeout=60)
    assert reply.best_action == 4
    stats = reply.statistics
    assert stats.simulations == 5_000 == sum(a.visits for a in stats.actions)
    assert stats.threads == 2 and stats.transposition_hits > 0
    if stats.timed_simulations:  # a usable cycle counter (x86-64)
        assert stats.timed_simulations >= 5_000 // 16
        assert min(stats.selection_ms, stats.expansion_ms, stats.rollout_ms,
                   stats.backup_ms) > 0 and stats.wait_ms >= 0
    plain = await served.Search(search_request("112233", simulations=5_000, seed=3),
                                timeout=60)
    assert plain.statistics.transposition_hits == 0 and plain.best_action == 4


@pytest.mark.asyncio(loop_scope="module")
async def test_an_unknown_parallelism_is_invalid_argument(served):
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await served.Search(search_request("", simulations=100, parallelism=7), timeout=10)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    bad = error_details_pb2.BadRequest()
    assert rpc_status.from_call(caught.value).details[0].Unpack(bad)
    assert bad.field_violations[0].field == "parallelism"
