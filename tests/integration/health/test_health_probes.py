"""Each service's health follows its readiness probe while it runs (real grpc.aio servers on port
0, probed every 0.1 s): llm NOT_SERVING while every provider's circuit is open and SERVING
again once a trial call would be let through; retrieval NOT_SERVING with an unreachable Qdrant
server or a closed embedded store; neural NOT_SERVING until it has a model."""

from __future__ import annotations

import asyncio
import socket

import grpc
import numpy as np
import pytest
import torch
from grpc_health.v1 import health_pb2, health_pb2_grpc
from mesh.llm.v1 import llm_service_pb2, llm_service_pb2_grpc
from mesh.neural.v1 import neural_service_pb2, neural_service_pb2_grpc

from libs.server import LIVENESS, start_server
from services.llm import main as llm_main
from services.llm.gateway import build_gateway
from services.llm.settings import LlmSettings
from services.neural import main as neural_main
from services.neural.checkpoint import save_checkpoint
from services.neural.evaluator import PositionEvaluator
from services.neural.models.connect4_pv import ARCHITECTURE, Connect4PV, Connect4PVConfig
from services.neural.settings import NeuralSettings
from services.retrieval import main as retrieval_main
from services.retrieval.settings import RetrievalSettings

# qdrant-client warns (from a worker thread, so under whichever test runs then) that it could not
# read the version of the unreachable server one test points it at.
pytestmark = pytest.mark.filterwarnings("ignore:Failed to obtain server version:UserWarning")

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
FAST = {"health_interval_s": 0.1, "health_timeout_s": 2.0}


async def status(port: int, service: str = "") -> int:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=service), timeout=5)
        return reply.status


async def wait_for(port: int, service: str, wanted: int, within_s: float = 10.0) -> float:
    """Seconds until `service` reports `wanted` on the server at `port`."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    while (seen := await status(port, service)) != wanted:
        assert loop.time() - started < within_s, (
            f"{service!r} still {health_pb2.HealthCheckResponse.ServingStatus.Name(seen)}")
        await asyncio.sleep(0.05)
    return loop.time() - started


def refused_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


async def test_llm_is_not_serving_while_every_circuit_is_open():
    settings = LlmSettings(
        port=0, local_base_url=f"http://127.0.0.1:{refused_port()}/v1", local_model="m",
        fallback_order=["local"], offline_enabled=False, max_retries=0, breaker_threshold=2,
        breaker_ttl_s=1.5, **FAST)
    gateway = build_gateway(settings)
    servicers, ready = await llm_main.build_servicers(settings, gateway)
    running = await start_server("llm", settings, servicers, ready,
                                 probe=gateway.readiness)
    try:
        assert await status(running.port, llm_main.SERVICE_NAME) == SERVING
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
            stub = llm_service_pb2_grpc.LlmServiceStub(channel)
            for _ in range(2):  # connection refused twice: the only circuit opens
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await stub.Generate(llm_service_pb2.GenerateRequest(prompt="hi"), timeout=5)
                assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        await wait_for(running.port, llm_main.SERVICE_NAME, NOT_SERVING, within_s=2)
        assert await status(running.port, "") == NOT_SERVING
        assert await status(running.port, LIVENESS) == SERVING
        assert "circuit is open: local" in running.readiness.reason
        # Past the circuit's ttl a trial call would be let through: ready again.
        await wait_for(running.port, llm_main.SERVICE_NAME, SERVING, within_s=5)
    finally:
        await running.stop(0)
        await gateway.aclose()


async def test_llm_without_any_provider_runs_not_serving():
    settings = LlmSettings(port=0, offline_enabled=False, **FAST)
    gateway = build_gateway(settings)
    servicers, ready = await llm_main.build_servicers(settings, gateway)
    running = await start_server("llm", settings, servicers, ready,
                                 probe=gateway.readiness)
    try:
        assert await status(running.port, llm_main.SERVICE_NAME) == NOT_SERVING
        assert "no LLM provider is configured" in running.readiness.reason
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await llm_service_pb2_grpc.LlmServiceStub(channel).Generate(
                    llm_service_pb2.GenerateRequest(prompt="hi"), timeout=5)
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "no LLM provider is configured" in caught.value.details()
    finally:
        await running.stop(0)
        await gateway.aclose()


class _UnitEmbedder:
    """Stands in for the sentence embedder, which these checks never call (they are about the
    store): a name, a dimension, and unit vectors."""

    name = "unit-test-embedder"
    dim = 8

    def embed(self, texts):
        vectors = np.ones((len(texts), self.dim), dtype=np.float32)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


async def start_retrieval(settings: RetrievalSettings):
    servicers, ready = await retrieval_main.build_servicers(settings, _UnitEmbedder())
    servicer = servicers[0].servicer
    running = await start_server("retrieval", settings, servicers, ready,
                                 probe=servicer.readiness)
    return running, servicer


async def test_retrieval_is_not_serving_when_its_qdrant_server_cannot_be_reached():
    settings = RetrievalSettings(port=0, qdrant_url=f"http://127.0.0.1:{refused_port()}",
                                 **FAST)
    running, servicer = await start_retrieval(settings)
    try:
        assert await status(running.port, retrieval_main.SERVICE_NAME) == NOT_SERVING
        assert "cannot reach the Qdrant server" in running.readiness.reason
    finally:
        await running.stop(0)
        servicer.close()


async def test_retrieval_goes_not_serving_when_its_embedded_store_closes(tmp_path):
    settings = RetrievalSettings(port=0, data_dir=tmp_path / "store", **FAST)
    running, servicer = await start_retrieval(settings)
    try:
        assert await status(running.port, retrieval_main.SERVICE_NAME) == SERVING
        servicer.close()
        await wait_for(running.port, retrieval_main.SERVICE_NAME, NOT_SERVING, within_s=2)
        assert running.readiness.reason == "the store is not open"
    finally:
        await running.stop(0)
        servicer.close()


async def test_retrieval_goes_not_serving_when_its_store_directory_disappears(tmp_path):
    settings = RetrievalSettings(port=0, data_dir=tmp_path / "store", **FAST)
    running, servicer = await start_retrieval(settings)
    try:
        assert await status(running.port, retrieval_main.SERVICE_NAME) == SERVING
        (tmp_path / "store" / "collections").rename(tmp_path / "moved")
        await wait_for(running.port, retrieval_main.SERVICE_NAME, NOT_SERVING, within_s=2)
        assert "is gone" in running.readiness.reason
        (tmp_path / "moved").rename(tmp_path / "store" / "collections")
        await wait_for(running.port, retrieval_main.SERVICE_NAME, SERVING, within_s=2)
    finally:
        await running.stop(0)
        servicer.close()


async def test_neural_is_not_serving_until_it_has_a_model(tmp_path):
    models = tmp_path / "models"
    models.mkdir()
    settings = NeuralSettings(port=0, models_dir=models, device="cpu", **FAST)
    evaluator = PositionEvaluator(settings.default_model, settings.max_batch,
                                  settings.max_wait_ms)
    servicers, ready = await neural_main.build_servicers(settings, evaluator)
    running = await start_server("neural", settings, servicers, ready,
                                 probe=evaluator.readiness)
    try:
        assert await status(running.port, neural_main.SERVICE_NAME) == NOT_SERVING
        assert "no checkpoint is loaded" in running.readiness.reason
        torch.manual_seed(0)
        save_checkpoint(models / "connect4-pv",
                        Connect4PV(Connect4PVConfig(channels=8, blocks=1, value_hidden=16)).eval(),
                        ARCHITECTURE, {"note": "health test"})
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
            await neural_service_pb2_grpc.NeuralServiceStub(channel).ReloadModel(
                neural_service_pb2.ReloadModelRequest(name="connect4-pv"), timeout=30)
        await wait_for(running.port, neural_main.SERVICE_NAME, SERVING, within_s=2)
    finally:
        await running.stop(0)
        await evaluator.close()
