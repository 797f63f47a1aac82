"""Timeouts, retries, circuit breakers and the fallback order, with the real SDK clients against the
local wire server (requests counted on the server)."""

from __future__ import annotations

import asyncio

import pytest
from llm_wire import ProviderWire, Reply

from libs.errors import DeadlineExceeded, Unavailable
from services.llm.gateway import Gateway, build_gateway, configured_providers
from services.llm.providers.provider import GenerationRequest, Passage
from services.llm.settings import LlmSettings

CHAT = "/v1/chat/completions"
MESSAGES = "/v1/messages"
REQUEST = GenerationRequest(
    "What does aspirin inhibit?", (Passage("Aspirin inhibits COX-1.", "doc-7"),), max_tokens=32)


def settings_for(wire: ProviderWire, **overrides) -> LlmSettings:
    """OpenAI and Anthropic at the wire server, tiny backoff, generous per-call timeout."""
    values = dict(
        openai_api_key="sk-test", openai_base_url=f"{wire.url}/v1", openai_model="gpt-test",
        anthropic_api_key="sk-ant-test", anthropic_base_url=wire.url,
        anthropic_model="claude-test", fallback_order=["openai", "anthropic"],
        offline_enabled=False, timeout_s=5.0, max_retries=2, backoff_initial_s=0.001,
        backoff_max_s=0.004, breaker_threshold=5, breaker_ttl_s=30.0,
    )
    values.update(overrides)
    return LlmSettings(**values)


@pytest.fixture
async def make_gateway(wire: ProviderWire):
    built: list[Gateway] = []

    def make(**overrides) -> Gateway:
        gateway = build_gateway(settings_for(wire, **overrides))
        built.append(gateway)
        return gateway

    yield make
    for gateway in built:
        await gateway.aclose()


def outcomes(answer_or_attempts) -> list[tuple[str, str, int]]:
    attempts = getattr(answer_or_attempts, "attempts", answer_or_attempts)
    return [(a.provider, a.outcome, a.retries) for a in attempts]


async def test_each_provider_answers_first_when_it_is_first(wire, make_gateway):
    for order, path in ((["openai", "anthropic"], CHAT), (["anthropic", "openai"], MESSAGES)):
        wire.requests.clear()
        answer = await make_gateway(fallback_order=order).generate(REQUEST, timeout_s=None)
        assert answer.provider == order[0]
        assert outcomes(answer) == [(order[0], "ok", 0)]
        assert answer.generation.model in ("gpt-test", "claude-test")
        assert [seen for seen, _ in wire.requests] == [path]


async def test_rate_limited_then_success_retries_and_records_it(wire, make_gateway):
    wire.script = [Reply(status=429)]
    answer = await make_gateway().generate(REQUEST, timeout_s=None)
    assert answer.provider == "openai"
    assert outcomes(answer) == [("openai", "ok", 1)]
    assert wire.count(CHAT) == 2


async def test_server_errors_exhaust_retries_then_fall_back(wire, make_gateway):
    wire.script = [Reply(status=500), Reply(status=503), Reply(status=502)]
    answer = await make_gateway().generate(REQUEST, timeout_s=None)
    assert answer.provider == "anthropic"
    assert outcomes(answer) == [("openai", "server_error", 2), ("anthropic", "ok", 0)]
    assert (wire.count(CHAT), wire.count(MESSAGES)) == (3, 1)
    assert answer.attempts[0].latency_ms > 0


async def test_bad_request_is_not_retried(wire, make_gateway):
    wire.script = [Reply(status=400)]
    answer = await make_gateway().generate(REQUEST, timeout_s=None)
    assert outcomes(answer) == [("openai", "error", 0), ("anthropic", "ok", 0)]
    assert wire.count(CHAT) == 1


async def test_unauthorized_is_not_retried(wire, make_gateway):
    wire.script = [Reply(status=401)]
    answer = await make_gateway(fallback_order=["anthropic", "openai"]).generate(REQUEST, None)
    assert outcomes(answer) == [("anthropic", "error", 0), ("openai", "ok", 0)]
    assert wire.count(MESSAGES) == 1


async def test_timeout_then_fallback(wire, make_gateway):
    wire.script = [Reply(delay_s=1.0), Reply(delay_s=1.0)]
    gateway = make_gateway(timeout_s=0.2, max_retries=1, fallback_order=["openai"],
                           offline_enabled=True)
    answer = await gateway.generate(REQUEST, timeout_s=None)
    assert outcomes(answer) == [("openai", "timeout", 1), ("offline", "ok", 0)]
    assert answer.generation.offline and answer.provider == "offline"
    assert wire.count(CHAT) == 2


async def test_breaker_opens_after_threshold_and_skips_the_provider(wire, make_gateway):
    wire.default = Reply(status=500)
    gateway = make_gateway(max_retries=0, breaker_threshold=3, fallback_order=["openai"],
                           offline_enabled=True)
    for _ in range(3):
        answer = await gateway.generate(REQUEST, timeout_s=None)
        assert outcomes(answer) == [("openai", "server_error", 0), ("offline", "ok", 0)]
    assert await gateway.providers[0].circuit_state() == "opened"

    answer = await gateway.generate(REQUEST, timeout_s=None)
    assert outcomes(answer) == [("openai", "circuit_open", 0), ("offline", "ok", 0)]
    assert wire.count(CHAT) == 3, "an open circuit sends no request"


async def test_breaker_opening_during_retries_stops_them(wire, make_gateway):
    wire.default = Reply(status=503)
    gateway = make_gateway(max_retries=5, breaker_threshold=2)
    with pytest.raises(Unavailable):
        await gateway.generate(REQUEST, timeout_s=None)
    # Two failed calls open openai's circuit; its third try is refused without a request.
    assert wire.count(CHAT) == 2
    assert wire.count(MESSAGES) == 2


async def test_half_open_after_ttl_lets_a_trial_call_through_and_closes(wire, make_gateway):
    wire.script = [Reply(status=500), Reply(status=500)]
    gateway = make_gateway(max_retries=0, breaker_threshold=2, breaker_ttl_s=0.5,
                           fallback_order=["openai"], offline_enabled=True)
    for _ in range(2):
        await gateway.generate(REQUEST, timeout_s=None)
    skipped = await gateway.generate(REQUEST, timeout_s=None)
    assert outcomes(skipped)[0] == ("openai", "circuit_open", 0)
    assert wire.count(CHAT) == 2

    await asyncio.sleep(0.6)  # past the ttl: the next call is a trial call
    answer = await gateway.generate(REQUEST, timeout_s=None)
    assert outcomes(answer) == [("openai", "ok", 0)]
    assert wire.count(CHAT) == 3
    assert await gateway.providers[0].circuit_state() == "closed"


async def test_failed_trial_call_opens_the_circuit_again(wire, make_gateway):
    wire.default = Reply(status=500)
    gateway = make_gateway(max_retries=0, breaker_threshold=1, breaker_ttl_s=0.5,
                           fallback_order=["openai"], offline_enabled=True)
    await gateway.generate(REQUEST, timeout_s=None)
    await asyncio.sleep(0.6)
    trial = await gateway.generate(REQUEST, timeout_s=None)
    assert outcomes(trial)[0] == ("openai", "server_error", 0)
    assert wire.count(CHAT) == 2
    again = await gateway.generate(REQUEST, timeout_s=None)
    assert outcomes(again)[0] == ("openai", "circuit_open", 0)
    assert wire.count(CHAT) == 2


async def test_rejected_requests_do_not_open_the_circuit(wire, make_gateway):
    wire.default = Reply(status=400)
    gateway = make_gateway(max_retries=0, breaker_threshold=2, fallback_order=["openai"],
                           offline_enabled=True)
    for _ in range(3):
        answer = await gateway.generate(REQUEST, timeout_s=None)
        assert outcomes(answer)[0] == ("openai", "error", 0)
    assert wire.count(CHAT) == 3
    assert await gateway.providers[0].circuit_state() == "closed"


async def test_all_providers_down_is_unavailable(wire, make_gateway):
    wire.default = Reply(status=500)
    with pytest.raises(Unavailable) as caught:
        await make_gateway(max_retries=1).generate(REQUEST, timeout_s=None)
    assert "openai: server_error" in caught.value.message
    assert "anthropic: server_error" in caught.value.message


async def test_the_callers_deadline_bounds_every_try(wire, make_gateway):
    # Per-call timeout 5 s, but only 0.3 s of deadline: the first try is cut at the deadline,
    # no retry starts after it, no other provider is tried, and the offline provider is not
    # reached either.
    wire.default = Reply(delay_s=1.0)
    gateway = make_gateway(timeout_s=5.0, max_retries=3, offline_enabled=True)
    with pytest.raises(DeadlineExceeded) as caught:
        await gateway.generate(REQUEST, timeout_s=0.3)
    assert "openai: timeout" in caught.value.message
    assert (wire.count(CHAT), wire.count(MESSAGES)) == (1, 0)


def test_unconfigured_providers_are_skipped_and_offline_comes_last(wire):
    names = [p.name for p in configured_providers(LlmSettings(
        anthropic_api_key="k", fallback_order=["offline", "openai", "local", "anthropic"]))]
    assert names == ["anthropic", "offline"]
    names = [p.name for p in configured_providers(LlmSettings(
        openai_api_key="k", local_base_url=f"{wire.url}/v1", offline_enabled=False))]
    assert names == ["openai", "local"]


async def test_nothing_configured_and_offline_disabled_is_not_ready_and_unavailable():
    gateway = build_gateway(LlmSettings(offline_enabled=False))
    assert "no LLM provider is configured" in await gateway.readiness()
    with pytest.raises(Unavailable, match="no LLM provider is configured"):
        await gateway.generate(REQUEST, timeout_s=None)


async def test_readiness_follows_the_circuits(wire, make_gateway):
    wire.default = Reply(status=500)
    gateway = make_gateway(max_retries=0, breaker_threshold=1, breaker_ttl_s=0.5)
    assert await gateway.readiness() is None
    with pytest.raises(Unavailable):
        await gateway.generate(REQUEST, timeout_s=None)
    assert await gateway.readiness() == \
        "every LLM provider's circuit is open: openai, anthropic"
    requests = len(wire.requests)
    await asyncio.sleep(0.6)  # past the ttl: a trial call would be let through
    assert await gateway.readiness() is None
    assert len(wire.requests) == requests, "readiness must not call a provider"


async def test_offline_provider_keeps_the_gateway_ready(wire, make_gateway):
    wire.default = Reply(status=500)
    gateway = make_gateway(max_retries=0, breaker_threshold=1, offline_enabled=True)
    await gateway.generate(REQUEST, timeout_s=None)
    assert await gateway.providers[0].circuit_state() == "opened"
    assert await gateway.readiness() is None


def test_secrets_are_masked_when_printed():
    settings = LlmSettings(openai_api_key="sk-very-secret", anthropic_api_key="sk-ant-x")
    assert "sk-very-secret" not in repr(settings) and "sk-very-secret" not in str(
        settings.masked())
    assert settings.openai_api_key.get_secret_value() == "sk-very-secret"
