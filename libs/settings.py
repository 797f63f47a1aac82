"""The settings base every service extends: one frozen pydantic-settings object per service.

Each service subclasses `ServiceSettings` in `services/<name>/settings.py` with its own env prefix
(`MCTS_`, `NEURAL_`, `RETRIEVAL_`, `LLM_`, `ORCHESTRATOR_`). The object is read from the environment
once, in `main()`, and passed down; nothing below `main()` reads `os.environ`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import AliasChoices, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

MIN_KEEPALIVE_TIME_S = 1.0
"""Shortest keepalive interval, in seconds: gRPC core's client sends at most one ping a second
on a connection with calls (chttp2's `NextAllowedPingInterval`), so a shorter one would not be
what the channel does. (Here, not in `libs.channels`, so that a service's settings never import
grpc: the mcts search core imports its settings, and its import contract forbids grpc.)"""
DEFAULT_KEEPALIVE_TIME_S = 1.0
"""Seconds between two keepalive pings on a mesh connection (see `libs.channels.Keepalive`)."""
DEFAULT_KEEPALIVE_TIMEOUT_S = 2.0
"""Seconds a keepalive ping may wait for its acknowledgement before the connection is closed
(see `libs.channels.Keepalive`)."""


class ServiceSettings(BaseSettings):
    """Fields every gRPC service has."""

    model_config = SettingsConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    host: str = "127.0.0.1"
    """Interface to bind; 127.0.0.1 on one machine, 0.0.0.0 in a container."""
    port: int = 0
    """gRPC port; 0 binds a free port (tests)."""
    drain_grace_s: float = 5.0
    """Seconds in-flight calls get to finish after SIGTERM."""
    health_interval_s: float = Field(default=1.0, gt=0)
    """Seconds between two evaluations of the service's readiness probe (the orchestrator also
    checks each dependency's health this often)."""
    health_timeout_s: float = Field(default=1.0, gt=0)
    """Seconds a readiness probe, or the orchestrator's health check of a dependency, may take
    before it counts as failed (a frozen dependency is reported within interval + timeout)."""
    otel_exporter_otlp_endpoint: str | None = Field(
        default=None,
        validation_alias=AliasChoices("OTEL_EXPORTER_OTLP_ENDPOINT", "otel_exporter_otlp_endpoint"),
    )
    """OTLP/gRPC endpoint for traces (Jaeger's 4317), read from the standard variable
    `OTEL_EXPORTER_OTLP_ENDPOINT` for every service; unset means spans are not exported."""
    trace_sample_ratio: float = Field(default=1.0, ge=0.0, le=1.0)
    """Share of new traces recorded and exported (parent-based: a call whose caller was sampled is
    always recorded)."""
    metrics_port: int = Field(default=-1, ge=-1, le=65535)
    """Prometheus metrics port (`/metrics`): -1 off (no port, no RPC metrics), 0 a free port."""
    log_format: Literal["json", "text"] = "json"
    """Log lines: one JSON object per line (time, level, service, logger, message, trace_id,
    span_id), or plain text for a terminal."""

    def masked(self) -> dict[str, object]:
        """The settings as a dict with every secret masked, for the start-up log line."""
        out: dict[str, object] = {}
        for name, value in self.model_dump().items():
            out[name] = "**********" if isinstance(getattr(self, name), SecretStr) else value
        return out


class ChannelSettings(BaseSettings):
    """Fields of a service that calls other mesh services (the orchestrator, mcts): the HTTP/2
    keepalive of its channels (`libs.channels.Keepalive`, which says why these defaults). Mixed
    into the service's settings class beside `ServiceSettings`, under the service's env prefix
    (`ORCHESTRATOR_KEEPALIVE_TIME_S`, `MCTS_KEEPALIVE_TIME_S`, ...)."""

    model_config = SettingsConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    keepalive_time_s: float = Field(default=DEFAULT_KEEPALIVE_TIME_S, ge=MIN_KEEPALIVE_TIME_S)
    """Seconds between two keepalive pings on each connection to another service, >= 1 (gRPC
    core's floor; every mesh server accepts pings this often)."""
    keepalive_timeout_s: float = Field(default=DEFAULT_KEEPALIVE_TIMEOUT_S, gt=0)
    """Seconds a keepalive ping may go unanswered before the connection is closed and its calls
    fail UNAVAILABLE: a frozen dependency is found within keepalive_time_s + keepalive_timeout_s."""
