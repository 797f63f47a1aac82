"""The real OpenAI and Anthropic SDK clients against a local server speaking their wire formats:
request shape, parsed answers and usage, and how each HTTP failure is classified."""

from __future__ import annotations

import pytest
from llm_wire import ProviderWire, Reply

from services.llm.providers.anthropic_provider import AnthropicProvider
from services.llm.providers.errors import ProviderError, RequestRejected, retry_after_s
from services.llm.providers.openai_provider import OpenAIProvider
from services.llm.providers.provider import GenerationRequest, Passage

REQUEST = GenerationRequest(
    prompt="What does aspirin inhibit?",
    context=(Passage("Aspirin irreversibly inhibits COX-1.", "doc-7", "Aspirin"),
             Passage("Ibuprofen is reversible.", "doc-9")),
    max_tokens=64,
    temperature=0.3,
)


@pytest.fixture
async def make_provider(wire: ProviderWire):
    """Builds "openai", "local" or "anthropic" against the wire server; closes them afterwards."""
    made = []

    def make(which: str):
        if which == "anthropic":
            provider = AnthropicProvider("anthropic", "sk-ant-test", wire.url, "claude-test")
        elif which == "local":
            provider = OpenAIProvider("local", "none", f"{wire.url}/v1", "llama-test",
                                      token_limit_field="max_tokens")
        else:
            provider = OpenAIProvider("openai", "sk-test", f"{wire.url}/v1", "gpt-test")
        made.append(provider)
        return provider

    yield make
    for provider in made:
        await provider.aclose()


@pytest.fixture
def openai_provider(make_provider):
    return make_provider("openai")


@pytest.fixture
def local_provider(make_provider):
    return make_provider("local")


@pytest.fixture
def anthropic_provider(make_provider):
    return make_provider("anthropic")


async def test_openai_answers_with_usage_and_a_grounded_prompt(wire, openai_provider):
    wire.default = Reply(text="COX-1 [1].")
    generation = await openai_provider.generate(REQUEST, timeout_s=5.0)
    assert (generation.text, generation.model) == ("COX-1 [1].", "gpt-test")
    assert (generation.prompt_tokens, generation.completion_tokens) == (42, 7)
    assert generation.offline is False
    path, body = wire.requests[0]
    assert path == "/v1/chat/completions"
    assert body["model"] == "gpt-test"
    assert body["max_completion_tokens"] == 64 and "max_tokens" not in body
    assert body["temperature"] == 0.3
    system, user = body["messages"]
    assert system["role"] == "system" and "cite" in system["content"].lower()
    assert "[1] (doc-7 - Aspirin)\nAspirin irreversibly inhibits COX-1." in user["content"]
    assert "[2] (doc-9)\nIbuprofen is reversible." in user["content"]
    assert user["content"].endswith("Question: What does aspirin inhibit?")


async def test_local_server_gets_max_tokens(wire, local_provider):
    generation = await local_provider.generate(REQUEST, timeout_s=5.0)
    assert generation.model == "llama-test"
    body = wire.requests[0][1]
    assert body["max_tokens"] == 64 and "max_completion_tokens" not in body


async def test_anthropic_answers_with_usage_and_a_system_prompt(wire, anthropic_provider):
    wire.default = Reply(text="It inhibits COX-1 [1].")
    generation = await anthropic_provider.generate(REQUEST, timeout_s=5.0)
    assert (generation.text, generation.model) == ("It inhibits COX-1 [1].", "claude-test")
    assert (generation.prompt_tokens, generation.completion_tokens) == (40, 6)
    path, body = wire.requests[0]
    assert path == "/v1/messages"
    assert body["max_tokens"] == 64 and body["model"] == "claude-test"
    assert "cite" in body["system"].lower()
    assert body["messages"][0]["role"] == "user"
    assert "[1] (doc-7 - Aspirin)" in body["messages"][0]["content"]


@pytest.mark.parametrize(
    ("status", "outcome", "retryable"),
    [(429, "rate_limited", True), (500, "server_error", True), (503, "server_error", True),
     (401, "error", False), (404, "error", False)],
)
@pytest.mark.parametrize("which", ["openai", "anthropic"])
async def test_http_errors_are_classified(wire, make_provider, which, status, outcome, retryable):
    provider = make_provider(which)
    wire.script = [Reply(status=status)]
    with pytest.raises(ProviderError) as caught:
        await provider.generate(REQUEST, timeout_s=5.0)
    assert (caught.value.outcome, caught.value.retryable) == (outcome, retryable)
    assert len(wire.requests) == 1, "the SDK's own retries must be off"


async def test_anthropic_overloaded_529_is_a_retryable_server_error(wire, anthropic_provider):
    wire.script = [Reply(status=529)]
    with pytest.raises(ProviderError) as caught:
        await anthropic_provider.generate(REQUEST, timeout_s=5.0)
    assert (caught.value.outcome, caught.value.retryable) == ("server_error", True)


@pytest.mark.parametrize("which", ["openai", "anthropic"])
async def test_bad_request_is_rejected_not_retryable(wire, make_provider, which):
    wire.script = [Reply(status=400)]
    with pytest.raises(RequestRejected) as caught:
        await make_provider(which).generate(REQUEST, timeout_s=5.0)
    assert caught.value.retryable is False and caught.value.outcome == "error"


async def test_rate_limit_carries_retry_after(wire, openai_provider):
    wire.script = [Reply(status=429, headers={"retry-after-ms": "250"})]
    with pytest.raises(ProviderError) as caught:
        await openai_provider.generate(REQUEST, timeout_s=5.0)
    assert caught.value.retry_after_s == pytest.approx(0.25)


@pytest.mark.parametrize("which", ["openai", "anthropic"])
async def test_sdk_timeout_is_a_retryable_timeout(wire, make_provider, which):
    wire.script = [Reply(delay_s=0.5)]
    with pytest.raises(ProviderError) as caught:
        await make_provider(which).generate(REQUEST, timeout_s=0.05)
    assert (caught.value.outcome, caught.value.retryable) == ("timeout", True)


async def test_connection_refused_is_a_retryable_error():
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    provider = OpenAIProvider("local", "none", f"http://127.0.0.1:{port}/v1", "m")
    try:
        with pytest.raises(ProviderError) as caught:
            await provider.generate(REQUEST, timeout_s=2.0)
    finally:
        await provider.aclose()
    assert (caught.value.outcome, caught.value.retryable) == ("error", True)


def test_retry_after_headers():
    assert retry_after_s({"retry-after": "2"}) == 2.0
    assert retry_after_s({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert retry_after_s({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) is None
    assert retry_after_s({}) is None
