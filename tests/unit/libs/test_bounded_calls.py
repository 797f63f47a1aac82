"""Bounded calls between mesh services (libs.server, libs.channels, libs.errors) over real grpc.aio
servers on port 0: malformed request bytes are INVALID_ARGUMENT without a traceback, 4 MiB
message limits on both ends, outbound deadlines never outlive the served call's, retries are
throttled, and errors about a dependency never show its address."""

from __future__ import annotations

import asyncio
import json
import logging
import socket

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from mesh.llm.v1 import llm_service_pb2, llm_service_pb2_grpc

from libs.channels import MAX_MESSAGE_BYTES, channel_options, open_channel
from libs.errors import Unavailable, failure_detail, propagate, to_status
from libs.server import Servicer, start_server
from libs.settings import ServiceSettings

GENERATE = "/mesh.llm.v1.LlmService/Generate"
STREAM_METHOD = "/test.Upload/Count"
# Field 1 (prompt, a string) claims 100 bytes and the message ends after one: not a message.
MALFORMED = b"\x0a\x64x"


class _Llm(llm_service_pb2_grpc.LlmServiceServicer):
    """Echoes the prompt; with prompt "remaining" answers with the call's remaining seconds."""

    async def Generate(self, request, context):
        if request.prompt == "remaining":
            return llm_service_pb2.GenerateResponse(text=f"{context.time_remaining():.3f}")
        return llm_service_pb2.GenerateResponse(text=request.prompt)


class _Relay(llm_service_pb2_grpc.LlmServiceServicer):
    """Asks the downstream (over a mesh channel) with a 60 s timeout and returns its answer."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self._stub = llm_service_pb2_grpc.LlmServiceStub(channel)

    async def Generate(self, request, context):
        return await self._stub.Generate(request, timeout=60)


def _add_counter(_servicer, server: grpc.aio.Server) -> None:
    """A stream-request method (`/test.Upload/Count`) counting GenerateRequest messages."""

    async def count(requests, context):
        total = 0
        async for _ in requests:
            total += 1
        return llm_service_pb2.GenerateResponse(text=str(total))

    handler = grpc.method_handlers_generic_handler("test.Upload", {
        "Count": grpc.stream_unary_rpc_method_handler(
            count, request_deserializer=llm_service_pb2.GenerateRequest.FromString,
            response_serializer=llm_service_pb2.GenerateResponse.SerializeToString)})
    server.add_generic_rpc_handlers((handler,))


@pytest.fixture
async def serve():
    running = []

    async def start(servicer, extra=()) -> int:
        items = [Servicer(llm_service_pb2_grpc.add_LlmServiceServicer_to_server, servicer,
                          "mesh.llm.v1.LlmService"), *extra]
        server = await start_server("llm", ServiceSettings(port=0), items)
        running.append(server)
        return server.port

    yield start
    for server in running:
        await server.stop(0)


def _field(error: grpc.aio.AioRpcError) -> str:
    bad = error_details_pb2.BadRequest()
    assert rpc_status.from_call(error).details[0].Unpack(bad)
    return bad.field_violations[0].field


async def test_malformed_bytes_are_invalid_argument_without_a_traceback(serve, caplog):
    port = await serve(_Llm(), [Servicer(_add_counter, None, "test.Upload")])
    caplog.set_level(logging.INFO)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        raw = channel.unary_unary(GENERATE)  # bytes in, bytes out
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await raw(MALFORMED, timeout=5)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert _field(caught.value) == "request"

        upload = channel.stream_unary(STREAM_METHOD)
        good = llm_service_pb2.GenerateRequest(prompt="a").SerializeToString()
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await upload(iter([good, MALFORMED]), timeout=5)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert _field(caught.value) == "request"
        assert await upload(iter([good, good]), timeout=5) == \
            llm_service_pb2.GenerateResponse(text="2").SerializeToString()
        # The server still serves well-formed calls.
        reply = await raw(llm_service_pb2.GenerateRequest(prompt="ok").SerializeToString(),
                          timeout=5)
        assert llm_service_pb2.GenerateResponse.FromString(reply).text == "ok"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not any(r.exc_info for r in caplog.records)


async def test_messages_over_4_mib_are_refused_by_server_and_client(serve):
    port = await serve(_Llm())
    big = llm_service_pb2.GenerateRequest(prompt="x" * (MAX_MESSAGE_BYTES + 1))
    async with grpc.aio.insecure_channel(
            f"127.0.0.1:{port}", options=[("grpc.max_send_message_length", -1)]) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await llm_service_pb2_grpc.LlmServiceStub(channel).Generate(big, timeout=10)
        assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    channel = open_channel(f"127.0.0.1:{port}")
    try:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await llm_service_pb2_grpc.LlmServiceStub(channel).Generate(big, timeout=10)
        assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        fits = llm_service_pb2.GenerateRequest(prompt="x" * (MAX_MESSAGE_BYTES - 100))
        reply = await llm_service_pb2_grpc.LlmServiceStub(channel).Generate(fits, timeout=10)
        assert len(reply.text) == MAX_MESSAGE_BYTES - 100
    finally:
        await channel.close()


async def test_an_outbound_call_never_outlives_the_served_call(serve):
    downstream = await serve(_Llm())
    channel = open_channel(f"127.0.0.1:{downstream}")
    try:
        relay = await serve(_Relay(channel))
        async with grpc.aio.insecure_channel(f"127.0.0.1:{relay}") as front:
            stub = llm_service_pb2_grpc.LlmServiceStub(front)
            reply = await stub.Generate(llm_service_pb2.GenerateRequest(prompt="remaining"),
                                        timeout=2)
            # The relay asked with timeout=60; the downstream saw what was left of the 2 s. gRPC
            # rounds the grpc-timeout header up to its coarse units, so a few ms more can arrive.
            assert 0 < float(reply.text) <= 2.1
            # Outside a served call the channel keeps the caller's own timeout.
            direct = llm_service_pb2_grpc.LlmServiceStub(channel)
            reply = await direct.Generate(llm_service_pb2.GenerateRequest(prompt="remaining"),
                                          timeout=60)
            assert float(reply.text) > 50
    finally:
        await channel.close()


def test_retries_are_on_unavailable_only_and_throttled():
    options = dict(channel_options())
    config = json.loads(options["grpc.service_config"])
    policy = config["methodConfig"][0]["retryPolicy"]
    assert policy["retryableStatusCodes"] == ["UNAVAILABLE"]
    assert config["retryThrottling"] == {"maxTokens": 10, "tokenRatio": 0.1}
    assert options["grpc.max_receive_message_length"] == MAX_MESSAGE_BYTES
    assert options["grpc.max_send_message_length"] == MAX_MESSAGE_BYTES
    assert options["grpc.min_reconnect_backoff_ms"] == 1000


async def test_a_dependency_that_does_not_answer_costs_a_connect_timeout_not_the_deadline():
    # A socket that listens but never speaks HTTP/2: a frozen process, as a new connection sees it.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    channel = open_channel(f"127.0.0.1:{port}", connect_timeout_s=0.3)
    try:
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await llm_service_pb2_grpc.LlmServiceStub(channel).Generate(
                llm_service_pb2.GenerateRequest(prompt="x"), timeout=30)
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        assert loop.time() - started < 15  # gRPC's own connect timeout is 20 s
        error = propagate(caught.value, "llm")
        assert isinstance(error, Unavailable) and error.failed_service == "llm"
        assert str(port) not in error.message and "127.0.0.1" not in error.message
        assert error.message.startswith("llm failed: UNAVAILABLE")
        metadata = {}
        info = error_details_pb2.ErrorInfo()
        for detail in to_status(error, "orchestrator").details:
            if detail.Unpack(info):
                metadata = dict(info.metadata)
        assert metadata == {"service": "orchestrator", "failed_service": "llm"}
    finally:
        await channel.close()
        listener.close()


async def test_a_refused_connection_names_the_service_not_its_address():
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    channel = open_channel(f"127.0.0.1:{port}")
    try:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await llm_service_pb2_grpc.LlmServiceStub(channel).Generate(
                llm_service_pb2.GenerateRequest(prompt="x"), timeout=10)
        assert str(port) in caught.value.details()  # gRPC's own message has the address
        assert str(port) not in failure_detail(caught.value)
        assert failure_detail(caught.value) == "not reachable"
    finally:
        await channel.close()
