"""The LLM gateway as a real process (`mcts-mesh serve llm`) in front of a scripted
OpenAI-compatible provider that returns 429, 500, hangs before the first byte, or cuts its answer
off in the middle.

The gateway is configured as an operator would, through `LLM_*` variables: the local
OpenAI-compatible provider only (offline answers disabled, so every failure shows), no retries,
0.5 s per call, a circuit that opens after 3 consecutive failures and lets a trial call through
after 1 s. Checked: each failure is UNAVAILABLE naming the provider and what happened (or
DEADLINE_EXCEEDED when the caller's deadline is the shorter), no call outlives its deadline, the
circuit opens (calls fail at once and reach no provider), half-opens after its ttl (one trial
reaches the provider: a failed trial opens it again, a good one closes it), and the success rate
returns to 100%. A second gateway with the offline provider enabled keeps answering through the
same failures.
"""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest
from faultkit import spawn_service, stop_process
from mesh.llm.v1 import llm_service_pb2, llm_service_pb2_grpc
from scripted_openai import ScriptedOpenAI

pytestmark = [pytest.mark.fault]

THRESHOLD = 3
TTL_S = 1.0
CALL_TIMEOUT_S = 0.5
REQUEST = llm_service_pb2.GenerateRequest(
    prompt="How many chambers does the heart have?",
    context=[llm_service_pb2.ContextPassage(text="The heart has four chambers.", source="h")])


@pytest.fixture(scope="module")
def provider():
    server = ScriptedOpenAI(hang_s=5.0).start()
    yield server
    server.close()


def _gateway_env(provider: ScriptedOpenAI, offline: bool) -> dict[str, str]:
    return {
        "LLM_PORT": "0",
        "LLM_FALLBACK_ORDER": '["local"]',
        "LLM_LOCAL_BASE_URL": provider.url,
        "LLM_LOCAL_MODEL": "scripted",
        "LLM_OFFLINE_ENABLED": "true" if offline else "false",
        "LLM_TIMEOUT_S": str(CALL_TIMEOUT_S),
        "LLM_MAX_RETRIES": "0",
        "LLM_BREAKER_THRESHOLD": str(THRESHOLD),
        "LLM_BREAKER_TTL_S": str(TTL_S),
    }


@pytest.fixture(scope="module")
def gateway(provider, tmp_path_factory):
    process, port = spawn_service("llm", _gateway_env(provider, offline=False),
                                  tmp_path_factory.mktemp("llm-faults"))
    yield f"127.0.0.1:{port}"
    stop_process(process)


@pytest.fixture(scope="module")
def gateway_with_offline(provider, tmp_path_factory):
    process, port = spawn_service("llm", _gateway_env(provider, offline=True),
                                  tmp_path_factory.mktemp("llm-faults-offline"))
    yield f"127.0.0.1:{port}"
    stop_process(process)


@pytest.fixture
async def generate(gateway, provider):
    """Calls Generate on the gateway; before the test, waits until its circuit is closed."""
    channel = grpc.aio.insecure_channel(gateway)
    stub = llm_service_pb2_grpc.LlmServiceStub(channel)

    async def call(deadline_s: float = 3.0):
        return await stub.Generate(REQUEST, timeout=deadline_s)

    provider.reset()
    started = time.monotonic()
    while True:
        try:
            await call()
            break
        except grpc.aio.AioRpcError:
            assert time.monotonic() - started < 10, "the gateway never answered"
            await asyncio.sleep(TTL_S / 4)
    yield call
    provider.reset()
    await channel.close()


async def _failure(call, deadline_s: float = 3.0) -> tuple[grpc.StatusCode, str, float]:
    started = time.monotonic()
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call(deadline_s)
    elapsed = time.monotonic() - started
    assert elapsed < deadline_s + 1.0, f"the call took {elapsed:.2f} s, deadline {deadline_s} s"
    return caught.value.code(), caught.value.details(), elapsed


@pytest.mark.parametrize(("step", "outcome"), [
    ("429", "rate_limited"),
    ("500", "server_error"),
    ("hang", "timeout"),
    ("cut", "error"),
])
async def test_each_provider_failure_is_unavailable_naming_provider_and_outcome(
        generate, provider, step, outcome):
    provider.reset(step)
    before = provider.requests
    code, details, elapsed = await _failure(generate)
    assert code == grpc.StatusCode.UNAVAILABLE, details
    assert f"local: {outcome}" in details, details
    assert provider.requests == before + 1
    if step == "hang":  # the per-call timeout ended it, not the caller's 3 s deadline
        assert elapsed < 3.0
    # The next call is answered: one failure does not open the circuit.
    reply = await generate()
    assert reply.provider == "local" and reply.text


async def test_a_hanging_provider_and_a_short_deadline_give_deadline_exceeded(generate, provider):
    provider.reset("hang")
    code, details, _ = await _failure(generate, deadline_s=0.3)
    assert code == grpc.StatusCode.DEADLINE_EXCEEDED, details


async def test_the_circuit_opens_half_opens_and_closes_as_configured(generate, provider):
    provider.reset(default="500")
    for _ in range(THRESHOLD):
        code, details, _ = await _failure(generate)
        assert (code, "local: server_error" in details) == (grpc.StatusCode.UNAVAILABLE, True)
    sent = provider.requests
    # Open: calls fail at once with the circuit named, and no request reaches the provider.
    for _ in range(3):
        code, details, _ = await _failure(generate)
        assert code == grpc.StatusCode.UNAVAILABLE and "local: circuit_open" in details, details
    assert provider.requests == sent

    # Half-open after the ttl: one trial reaches the provider; it fails, so the circuit opens
    # again and the next call is refused without a request.
    await asyncio.sleep(TTL_S + 0.3)
    code, details, _ = await _failure(generate)
    assert "local: server_error" in details and provider.requests == sent + 1
    code, details, _ = await _failure(generate)
    assert "local: circuit_open" in details and provider.requests == sent + 1

    # Half-open again; the provider is back: the trial succeeds and closes the circuit.
    provider.reset()
    await asyncio.sleep(TTL_S + 0.3)
    replies = [await generate() for _ in range(20)]
    assert all(reply.provider == "local" for reply in replies)
    assert provider.requests == sent + 1 + 20


async def test_with_the_offline_provider_every_request_is_answered_through_the_failures(
        gateway_with_offline, provider):
    channel = grpc.aio.insecure_channel(gateway_with_offline)
    stub = llm_service_pb2_grpc.LlmServiceStub(channel)
    provider.reset("429", "500", "hang")
    try:
        replies = [await stub.Generate(REQUEST, timeout=3.0) for _ in range(10)]
    finally:
        await channel.close()
        provider.reset()
    assert all(reply.text for reply in replies)
    assert [reply.offline for reply in replies[:3]] == [True] * 3
    # The three failures opened the circuit: the next calls skip the local provider at once.
    outcomes = [[(a.provider, a.outcome) for a in reply.attempts] for reply in replies]
    assert ("local", "circuit_open") in {pair for attempts in outcomes for pair in attempts}
