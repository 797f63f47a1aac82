"""libs.server: health follows readiness, domain errors become statuses with details, the server
keeps serving after a bad request, and unexpected errors become INTERNAL without a stack trace."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status
from mesh.llm.v1 import llm_service_pb2, llm_service_pb2_grpc

from libs.errors import InvalidArgument
from libs.server import Servicer, start_server
from libs.settings import ServiceSettings


class _Echo(llm_service_pb2_grpc.LlmServiceServicer):
    async def Generate(self, request, context):
        if not request.prompt:
            raise InvalidArgument("prompt", "must not be empty")
        if request.prompt == "boom":
            raise RuntimeError("secret internals")
        return llm_service_pb2.GenerateResponse(text=request.prompt, provider="echo")


@pytest.fixture
async def server_and_gate():
    gate = asyncio.Event()

    async def ready():
        await gate.wait()

    task = asyncio.create_task(start_server(
        "echo", ServiceSettings(port=0),
        [Servicer(llm_service_pb2_grpc.add_LlmServiceServicer_to_server, _Echo(),
                  "mesh.llm.v1.LlmService")],
        ready=ready,
    ))
    yield task, gate
    gate.set()
    running = await task
    await running.stop(0)


async def test_health_is_serving_only_after_ready(server_and_gate):
    task, gate = server_and_gate
    await asyncio.sleep(0.2)
    assert not task.done(), "start_server returned before ready() finished"
    gate.set()
    running = await task
    async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
        health = health_pb2_grpc.HealthStub(channel)
        reply = await health.Check(health_pb2.HealthCheckRequest(service="mesh.llm.v1.LlmService"),
                                   timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        await running.stop(0)


async def test_errors_map_to_status_with_details_and_server_keeps_serving(server_and_gate):
    task, gate = server_and_gate
    gate.set()
    running = await task
    async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
        stub = llm_service_pb2_grpc.LlmServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.Generate(llm_service_pb2.GenerateRequest(prompt=""), timeout=5)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        status = rpc_status.from_call(caught.value)
        bad = error_details_pb2.BadRequest()
        assert status.details[0].Unpack(bad)
        assert bad.field_violations[0].field == "prompt"

        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.Generate(llm_service_pb2.GenerateRequest(prompt="boom"), timeout=5)
        assert caught.value.code() == grpc.StatusCode.INTERNAL
        assert "secret internals" not in caught.value.details()
        assert "Traceback" not in caught.value.details()

        reply = await stub.Generate(llm_service_pb2.GenerateRequest(prompt="hi"), timeout=5)
        assert reply.text == "hi"
