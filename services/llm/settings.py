"""Settings of the LLM gateway: providers, their endpoints and keys, and the resilience knobs.

Read once from `LLM_*` environment variables in `main()` and passed down. A provider is used only
when it is configured: "openai" needs `LLM_OPENAI_API_KEY`, "anthropic" needs
`LLM_ANTHROPIC_API_KEY`, "local" (an OpenAI-compatible server such as LM Studio, Ollama or vLLM)
needs `LLM_LOCAL_BASE_URL`. The offline provider needs nothing and answers last unless
`LLM_OFFLINE_ENABLED=false`.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import SecretStr, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from libs.settings import ServiceSettings

ProviderName = Literal["openai", "anthropic", "local", "offline"]


class LlmSettings(ServiceSettings):
    """The gateway's one frozen settings object (env prefix `LLM_`); secrets are `SecretStr`."""

    model_config = SettingsConfigDict(
        env_prefix="LLM_", frozen=True, extra="ignore", populate_by_name=True
    )

    port: int = 50055

    openai_api_key: SecretStr | None = None
    """OpenAI API key; set, it enables the "openai" provider. Never logged."""
    openai_base_url: str = "https://api.openai.com/v1"
    """Base URL of the OpenAI API (another OpenAI-compatible service's URL works too)."""
    openai_model: str = "gpt-4o-mini"
    """Model asked for when a request names none, on the OpenAI provider."""

    anthropic_api_key: SecretStr | None = None
    """Anthropic API key; set, it enables the "anthropic" provider. Never logged."""
    anthropic_base_url: str = "https://api.anthropic.com"
    """Base URL of the Anthropic API."""
    anthropic_model: str = "claude-haiku-4-5"
    """Model asked for when a request names none, on the Anthropic provider."""

    local_base_url: str | None = None
    """OpenAI-compatible endpoint, e.g. http://127.0.0.1:11434/v1 (Ollama), :1234/v1 (LM Studio)."""
    local_api_key: SecretStr | None = None
    """Most local servers ignore the key; set it when yours checks one (vLLM `--api-key`)."""
    local_model: str = "llama3.2"
    """Model asked for when a request names none, on the local provider (as the server names it)."""

    fallback_order: list[ProviderName] = ["openai", "anthropic", "local", "offline"]
    """Providers in the order they are tried; unconfigured ones are skipped at start-up."""
    offline_enabled: bool = True
    """Whether the offline extractive provider answers when every other provider failed."""

    prices: dict[str, tuple[float, float]] = {}
    """US dollars per million tokens, `{model: [prompt, completion]}`, as the model is named in
    the provider's answer (e.g. `LLM_PRICES='{"gpt-4o-mini": [0.15, 0.6]}'`). A generation's cost
    is its reported usage times these prices; a model without a price has no cost (the response
    leaves `cost_usd` unset). Empty by default: prices change, so they are the operator's to set."""

    timeout_s: float = 30.0
    """Per call to a provider, in seconds; the caller's deadline shortens it."""
    max_retries: int = 2
    """Retries after the first call, on retryable errors only (429, 5xx, timeouts, connection)."""
    backoff_initial_s: float = 0.5
    """Window of the first backoff in seconds; it doubles per retry (full jitter)."""
    backoff_max_s: float = 8.0
    """Largest backoff window in seconds."""
    breaker_threshold: int = 5
    """Consecutive failed calls that open a provider's circuit."""
    breaker_ttl_s: float = 30.0
    """Seconds a circuit stays open before trial calls go through (half-open)."""

    @field_validator("fallback_order")
    @classmethod
    def _distinct(cls, order: list[ProviderName]) -> list[ProviderName]:
        if len(set(order)) != len(order):
            raise ValueError(f"fallback_order names a provider twice: {order}")
        return order

    @field_validator("prices")
    @classmethod
    def _prices(cls, prices: dict[str, tuple[float, float]]) -> dict[str, tuple[float, float]]:
        for model, pair in prices.items():
            if not all(math.isfinite(price) and price >= 0 for price in pair):
                raise ValueError(f"prices of {model!r} must be finite and >= 0, got {pair}")
        return prices

    @model_validator(mode="after")
    def _positive(self) -> LlmSettings:
        if self.timeout_s <= 0 or self.breaker_ttl_s <= 0:
            raise ValueError("timeout_s and breaker_ttl_s must be positive")
        if self.max_retries < 0 or self.breaker_threshold < 1:
            raise ValueError("max_retries must be >= 0 and breaker_threshold >= 1")
        if self.backoff_initial_s < 0 or self.backoff_max_s < self.backoff_initial_s:
            raise ValueError("need 0 <= backoff_initial_s <= backoff_max_s")
        return self
