"""One provider behind a timeout, retries with exponential backoff and full jitter, and a circuit
breaker.

Order of the layers (as in resilience4j's Retry(CircuitBreaker(TimeLimiter(call)))): every try goes
through the breaker, so each failed HTTP call counts towards opening it, and a circuit that opens in
the middle of the retries stops them. Retries (tenacity) happen on retryable errors only (see
`providers.errors`), back off with "full jitter" (AWS architecture blog, "Exponential Backoff and
Jitter", 2015) or the provider's Retry-After when it asks for longer (capped at the longest
backoff), and never start a try that could not finish before the caller's deadline.

The breaker is purgatory's: closed until `threshold` consecutive failed calls, then open (calls fail
at once, no request is sent) for `ttl` seconds, then half-open: the next calls are trial calls; the
first that succeeds closes the circuit, the first that fails opens it again. A request the provider
rejected as malformed (400, 413, 422) shows the provider is up, so it counts as a success; so does a
cancelled call (the caller left; it says nothing about the provider).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from purgatory import AsyncCircuitBreakerFactory
from purgatory.domain.model import OPENED, OpenedState
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    wait_random_exponential,
)

from services.llm.providers.errors import (
    CircuitOpen,
    Outcome,
    ProviderError,
    RequestRejected,
)
from services.llm.providers.provider import Generation, GenerationRequest, Provider, StreamItem


@dataclass(frozen=True)
class RetryPolicy:
    """Per-provider limits: `timeout_s` per try (seconds), `max_retries` after the first try,
    backoff window `backoff_initial_s` doubling per retry up to `backoff_max_s` (seconds)."""

    timeout_s: float
    max_retries: int
    backoff_initial_s: float
    backoff_max_s: float


@dataclass(frozen=True)
class Attempt:
    """One provider tried for a request: how it ended, its wall-clock time in ms with retries
    included, the retries made, and the generation when `outcome` is "ok"."""

    provider: str
    outcome: Outcome
    latency_ms: float
    retries: int
    generation: Generation | None = None
    error: str = ""


@dataclass(frozen=True)
class OpenedStream:
    """A provider's stream that has produced its `first` item; `rest` yields the others. Whoever
    holds it must close `rest` (`aclose`), which closes the provider's stream."""

    first: StreamItem
    rest: AsyncIterator[StreamItem]


def _first_item(provider: Provider):
    """The operation that opens `provider`'s stream and reads its first item; a stream that
    fails or ends before it is closed before the error is raised."""
    async def first_item(request: GenerationRequest, timeout_s: float) -> OpenedStream:
        stream = provider.stream(request, timeout_s)
        try:
            return OpenedStream(await anext(stream), stream)
        except StopAsyncIteration as error:
            raise ProviderError(provider.name, "error", "the stream ended without an answer",
                                retryable=False) from error
        except BaseException:
            await stream.aclose()
            raise

    return first_item


def new_breakers(threshold: int, ttl_s: float) -> AsyncCircuitBreakerFactory:
    """The circuit breakers of one gateway, one circuit per provider name.

    Args:
        threshold: consecutive failed calls that open a circuit.
        ttl_s: seconds a circuit stays open before it lets trial calls through.
    """
    return AsyncCircuitBreakerFactory(
        default_threshold=threshold,
        default_ttl=ttl_s,
        exclude=[RequestRejected, asyncio.CancelledError],
    )


class ResilientProvider:
    """`provider` behind the policy's timeout and retries and its circuit in `breakers`."""

    def __init__(
        self, provider: Provider, policy: RetryPolicy, breakers: AsyncCircuitBreakerFactory
    ) -> None:
        self.provider = provider
        self.policy = policy
        self._breakers = breakers

    @property
    def name(self) -> str:
        return self.provider.name

    async def circuit_state(self) -> str:
        """"closed", "opened" or "half-opened" (purgatory's names); an open circuit whose ttl has
        passed still reads "opened" until the next call makes it half-open."""
        breaker = await self._breakers.get_breaker(self.name)
        return breaker.context.state

    async def accepts_calls(self) -> bool:
        """Whether a call now would reach the provider: the circuit is closed or half-open, or
        open with its ttl passed (the next call is a trial call)."""
        context = (await self._breakers.get_breaker(self.name)).context
        if context.state != OPENED:
            return True
        # purgatory stamps opened_at with time.time() and compares it the same way.
        return time.time() > (context.opened_at or 0.0) + context.ttl

    async def call(self, request: GenerationRequest, deadline: float | None) -> Attempt:
        """Generates with retries; never raises for a provider failure (the Attempt says how it
        ended).

        Args:
            request: what to generate.
            deadline: `time.monotonic()` value by which the call must end, or None for no
                deadline beyond the policy's per-try timeout.
        Returns:
            The Attempt: outcome "ok" with the generation, or the last failure's outcome.
        """
        attempt, generation = await self._with_retries(self.provider.generate, request, deadline)
        if generation is None:
            return attempt
        return dataclasses.replace(attempt, generation=generation)

    async def open_stream(self, request: GenerationRequest, deadline: float | None
                          ) -> tuple[Attempt, OpenedStream | None]:
        """Opens the provider's stream and waits for its first item, with the retries, the
        per-try timeout and the breaker of `call` (a stream that fails before its first item is
        a failed try). Never raises for a provider failure.

        Returns:
            The Attempt up to the first item (outcome "ok", or the last failure's), and the
            opened stream, None when it failed. The caller reads the rest of it and closes it.
        """
        return await self._with_retries(_first_item(self.provider), request, deadline)

    async def record_failure(self, error: ProviderError) -> None:
        """Counts `error` (a stream that failed after its first item) against the circuit, as a
        failed call would be."""
        breaker = await self._breakers.get_breaker(self.name)
        with contextlib.suppress(ProviderError, OpenedState):
            async with breaker:
                raise error

    async def _with_retries(self, operation, request: GenerationRequest,
                            deadline: float | None):
        """`operation(request, timeout_s)` with the policy's retries, each try through
        `_try_once`; (the Attempt, its result or None when it failed)."""
        started = time.monotonic()
        tries = 0
        last_call_error: ProviderError | None = None
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.policy.max_retries + 1) | _stop_at(deadline),
            wait=_backoff(self.policy),
            retry=retry_if_exception(lambda error: getattr(error, "retryable", False)),
            reraise=True,
        )
        try:
            async for try_state in retrying:
                with try_state:
                    tries += 1
                    try:
                        result = await self._try_once(operation, request, deadline)
                    except CircuitOpen:
                        raise
                    except ProviderError as error:
                        last_call_error = error
                        raise
        except CircuitOpen as error:
            # A circuit that opened during our own retries: the failure that opened it says more.
            shown = last_call_error or error
            return self._attempt(started, shown.outcome, tries, error=str(shown)), None
        except ProviderError as error:
            return self._attempt(started, error.outcome, tries, error=str(error)), None
        return self._attempt(started, "ok", tries), result

    async def _try_once(self, operation, request: GenerationRequest, deadline: float | None):
        timeout_s = self.policy.timeout_s
        if deadline is not None:
            timeout_s = min(timeout_s, deadline - time.monotonic())
            if timeout_s <= 0:
                raise ProviderError(self.name, "timeout", "the caller's deadline has passed",
                                    retryable=False)
        breaker = await self._breakers.get_breaker(self.name)
        try:
            async with breaker:
                try:
                    async with asyncio.timeout(timeout_s):
                        return await operation(request, timeout_s)
                except TimeoutError as error:
                    raise ProviderError(self.name, "timeout", f"no answer in {timeout_s:.3f} s",
                                        retryable=True) from error
        except OpenedState as error:
            raise CircuitOpen(self.name, str(error)) from error

    def _attempt(self, started: float, outcome: Outcome, tries: int,
                 generation: Generation | None = None, error: str = "") -> Attempt:
        return Attempt(
            provider=self.name,
            outcome=outcome,
            latency_ms=(time.monotonic() - started) * 1e3,
            retries=max(tries - 1, 0),
            generation=generation,
            error=error,
        )


def _backoff(policy: RetryPolicy):
    jitter = wait_random_exponential(multiplier=policy.backoff_initial_s, max=policy.backoff_max_s)

    def wait(state: RetryCallState) -> float:
        error = state.outcome.exception() if state.outcome else None
        asked = getattr(error, "retry_after_s", None) or 0.0
        # Honour a longer Retry-After, but never past the longest backoff: falling back to the
        # next provider beats waiting on this one.
        return min(max(jitter(state), asked), policy.backoff_max_s)

    return wait


def _stop_at(deadline: float | None):
    def stop(state: RetryCallState) -> bool:
        return deadline is not None and time.monotonic() + state.upcoming_sleep >= deadline

    return stop
