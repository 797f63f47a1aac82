"""The neural service as a real grpc.aio server on port 0, serving a freshly built tiny checkpoint:
evaluations match the network, the registry is listed, bad input is INVALID_ARGUMENT naming the
field, an unknown model NOT_FOUND, no checkpoint UNAVAILABLE, and the server keeps serving."""

from __future__ import annotations

import asyncio

import grpc
import numpy as np
import pytest
import torch
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status
from mesh.common.v1 import common_pb2
from mesh.neural.v1 import neural_service_pb2, neural_service_pb2_grpc

from libs.connect4.board import Position, encode, legal_mask
from libs.server import start_server
from services.neural.checkpoint import load_checkpoint, save_checkpoint
from services.neural.evaluator import PositionEvaluator
from services.neural.main import SERVICE_NAME, build_servicers
from services.neural.models.connect4_pv import (
    ARCHITECTURE,
    Connect4PV,
    Connect4PVConfig,
    predict,
)
from services.neural.settings import NeuralSettings

TIMEOUT_S = 10


@pytest.fixture
def models_dir(tmp_path):
    torch.manual_seed(3)
    model = Connect4PV(Connect4PVConfig(channels=8, blocks=1, value_hidden=16)).eval()
    save_checkpoint(tmp_path / "models" / "connect4-pv", model, ARCHITECTURE,
                    {"games": 2, "note": "integration test"})
    return tmp_path / "models"


@pytest.fixture
async def serve():
    running = []

    async def start(models_dir, max_wait_ms=2.0):
        settings = NeuralSettings(port=0, models_dir=models_dir, device="cpu",
                                  max_wait_ms=max_wait_ms)
        evaluator = PositionEvaluator(settings.default_model, settings.max_batch,
                                      settings.max_wait_ms)
        servicers, ready = await build_servicers(settings, evaluator)
        server = await start_server("neural", settings, servicers, ready)
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
        running.append((server, channel, evaluator))
        return neural_service_pb2_grpc.NeuralServiceStub(channel), channel, evaluator

    yield start
    for server, channel, evaluator in running:
        await channel.close()
        await server.stop(0)
        await evaluator.close()


def _request(*moves, model=""):
    return neural_service_pb2.EvaluatePositionsRequest(
        model=model, positions=[common_pb2.ConnectFourPosition(moves=m) for m in moves])


def _field(error: grpc.aio.AioRpcError) -> str:
    status = rpc_status.from_call(error)
    for detail in status.details:
        bad = error_details_pb2.BadRequest()
        if detail.Unpack(bad):
            return bad.field_violations[0].field
    raise AssertionError(f"no BadRequest detail in {status}")


async def test_health_evaluations_and_the_registry(serve, models_dir):
    stub, channel, _ = await serve(models_dir)
    health = health_pb2_grpc.HealthStub(channel)
    reply = await health.Check(health_pb2.HealthCheckRequest(service=SERVICE_NAME),
                               timeout=TIMEOUT_S)
    assert reply.status == health_pb2.HealthCheckResponse.SERVING

    moves = ["", "444444", "7422341735647741166133573473242566"]
    response = await stub.EvaluatePositions(_request(*moves), timeout=TIMEOUT_S)
    checkpoint = load_checkpoint(models_dir / "connect4-pv")
    positions = [Position.from_moves(m) for m in moves]
    policy, value = predict(checkpoint.model, np.stack([encode(p) for p in positions]),
                            np.stack([legal_mask(p) for p in positions]))
    assert len(response.evaluations) == 3
    for i, evaluation in enumerate(response.evaluations):
        np.testing.assert_allclose(evaluation.policy, policy[i], rtol=1e-5, atol=1e-6)
        assert evaluation.value == pytest.approx(float(value[i]), abs=1e-6)
        assert sum(evaluation.policy) == pytest.approx(1.0, abs=1e-5)
    assert response.evaluations[1].policy[3] == 0.0  # column 4 is full
    assert response.model.name == "connect4-pv"
    assert response.model.version == checkpoint.version

    listed = await stub.ListModels(neural_service_pb2.ListModelsRequest(), timeout=TIMEOUT_S)
    assert [m.name for m in listed.models] == ["connect4-pv"]
    got = await stub.GetModel(neural_service_pb2.GetModelRequest(name="connect4-pv"),
                              timeout=TIMEOUT_S)
    assert got.model.architecture == "connect4_pv"
    assert got.model.parameter_count == sum(p.numel() for p in checkpoint.model.parameters())
    assert got.model.device == "cpu"
    assert got.model.metadata["note"] == "integration test"
    assert got.model.metadata["games"] == "2"


async def test_concurrent_requests_share_forward_passes(serve, models_dir):
    # A generous wait, so that calls arriving over loopback on a busy machine still meet.
    stub, _, evaluator = await serve(models_dir, max_wait_ms=250)
    moves = ["", "1", "12", "123", "1234", "12345", "123456", "4", "44", "444"]
    replies = await asyncio.gather(*(stub.EvaluatePositions(_request(m), timeout=TIMEOUT_S)
                                     for m in moves))
    alone = await stub.EvaluatePositions(_request(*moves), timeout=TIMEOUT_S)
    for reply, expected in zip(replies, alone.evaluations, strict=True):
        np.testing.assert_allclose(reply.evaluations[0].policy, expected.policy, rtol=1e-5,
                                   atol=1e-6)
    batcher = evaluator.batcher("connect4-pv")
    assert batcher.rows_run == 2 * len(moves)
    assert batcher.forward_passes < len(moves) + 1


@pytest.mark.parametrize("request_, field", [
    (_request(), "positions"),
    (_request(*["4"] * 1025), "positions"),
    (_request("", "48"), "positions[1].moves"),
    (_request("4", "1", "4444444"), "positions[2].moves"),
    (_request("1212121"), "positions[0].moves"),
    (_request("", "12a"), "positions[1].moves"),
], ids=["empty", "1025-positions", "column-8", "full-column", "game-over", "not-a-digit"])
async def test_bad_input_names_the_field_and_the_server_keeps_serving(serve, models_dir,
                                                                      request_, field):
    stub, _, _ = await serve(models_dir)
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stub.EvaluatePositions(request_, timeout=TIMEOUT_S)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert _field(raised.value) == field
    reply = await stub.EvaluatePositions(_request("4"), timeout=TIMEOUT_S)
    assert len(reply.evaluations) == 1


async def test_unknown_model_is_not_found(serve, models_dir):
    stub, _, _ = await serve(models_dir)
    for call in (stub.EvaluatePositions(_request("4", model="chess-pv"), timeout=TIMEOUT_S),
                 stub.GetModel(neural_service_pb2.GetModelRequest(name="chess-pv"),
                               timeout=TIMEOUT_S)):
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await call
        assert raised.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stub.GetModel(neural_service_pb2.GetModelRequest(), timeout=TIMEOUT_S)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert _field(raised.value) == "name"


async def test_no_checkpoint_is_unavailable(serve, tmp_path):
    (tmp_path / "empty").mkdir()
    stub, _, _ = await serve(tmp_path / "empty")
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stub.EvaluatePositions(_request("4"), timeout=TIMEOUT_S)
    assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
    listed = await stub.ListModels(neural_service_pb2.ListModelsRequest(), timeout=TIMEOUT_S)
    assert len(listed.models) == 0
