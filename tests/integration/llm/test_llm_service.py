"""The LLM gateway as a real grpc.aio server on port 0: fallback to the offline provider,
UNAVAILABLE when every provider is down, INVALID_ARGUMENT naming the field, and the caller's
deadline."""

from __future__ import annotations

import socket

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from mesh.llm.v1 import llm_service_pb2, llm_service_pb2_grpc

from libs.server import start_server
from services.llm.main import build_servicers
from services.llm.settings import LlmSettings

PASSAGES = [
    llm_service_pb2.ContextPassage(
        text="Aspirin irreversibly inhibits cyclooxygenase-1. It also thins the blood.",
        source="doc-7", title="Aspirin"),
    llm_service_pb2.ContextPassage(text="Paracetamol acts centrally.", source="doc-9"),
]


@pytest.fixture
def refused_url():
    """A loopback URL where nothing listens: connections are refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


@pytest.fixture
def black_hole_url():
    """A loopback URL that accepts connections (kernel backlog) and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    sock.close()


@pytest.fixture
async def start():
    running = []

    async def start_with(**values) -> llm_service_pb2_grpc.LlmServiceStub:
        settings = LlmSettings(port=0, fallback_order=["local"], max_retries=1,
                                      backoff_initial_s=0.001, backoff_max_s=0.002, **values)
        servicers, ready = await build_servicers(settings)
        server = await start_server("llm", settings, servicers, ready)
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
        running.append((server, channel))
        return llm_service_pb2_grpc.LlmServiceStub(channel)

    yield start_with
    for server, channel in running:
        await channel.close()
        await server.stop(0)


async def test_falls_back_to_the_offline_provider_which_says_what_it_is(start, refused_url):
    stub = await start(local_base_url=refused_url)
    reply = await stub.Generate(
        llm_service_pb2.GenerateRequest(prompt="What does aspirin inhibit?", context=PASSAGES),
        timeout=10)
    assert (reply.provider, reply.model, reply.offline) == ("offline", "offline-extractive", True)
    assert "Aspirin irreversibly inhibits cyclooxygenase-1. [1]" in reply.text
    assert "[1] doc-7 - Aspirin" in reply.text
    assert reply.usage.prompt_tokens > 0 and reply.usage.completion_tokens > 0
    assert [(a.provider, a.outcome, a.retries) for a in reply.attempts] == [
        ("local", "error", 1), ("offline", "ok", 0)]


async def test_every_provider_down_is_unavailable_and_the_server_keeps_serving(
        start, refused_url):
    stub = await start(local_base_url=refused_url, offline_enabled=False)
    request = llm_service_pb2.GenerateRequest(prompt="What does aspirin inhibit?",
                                              context=PASSAGES)
    for _ in range(2):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.Generate(request, timeout=10)
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "local: error" in caught.value.details()


@pytest.mark.parametrize(
    ("request_fields", "field"),
    [({"prompt": ""}, "prompt"),
     ({"prompt": "   "}, "prompt"),
     ({"prompt": "x" * 10_001}, "prompt"),
     ({"prompt": "ok", "max_tokens": 0}, "max_tokens"),
     ({"prompt": "ok", "max_tokens": 32_769}, "max_tokens"),
     ({"prompt": "ok", "temperature": 2.5}, "temperature"),
     ({"prompt": "ok", "temperature": -0.1}, "temperature")],
)
async def test_bad_input_is_invalid_argument_naming_the_field(start, request_fields, field):
    stub = await start()
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Generate(llm_service_pb2.GenerateRequest(**request_fields), timeout=10)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    bad = error_details_pb2.BadRequest()
    assert rpc_status.from_call(caught.value).details[0].Unpack(bad)
    assert bad.field_violations[0].field == field
    # The edge values are accepted.
    reply = await stub.Generate(llm_service_pb2.GenerateRequest(
        prompt="x" * 10_000, max_tokens=32_768, temperature=2.0), timeout=10)
    assert reply.offline


async def test_the_callers_deadline_ends_a_hanging_provider(start, black_hole_url):
    stub = await start(local_base_url=black_hole_url, timeout_s=30.0, offline_enabled=False)
    request = llm_service_pb2.GenerateRequest(prompt="What does aspirin inhibit?")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Generate(request, timeout=0.3)
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    # No hang on the server: the next call is answered (it hits the deadline again).
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Generate(request, timeout=0.3)
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
