"""Every Prometheus metric of the llm (the shared RPC metrics are in `libs.metrics`).

Labels are the provider's name ("openai", "offline", ...) and an outcome word; never a key, a
prompt or a model response.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge

CALLS = Counter("mesh_llm_calls_total",
                "Calls of each provider (after retries), by outcome (ok or the error's kind).",
                ["provider", "outcome"])
TOKENS = Counter("mesh_llm_tokens_total", "Tokens the providers reported, by direction.",
                 ["provider", "direction"])
RETRIES = Counter("mesh_llm_retries_total", "Retried attempts of a provider call.", ["provider"])
CIRCUIT_STATE = Gauge(
    "mesh_llm_circuit_state",
    "1 for each provider's current circuit-breaker state (closed, half-opened, opened), else 0.",
    ["provider", "state"])
BREAKER_STATES = ("closed", "half-opened", "opened")


def set_circuit_state(provider: str, state: str) -> None:
    """Marks `state` as the provider's breaker state (one of BREAKER_STATES)."""
    for name in BREAKER_STATES:
        CIRCUIT_STATE.labels(provider, name).set(1.0 if name == state else 0.0)
