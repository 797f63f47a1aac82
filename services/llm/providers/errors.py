"""Provider failures, classified once: an outcome word for ProviderAttempt, and whether a retry
can help.

Retryable: 408, 409, 429, 5xx (Anthropic's 529 "overloaded" included), timeouts and connection
errors, as in the providers' own retry rules. Not retryable: the other 4xx (400, 401, 403, 404,
422), since the same request would fail the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

Outcome = Literal["ok", "timeout", "rate_limited", "server_error", "circuit_open", "error"]

_RETRYABLE_4XX = frozenset({408, 409, 429})
# The request itself is at fault: this says nothing about the provider's health, so it does not
# count towards opening the circuit.
_REQUEST_FAULT = frozenset({400, 413, 422})


class ProviderError(Exception):
    """A provider call failed. `outcome` is the ProviderAttempt word; `retryable` whether to retry;
    `retry_after_s` the wait the provider asked for (Retry-After), if any."""

    def __init__(
        self,
        provider: str,
        outcome: Outcome,
        message: str,
        retryable: bool,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(f"{provider}: {outcome}: {message}")
        self.provider = provider
        self.outcome: Outcome = outcome
        self.retryable = retryable
        self.retry_after_s = retry_after_s


class RequestRejected(ProviderError):
    """The provider refused this request as malformed (400, 413, 422); the provider is fine."""


class CircuitOpen(ProviderError):
    """The provider's circuit is open: no call was made."""

    def __init__(self, provider: str, message: str) -> None:
        super().__init__(provider, "circuit_open", message, retryable=False)


def status_error(
    provider: str, status: int, message: str, headers: Mapping[str, str] | None = None
) -> ProviderError:
    """The ProviderError for an HTTP error status from a provider."""
    retry_after = retry_after_s(headers or {})
    if status in _REQUEST_FAULT:
        return RequestRejected(provider, "error", f"HTTP {status}: {message}", retryable=False)
    if status == 429:
        return ProviderError(provider, "rate_limited", message, True, retry_after)
    if status == 408:
        return ProviderError(provider, "timeout", f"HTTP 408: {message}", True, retry_after)
    if status >= 500:
        return ProviderError(provider, "server_error", f"HTTP {status}: {message}", True,
                             retry_after)
    return ProviderError(provider, "error", f"HTTP {status}: {message}",
                         status in _RETRYABLE_4XX, retry_after)


def retry_after_s(headers: Mapping[str, str]) -> float | None:
    """Seconds from `retry-after-ms` or `retry-after` (delta-seconds form); None when absent or an
    HTTP date (which we do not honour)."""
    for name, scale in (("retry-after-ms", 1e-3), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) * scale
        except ValueError:
            continue
        if seconds >= 0:
            return seconds
    return None
