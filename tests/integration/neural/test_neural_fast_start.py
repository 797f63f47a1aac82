"""The neural service's fast start on a real grpc.aio server (port 0): with the Connect Four
network's graph cached, the service answers EvaluatePositions while torch is still loading the
models (held by the test), requests that need torch wait for it and then answer, a failed load
makes the service NOT ready with the reason and such requests UNAVAILABLE while the cached network
keeps answering, and a cold start writes the cache the next start reads."""

from __future__ import annotations

import asyncio
import threading

import grpc
import numpy as np
import pytest
import torch
from mesh.common.v1 import common_pb2
from mesh.neural.v1 import neural_service_pb2 as pb
from mesh.neural.v1 import neural_service_pb2_grpc

from libs.connect4.board import Position, encode, legal_mask
from libs.server import start_server
from services.neural import torch_start
from services.neural.checkpoint import CheckpointError, save_checkpoint
from services.neural.main import Startup, build_servicers, make_evaluator
from services.neural.models.connect4_onnx import export_graph
from services.neural.models.connect4_pv import Connect4PV, Connect4PVConfig, predict
from services.neural.models.router_gru import RouterGRU, RouterGRUConfig
from services.neural.onnx_graphs import GraphCache
from services.neural.registry import ModelRegistry
from services.neural.settings import NeuralSettings

TIMEOUT_S = 30
MOVES = "4453"


@pytest.fixture
def models_dir(tmp_path):
    root = tmp_path / "models"
    torch.manual_seed(5)
    save_checkpoint(root / "connect4-pv", Connect4PV(Connect4PVConfig(channels=8, blocks=1,
                                                                      value_hidden=16)),
                    "connect4_pv")
    save_checkpoint(root / "router", RouterGRU(RouterGRUConfig(hidden=4, bins=0,
                                                               routes=("a", "b"))), "router_gru")
    return root


def _settings(models_dir, tmp_path) -> NeuralSettings:
    return NeuralSettings(port=0, models_dir=models_dir, device="cpu",
                          graph_cache_dir=tmp_path / "graphs")


def _warm_cache(models_dir, settings) -> None:
    model = ModelRegistry.load(models_dir, "cpu").get("connect4-pv")
    GraphCache(settings.graph_cache_dir).write(model.sha256, export_graph(model.module),
                                               model.parameter_count)


class Gate:
    """Holds `torch_start.load_models` until `open()`; `error` makes it raise instead."""

    def __init__(self, error: Exception | None = None) -> None:
        self.released = threading.Event()
        self.error = error

    def open(self) -> None:
        self.released.set()


async def _serve(settings, monkeypatch, gate: Gate | None):
    if gate is not None:
        load = torch_start.load_models

        def held(*args):
            gate.released.wait(TIMEOUT_S)
            if gate.error is not None:
                raise gate.error
            return load(*args)

        monkeypatch.setattr(torch_start, "load_models", held)
    evaluator = make_evaluator(settings)
    startup = Startup(settings, evaluator)
    servicers, ready = await build_servicers(settings, startup=startup)
    server = await start_server("neural", settings, servicers, ready)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")

    async def stop():
        if gate is not None:
            gate.open()
        await channel.close()
        await server.stop(0)
        await startup.close()
        await evaluator.close()

    return neural_service_pb2_grpc.NeuralServiceStub(channel), startup, stop


async def _evaluate(stub) -> pb.EvaluatePositionsResponse:
    return await stub.EvaluatePositions(pb.EvaluatePositionsRequest(
        positions=[common_pb2.ConnectFourPosition(moves=MOVES)]), timeout=TIMEOUT_S)


def _expected(models_dir):
    model = ModelRegistry.load(models_dir, "cpu").get("connect4-pv")
    position = Position.from_moves(MOVES)
    return predict(model.module, encode(position)[None], legal_mask(position)[None])


async def test_the_cached_network_answers_while_torch_loads_and_the_rest_waits(
        models_dir, tmp_path, monkeypatch):
    settings = _settings(models_dir, tmp_path)
    _warm_cache(models_dir, settings)
    gate = Gate()
    stub, startup, stop = await _serve(settings, monkeypatch, gate)
    try:
        assert startup.fast and startup.torch_side.ops is None
        route = asyncio.ensure_future(stub.PredictRoute(pb.PredictRouteRequest(
            model="router", steps=[pb.RoutingStep(features=[0.5] * 10)]), timeout=TIMEOUT_S))
        listed = asyncio.ensure_future(stub.ListModels(pb.ListModelsRequest(),
                                                       timeout=TIMEOUT_S))
        reply = await _evaluate(stub)  # answered while the load is held
        assert not route.done() and not listed.done()
        policy, value = _expected(models_dir)
        np.testing.assert_allclose(reply.evaluations[0].policy, policy[0], rtol=1e-5, atol=1e-6)
        assert reply.evaluations[0].value == pytest.approx(float(value[0]), abs=1e-5)
        assert reply.model.name == "connect4-pv" and reply.model.parameter_count > 0
        gate.open()
        routed = await route
        assert [r.route for r in routed.routes] == ["a", "b"]
        assert sorted(m.name for m in (await listed).models) == ["connect4-pv", "router"]
        assert startup.evaluator.registry.complete
    finally:
        await stop()


async def test_a_failed_load_is_not_ready_with_its_reason_and_the_network_keeps_answering(
        models_dir, tmp_path, monkeypatch):
    settings = _settings(models_dir, tmp_path)
    _warm_cache(models_dir, settings)
    gate = Gate(CheckpointError("models/router: weights do not match"))
    stub, startup, stop = await _serve(settings, monkeypatch, gate)
    try:
        gate.open()
        await startup.loaded()
        assert "weights do not match" in await startup.evaluator.readiness()
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.PredictRoute(pb.PredictRouteRequest(
                model="router", steps=[pb.RoutingStep(features=[0.5] * 10)]), timeout=TIMEOUT_S)
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "weights do not match" in caught.value.details()
        assert len((await _evaluate(stub)).evaluations) == 1
    finally:
        await stop()


async def test_a_cold_start_loads_everything_first_and_writes_the_cache(models_dir, tmp_path,
                                                                       monkeypatch):
    settings = _settings(models_dir, tmp_path)
    stub, startup, stop = await _serve(settings, monkeypatch, None)
    try:
        assert not startup.fast and startup.evaluator.registry.complete
        assert startup.torch_side.ops is not None
        model = startup.evaluator.registry.get("connect4-pv")
        assert GraphCache(settings.graph_cache_dir).read(model.sha256) is not None
        assert len((await _evaluate(stub)).evaluations) == 1
    finally:
        await stop()
