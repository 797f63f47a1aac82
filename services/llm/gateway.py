"""The gateway: providers tried in the fallback order, each behind its resilience layer, within the
caller's deadline."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from libs.errors import DeadlineExceeded, Unavailable
from services.llm import metrics
from services.llm.providers.errors import ProviderError
from services.llm.providers.offline_provider import OfflineProvider
from services.llm.providers.provider import Generation, GenerationRequest, Provider
from services.llm.resilience import (
    Attempt,
    OpenedStream,
    ResilientProvider,
    RetryPolicy,
    new_breakers,
)
from services.llm.settings import LlmSettings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Answer:
    """The generation of the provider that answered, its name, and every attempt in order."""

    generation: Generation
    provider: str
    attempts: tuple[Attempt, ...]


NO_PROVIDER = ("no LLM provider is configured and LLM_OFFLINE_ENABLED is false: set a key or a "
               "local base URL, or enable the offline provider")


class Gateway:
    """Tries `providers` in order until one answers.

    Args:
        providers: in fallback order, each with its own timeout, retries and circuit; none means
            the gateway runs but cannot answer (NOT_SERVING, every call UNAVAILABLE).
    """

    def __init__(self, providers: list[ResilientProvider]) -> None:
        self.providers = providers

    async def readiness(self) -> str | None:
        """None while some provider would take a call now; else why none would: none is
        configured, or every provider's circuit is open (its ttl not yet passed). Sends nothing
        to any provider (it reads the circuits only), so it is cheap enough to poll."""
        if not self.providers:
            return NO_PROVIDER
        if any([await provider.accepts_calls() for provider in self.providers]):
            return None
        return "every LLM provider's circuit is open: " + ", ".join(self.order)

    @property
    def order(self) -> list[str]:
        return [provider.name for provider in self.providers]

    async def generate(self, request: GenerationRequest, timeout_s: float | None) -> Answer:
        """The first provider's answer in the fallback order.

        Args:
            request: prompt, passages and sampling limits (validated by the caller).
            timeout_s: seconds left of the caller's deadline; None means no deadline. Each try
                gets at most what is left.
        Raises:
            DeadlineExceeded: the deadline passed before any provider answered.
            Unavailable: every provider failed or has an open circuit (the message lists them).
        """
        if not self.providers:
            raise Unavailable(NO_PROVIDER)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        attempts: list[Attempt] = []
        for provider in self.providers:
            if deadline is not None and time.monotonic() >= deadline:
                break
            attempt = await provider.call(request, deadline)
            attempts.append(attempt)
            await _observe(provider, attempt)
            if attempt.generation is not None:
                return Answer(attempt.generation, provider.name, tuple(attempts))
            log.warning("provider %s failed: %s", provider.name, attempt.error)
        tried = "; ".join(f"{a.provider}: {a.outcome}" for a in attempts) or "none tried"
        if deadline is not None and time.monotonic() >= deadline:
            raise DeadlineExceeded(f"the deadline passed before any provider answered ({tried})")
        raise Unavailable(f"every LLM provider failed ({tried})")

    async def stream(self, request: GenerationRequest,
                     timeout_s: float | None) -> AsyncIterator[str | Answer]:
        """The first provider's answer in the fallback order, streamed: text deltas, then the
        Answer (its generation's text the deltas joined, its usage the provider's streamed
        usage), last. Retries, breakers and fallback apply until a provider's first item; after
        it a failure ends the stream (no other provider is tried) and counts against that
        provider's circuit. Closing the iterator (or cancelling its consumer) closes the
        provider's stream.

        Raises:
            DeadlineExceeded: the deadline passed before any provider answered, or while one
                was streaming.
            Unavailable: every provider failed or has an open circuit (before the first delta),
                or the streaming provider failed (after it).
        """
        if not self.providers:
            raise Unavailable(NO_PROVIDER)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        attempts: list[Attempt] = []
        for provider in self.providers:
            if deadline is not None and time.monotonic() >= deadline:
                break
            attempt, opened = await provider.open_stream(request, deadline)
            attempts.append(attempt)
            if opened is not None:
                async for item in _follow(provider, opened, attempts, deadline):
                    yield item
                return
            await _observe(provider, attempt)
            log.warning("provider %s failed: %s", provider.name, attempt.error)
        tried = "; ".join(f"{a.provider}: {a.outcome}" for a in attempts) or "none tried"
        if deadline is not None and time.monotonic() >= deadline:
            raise DeadlineExceeded(f"the deadline passed before any provider answered ({tried})")
        raise Unavailable(f"every LLM provider failed ({tried})")

    async def publish_circuit_states(self) -> None:
        """Sets `mesh_llm_circuit_state` of every provider from its breaker (at start-up; after
        that each call updates its provider's)."""
        for provider in self.providers:
            metrics.set_circuit_state(provider.name, await provider.circuit_state())

    async def aclose(self) -> None:
        """Closes every provider's connections."""
        for provider in self.providers:
            await provider.provider.aclose()


async def _observe(provider: ResilientProvider, attempt: Attempt) -> None:
    """Counts one provider call (its outcome, retries and tokens) and its breaker's state now."""
    metrics.CALLS.labels(provider.name, attempt.outcome).inc()
    if attempt.retries:
        metrics.RETRIES.labels(provider.name).inc(attempt.retries)
    if attempt.generation is not None:
        metrics.TOKENS.labels(provider.name, "prompt").inc(attempt.generation.prompt_tokens)
        metrics.TOKENS.labels(provider.name, "completion").inc(
            attempt.generation.completion_tokens)
    metrics.set_circuit_state(provider.name, await provider.circuit_state())


async def _follow(provider: ResilientProvider, opened: OpenedStream, attempts: list[Attempt],
                  deadline: float | None) -> AsyncIterator[str | Answer]:
    """The rest of a provider's opened stream (see `Gateway.stream`): its deltas, then the
    Answer; the last attempt's latency and the metrics cover the whole stream. A cancelled
    stream is counted as outcome "cancelled" with no tokens (the usage comes last)."""
    started, resumed = attempts[-1], time.monotonic()
    generation: Generation | None = None
    outcome = "cancelled"
    try:
        item = opened.first
        while True:
            if isinstance(item, Generation):
                generation = item
                break
            yield item
            try:
                async with asyncio.timeout_at(deadline):
                    item = await anext(opened.rest)
            except StopAsyncIteration:
                raise ProviderError(provider.name, "error", "the stream ended without its usage",
                                    retryable=False) from None
        outcome = "ok"
    except ProviderError as error:
        outcome = error.outcome
        await provider.record_failure(error)
        raise Unavailable(
            f"LLM provider {provider.name} failed while streaming: {error}") from error
    except TimeoutError as error:
        outcome = "timeout"
        raise DeadlineExceeded(
            f"the deadline passed while {provider.name} was streaming") from error
    finally:
        await opened.rest.aclose()
        elapsed_ms = started.latency_ms + (time.monotonic() - resumed) * 1e3
        attempts[-1] = dataclasses.replace(started, outcome=outcome, latency_ms=elapsed_ms,
                                           generation=generation)
        await _observe(provider, attempts[-1])
    yield Answer(generation, provider.name, tuple(attempts))


def configured_providers(settings: LlmSettings) -> list[Provider]:
    """The providers in `settings.fallback_order` that are configured, offline last if enabled.

    "openai" and "anthropic" need their API key, "local" its base URL; the others are skipped
    (logged once here, at start-up).
    """
    providers: list[Provider] = []
    for name in settings.fallback_order:
        provider = _configured_provider(name, settings)
        if provider is not None:
            providers.append(provider)
        elif name != "offline":
            log.info("LLM provider %s is not configured; skipped", name)
    if settings.offline_enabled:
        providers.append(OfflineProvider("offline"))
    return providers


def _configured_provider(name: str, settings: LlmSettings) -> Provider | None:
    """Provider `name` ("openai", "anthropic", "local") when its settings configure it, else None.
    A provider's SDK is imported only when it is configured: each costs about half a second of
    CPU at start-up, which a service without provider keys does not pay."""
    if name == "openai" and settings.openai_api_key is not None:
        from services.llm.providers.openai_provider import OpenAIProvider
        return OpenAIProvider("openai", settings.openai_api_key.get_secret_value(),
                              settings.openai_base_url, settings.openai_model)
    if name == "anthropic" and settings.anthropic_api_key is not None:
        from services.llm.providers.anthropic_provider import AnthropicProvider
        return AnthropicProvider("anthropic", settings.anthropic_api_key.get_secret_value(),
                                 settings.anthropic_base_url, settings.anthropic_model)
    if name == "local" and settings.local_base_url is not None:
        from services.llm.providers.openai_provider import OpenAIProvider
        # OpenAI-compatible servers that check no key still need the header to be present.
        key = settings.local_api_key.get_secret_value() if settings.local_api_key else "none"
        return OpenAIProvider("local", key, settings.local_base_url, settings.local_model,
                              token_limit_field="max_tokens")
    return None


def build_gateway(settings: LlmSettings) -> Gateway:
    """The gateway for `settings`: configured providers in order, one policy, one breaker each.

    With no provider configured and the offline provider disabled the gateway still starts (so
    that the misconfiguration shows as NOT_SERVING with its reason, not as a crash loop), and says
    so in the log.
    """
    providers = configured_providers(settings)
    if not providers:
        log.error("%s", NO_PROVIDER)
    policy = RetryPolicy(settings.timeout_s, settings.max_retries, settings.backoff_initial_s,
                         settings.backoff_max_s)
    breakers = new_breakers(settings.breaker_threshold, settings.breaker_ttl_s)
    return Gateway([ResilientProvider(provider, policy, breakers) for provider in providers])
