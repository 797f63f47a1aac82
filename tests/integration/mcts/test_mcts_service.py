"""The mcts service as a real grpc.aio server on port 0: health after warm-up, one search, bad
input as INVALID_ARGUMENT naming the field, the caller's deadline, and searches waiting for a
slot earliest deadline first."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status
from mesh.common.v1 import common_pb2
from mesh.mcts.v1 import mcts_service_pb2, mcts_service_pb2_grpc

from libs.server import start_server
from services.mcts.main import SERVICE_NAME, build_servicers
from services.mcts.settings import MctsSettings


def search_request(moves: str = "", **fields) -> mcts_service_pb2.SearchRequest:
    return mcts_service_pb2.SearchRequest(
        game=fields.pop("game", mcts_service_pb2.GAME_CONNECT_FOUR),
        connect_four=common_pb2.ConnectFourPosition(moves=moves), **fields)


@pytest.fixture
async def served(request):
    slots = getattr(request, "param", 2)
    settings = MctsSettings(port=0, default_simulations=2_000, max_threads=2, search_slots=slots)
    servicers, ready = await build_servicers(settings)
    server = await start_server("mcts", settings, servicers, ready)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
    yield mcts_service_pb2_grpc.MctsServiceStub(channel), channel
    await channel.close()
    await server.stop(0)


async def test_health_is_serving_after_warm_up(served):
    _, channel = served
    health = health_pb2_grpc.HealthStub(channel)
    reply = await health.Check(health_pb2.HealthCheckRequest(service=SERVICE_NAME), timeout=5)
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


async def test_search_finds_the_immediate_win_and_reports_statistics(served):
    stub, _ = served
    reply = await stub.Search(search_request("112233", simulations=5_000, seed=7, threads=2),
                              timeout=30)
    assert reply.best_action == 4
    stats = reply.statistics
    assert stats.simulations == 5_000 and stats.threads == 2 and stats.seed == 7
    assert [a.action for a in stats.actions] == [1, 2, 3, 4, 5, 6, 7]
    assert sum(a.visits for a in stats.actions) == 5_000
    assert next(a for a in stats.actions if a.action == 4).value == 1.0
    assert stats.tree_size > 1 and stats.max_depth >= 1 and stats.elapsed_ms > 0
    assert stats.simulations_per_second > 0 and -1.0 <= stats.root_value <= 1.0
    again = await stub.Search(search_request("112233", simulations=5_000, seed=7, threads=2),
                              timeout=30)
    assert [a.visits for a in again.statistics.actions] == [a.visits for a in stats.actions]


async def test_defaults_apply_when_fields_are_unset(served):
    stub, _ = served
    reply = await stub.Search(search_request("4444"), timeout=30)
    assert reply.statistics.simulations == 2_000 and reply.statistics.threads == 1


@pytest.mark.parametrize(
    ("request_fields", "field"),
    [({"moves": "48"}, "connect_four.moves"),
     ({"moves": "4444444"}, "connect_four.moves"),
     ({"moves": "1212121"}, "connect_four.moves"),
     ({"simulations": 0}, "simulations"),
     ({"simulations": 10_000_001}, "simulations"),
     ({"threads": 0}, "threads"),
     ({"threads": 65}, "threads"),
     ({"exploration": -1.0}, "exploration"),
     ({"game": mcts_service_pb2.GAME_UNSPECIFIED}, "game")],
)
async def test_bad_input_is_invalid_argument_naming_the_field(served, request_fields, field):
    stub, _ = served
    moves = request_fields.pop("moves", "")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Search(search_request(moves, **request_fields), timeout=10)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    bad = error_details_pb2.BadRequest()
    assert rpc_status.from_call(caught.value).details[0].Unpack(bad)
    assert bad.field_violations[0].field == field
    reply = await stub.Search(search_request("", simulations=100), timeout=10)
    assert reply.statistics.simulations == 100


async def test_a_short_deadline_returns_the_simulations_done_by_then(served):
    stub, _ = served
    reply = await stub.Search(search_request("", simulations=10_000_000), timeout=1.0)
    assert 0 < reply.statistics.simulations < 10_000_000
    assert sum(a.visits for a in reply.statistics.actions) == reply.statistics.simulations


async def test_a_deadline_too_short_for_any_simulation_is_deadline_exceeded(served):
    stub, _ = served
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Search(search_request("", simulations=10_000_000), timeout=0.02)
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    reply = await stub.Search(search_request("", simulations=100), timeout=10)
    assert reply.statistics.simulations == 100


@pytest.mark.parametrize("served", [1], indirect=True)
async def test_a_waiting_search_starts_by_deadline_and_counts_its_time_from_its_start(served):
    stub, _ = served
    endless = search_request("", simulations=10_000_000)
    finished: list[str] = []

    async def search(name: str, timeout: float) -> mcts_service_pb2.SearchResponse:
        reply = await stub.Search(endless, timeout=timeout)
        finished.append(name)
        return reply

    holder = asyncio.create_task(search("holder", 0.6))  # holds the one slot until 0.55 s
    await asyncio.sleep(0.1)
    late = asyncio.create_task(search("late", 2.6))  # waits first, but its deadline is later
    await asyncio.sleep(0.1)
    early = asyncio.create_task(search("early", 1.4))
    replies = await asyncio.gather(holder, late, early)
    assert finished == ["holder", "early", "late"]
    # `late` started about 1.35 s after it arrived: a time limit counted from its arrival would
    # have run it past its deadline (DEADLINE_EXCEEDED) instead of stopping it in time.
    assert all(reply.statistics.simulations > 0 for reply in replies)
    assert replies[1].statistics.elapsed_ms < 2_000
