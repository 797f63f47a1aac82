"""LlmService.StreamGenerate on a real grpc.aio server in front of local servers that speak
OpenAI's and Anthropic's wire protocols (`scripted_openai`, `scripted_anthropic`), through the
official `openai` and `anthropic` SDKs' streaming calls.

Checked: the deltas join into the final response's text; the streamed usage, cost and token
metrics equal the non-streamed ones; the provider was asked to stream with usage; retries, the
circuit breaker and the fallback hold before the first token, and after it a failure ends the
stream UNAVAILABLE with the text sent so far; a caller that cancels closes the provider's HTTP
connection (the local server sees the disconnect); the offline provider streams its extract.
"""

from __future__ import annotations

import asyncio

import grpc
import pytest
from mesh.llm.v1 import llm_service_pb2, llm_service_pb2_grpc
from prometheus_client import REGISTRY
from scripted_anthropic import INPUT_TOKENS, OUTPUT_TOKENS, ScriptedAnthropic
from scripted_openai import ANSWER, USAGE, ScriptedOpenAI

from libs.server import start_server
from services.llm.main import build_servicers
from services.llm.settings import LlmSettings

PRICES = {"scripted-local": (1.0, 2.0), "scripted-claude": (3.0, 15.0)}
PASSAGES = [llm_service_pb2.ContextPassage(text="The heart has four chambers.", source="h")]
QUESTION = "How many chambers does the heart have?"


def _request(kind=llm_service_pb2.GenerateRequest):
    return kind(prompt=QUESTION, context=PASSAGES, max_tokens=64)


@pytest.fixture(scope="module")
def openai_wire():
    server = ScriptedOpenAI(hang_s=10.0).start()
    yield server
    server.close()


@pytest.fixture(scope="module")
def anthropic_wire():
    server = ScriptedAnthropic(hang_s=10.0).start()
    yield server
    server.close()


@pytest.fixture
async def start():
    running = []

    async def start_with(**values) -> llm_service_pb2_grpc.LlmServiceStub:
        values = {"fallback_order": ["local"], "max_retries": 1, "backoff_initial_s": 0.001,
                  "backoff_max_s": 0.002, "offline_enabled": False, "prices": PRICES,
                  "local_model": "scripted-local", "anthropic_model": "scripted-claude",
                  **values}
        settings = LlmSettings(port=0, **values)
        servicers, ready = await build_servicers(settings)
        server = await start_server("llm", settings, servicers, ready)
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
        running.append((server, channel))
        return llm_service_pb2_grpc.LlmServiceStub(channel)

    yield start_with
    for server, channel in running:
        await channel.close()
        await server.stop(0)


async def _collect(call) -> tuple[list[str], llm_service_pb2.GenerateResponse | None]:
    deltas, final = [], None
    async for message in call:
        if message.WhichOneof("chunk") == "text_delta":
            assert final is None, "a delta came after the final response"
            deltas.append(message.text_delta)
        else:
            final = message.response
    return deltas, final


def _tokens(provider: str, direction: str) -> float:
    return REGISTRY.get_sample_value("mesh_llm_tokens_total",
                                     {"provider": provider, "direction": direction}) or 0.0


def _calls(provider: str, outcome: str) -> float:
    return REGISTRY.get_sample_value("mesh_llm_calls_total",
                                     {"provider": provider, "outcome": outcome}) or 0.0


def _accounting(response: llm_service_pb2.GenerateResponse) -> tuple:
    return (response.text, response.provider, response.model, response.usage.prompt_tokens,
            response.usage.completion_tokens, response.cost_usd, response.finish_reason)


@pytest.mark.parametrize("provider", ["local", "anthropic"])
async def test_streamed_usage_cost_and_metrics_equal_the_whole_generation(
        start, openai_wire, anthropic_wire, provider):
    wire = openai_wire if provider == "local" else anthropic_wire
    wire.reset()
    stub = await start(fallback_order=[provider], local_base_url=openai_wire.url,
                       anthropic_api_key="sk-ant-test", anthropic_base_url=anthropic_wire.url)
    before = (_tokens(provider, "prompt"), _tokens(provider, "completion"))
    whole = await stub.Generate(_request(), timeout=10)
    between = (_tokens(provider, "prompt"), _tokens(provider, "completion"))
    deltas, final = await _collect(stub.StreamGenerate(
        _request(llm_service_pb2.StreamGenerateRequest), timeout=10))
    after = (_tokens(provider, "prompt"), _tokens(provider, "completion"))

    assert len(deltas) > 1 and all(deltas)
    assert "".join(deltas) == final.text
    assert _accounting(final) == _accounting(whole)
    expected = (USAGE["prompt_tokens"], USAGE["completion_tokens"]) if provider == "local" \
        else (INPUT_TOKENS, OUTPUT_TOKENS)
    assert (final.usage.prompt_tokens, final.usage.completion_tokens) == expected
    assert final.finish_reason == "stop" and final.HasField("cost_usd")
    assert [(a.provider, a.outcome) for a in final.attempts] == [(provider, "ok")]
    counted_whole = (between[0] - before[0], between[1] - before[1])
    assert (after[0] - between[0], after[1] - between[1]) == counted_whole == expected
    streamed_body = wire.bodies[-1]
    assert streamed_body["stream"] is True
    if provider == "local":
        assert streamed_body["stream_options"] == {"include_usage": True}
        assert "".join(deltas) == ANSWER


async def test_retries_and_fallback_hold_before_the_first_token(start, openai_wire,
                                                                anthropic_wire):
    openai_wire.reset("500", "500")  # the first try and its retry fail: fall back
    anthropic_wire.reset()
    stub = await start(fallback_order=["local", "anthropic"], local_base_url=openai_wire.url,
                       anthropic_api_key="sk-ant-test", anthropic_base_url=anthropic_wire.url)
    deltas, final = await _collect(stub.StreamGenerate(
        _request(llm_service_pb2.StreamGenerateRequest), timeout=10))
    assert final.provider == "anthropic" and "".join(deltas) == final.text
    assert [(a.provider, a.outcome, a.retries) for a in final.attempts] == [
        ("local", "server_error", 1), ("anthropic", "ok", 0)]


async def test_an_open_circuit_is_skipped_before_the_first_token(start, openai_wire,
                                                                 anthropic_wire):
    openai_wire.reset(default="500")
    anthropic_wire.reset()
    stub = await start(fallback_order=["local", "anthropic"], local_base_url=openai_wire.url,
                       anthropic_api_key="sk-ant-test", anthropic_base_url=anthropic_wire.url,
                       max_retries=0, breaker_threshold=2, breaker_ttl_s=60)
    for _ in range(2):
        await _collect(stub.StreamGenerate(_request(llm_service_pb2.StreamGenerateRequest),
                                           timeout=10))
    sent = openai_wire.requests
    _, final = await _collect(stub.StreamGenerate(
        _request(llm_service_pb2.StreamGenerateRequest), timeout=10))
    assert openai_wire.requests == sent, "an open circuit must send nothing"
    assert [(a.provider, a.outcome) for a in final.attempts] == [
        ("local", "circuit_open"), ("anthropic", "ok")]
    openai_wire.reset()


@pytest.mark.parametrize("provider", ["local", "anthropic"])
async def test_a_failure_after_the_first_token_ends_the_stream_unavailable(
        start, openai_wire, anthropic_wire, provider):
    wire = openai_wire if provider == "local" else anthropic_wire
    wire.reset("cut")
    other = anthropic_wire if provider == "local" else openai_wire
    other.reset()
    stub = await start(fallback_order=[provider, "local" if provider == "anthropic"
                                       else "anthropic"],
                       local_base_url=openai_wire.url, anthropic_api_key="sk-ant-test",
                       anthropic_base_url=anthropic_wire.url)
    others_before = len(other.bodies)
    deltas = []
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        async for message in stub.StreamGenerate(
                _request(llm_service_pb2.StreamGenerateRequest), timeout=10):
            deltas.append(message.text_delta)
    assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
    assert f"{provider} failed while streaming" in raised.value.details()
    assert len(deltas) == 1 and deltas[0]
    assert len(other.bodies) == others_before, "no fallback after the first token"
    assert len(wire.bodies) >= 1 and wire.bodies[-1]["stream"] is True


@pytest.mark.parametrize("provider", ["local", "anthropic"])
async def test_a_caller_that_cancels_closes_the_providers_connection(
        start, openai_wire, anthropic_wire, provider):
    wire = openai_wire if provider == "local" else anthropic_wire
    wire.reset("stall")
    wire.disconnected.clear()
    disconnects = wire.disconnects
    stub = await start(fallback_order=[provider], local_base_url=openai_wire.url,
                       anthropic_api_key="sk-ant-test", anthropic_base_url=anthropic_wire.url)
    cancelled = _calls(provider, "cancelled")
    call = stub.StreamGenerate(_request(llm_service_pb2.StreamGenerateRequest), timeout=30)
    first = await call.read()
    assert first.text_delta
    call.cancel()
    # The server thread waits on the socket; the gateway must close it (well before hang_s).
    disconnected = await asyncio.to_thread(wire.disconnected.wait, 8.0)
    assert disconnected, "the provider's connection was left open"
    assert wire.disconnects == disconnects + 1
    deadline = asyncio.get_running_loop().time() + 5.0
    while _calls(provider, "cancelled") == cancelled:  # counted when the handler has unwound
        assert asyncio.get_running_loop().time() < deadline, "the cancelled call was not counted"
        await asyncio.sleep(0.01)
    wire.reset()


async def test_the_offline_provider_streams_its_extract_in_chunks(start):
    stub = await start(fallback_order=["offline"], offline_enabled=True)
    whole = await stub.Generate(_request(), timeout=10)
    deltas, final = await _collect(stub.StreamGenerate(
        _request(llm_service_pb2.StreamGenerateRequest), timeout=10))
    assert len(deltas) > 1
    assert "".join(deltas) == final.text == whole.text
    assert final.offline and final.provider == "offline"
    assert _accounting(final) == _accounting(whole)


async def test_a_bad_request_fails_before_any_message(start, openai_wire):
    stub = await start(local_base_url=openai_wire.url)
    call = stub.StreamGenerate(llm_service_pb2.StreamGenerateRequest(prompt=" "), timeout=10)
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await call.read()
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "prompt" in raised.value.details()


async def test_a_failure_after_the_first_token_counts_against_the_circuit(start, openai_wire,
                                                                          anthropic_wire):
    openai_wire.reset("cut")
    anthropic_wire.reset()
    stub = await start(fallback_order=["local", "anthropic"], local_base_url=openai_wire.url,
                       anthropic_api_key="sk-ant-test", anthropic_base_url=anthropic_wire.url,
                       max_retries=0, breaker_threshold=1, breaker_ttl_s=60)
    with pytest.raises(grpc.aio.AioRpcError):
        await _collect(stub.StreamGenerate(_request(llm_service_pb2.StreamGenerateRequest),
                                           timeout=10))
    sent = openai_wire.requests
    _, final = await _collect(stub.StreamGenerate(
        _request(llm_service_pb2.StreamGenerateRequest), timeout=10))
    assert openai_wire.requests == sent, "the circuit opened by the broken stream sends nothing"
    assert [(a.provider, a.outcome) for a in final.attempts] == [
        ("local", "circuit_open"), ("anthropic", "ok")]
    openai_wire.reset()
