"""The settings base every service extends: one frozen pydantic-settings object per service.

Each service subclasses `ServiceSettings` in `services/<name>/settings.py` with its own env prefix
(`MCTS_`, `NEURAL_`, `RETRIEVAL_`, `LLM_`, `ORCHESTRATOR_`). The object is read from the environment
once, in `main()`, and passed down; nothing below `main()` reads `os.environ`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from libs.redaction import redact_url_credentials

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


@dataclass(frozen=True)
class MeshTls:
    """PEM bytes of a mesh TLS identity: the CA that signs every mesh certificate, this service's
    certificate chain and private key; `server_name` overrides the name a client checks in the
    server's certificate (None: the target's host)."""

    ca: bytes
    cert: bytes
    key: bytes
    server_name: str | None = None


@dataclass(frozen=True)
class MeshAuth:
    """How a service proves itself to the other mesh services and checks who calls it
    (`libs.mesh_auth`): mutual TLS with `tls`, the shared `token` in every call's metadata, both,
    or neither (None, None: no authentication, only for loopback)."""

    token: str | None = None
    tls: MeshTls | None = None

    @property
    def enabled(self) -> bool:
        return self.token is not None or self.tls is not None


def _read(setting: str, path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as error:
        raise ValueError(f"{setting}: cannot read {path}: {error.strerror or error}") from None


class MeshAuthSettings(BaseSettings):
    """How the backends authenticate each other's calls (the trust boundary of the mesh), shared
    by every service under its own prefix (`MCTS_MESH_TOKEN`, `ORCHESTRATOR_MESH_TLS_CA_FILE`,
    ...). A backend (mcts, neural, retrieval, llm) refuses every call but health without
    the credential; the orchestrator presents it on its channels (its public API uses API keys).

    - Mutual TLS: `mesh_tls_ca_file`, `mesh_tls_cert_file` and `mesh_tls_key_file` (PEM) all set:
      servers require a client certificate signed by that CA, channels present theirs.
    - Else a shared token: `mesh_token` (or `mesh_token_file`), sent as `x-mesh-token` metadata;
      `mcts-mesh up` generates one per run, Kubernetes reads it from the Secret `mesh-token`.
    - Neither: a backend serves without authentication only on a loopback address (with a
      warning), or where `mesh_allow_unauthenticated` says so; else it refuses to start.
    """

    model_config = SettingsConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    mesh_token: SecretStr | None = None
    """The shared mesh token (any string of at least 16 characters)."""
    mesh_token_file: str | None = None
    """A file holding the mesh token (surrounding whitespace ignored); `mesh_token` wins."""
    mesh_tls_ca_file: str | None = None
    """PEM file of the CA that signs every mesh certificate (servers check clients against it,
    clients check servers)."""
    mesh_tls_cert_file: str | None = None
    """PEM file of this service's certificate chain (its server and client certificate)."""
    mesh_tls_key_file: str | None = None
    """PEM file of this service's private key."""
    mesh_tls_server_name: str | None = None
    """Name a client expects in the server certificates (default: each target's host name)."""
    mesh_allow_unauthenticated: bool = False
    """Serve a backend on a non-loopback address with neither token nor TLS (only for a network
    nothing else can reach); off: such a backend refuses to start."""

    @model_validator(mode="after")
    def _mesh_auth_complete(self) -> MeshAuthSettings:
        files = (self.mesh_tls_ca_file, self.mesh_tls_cert_file, self.mesh_tls_key_file)
        if any(files) and not all(files):
            raise ValueError("mesh TLS needs mesh_tls_ca_file, mesh_tls_cert_file and "
                             "mesh_tls_key_file together")
        if self.mesh_token is not None and len(self.mesh_token.get_secret_value()) < 16:
            raise ValueError("mesh_token must be at least 16 characters")
        return self

    def mesh_auth(self) -> MeshAuth:
        """The credentials these settings describe, files read now.

        Raises:
            ValueError: a configured file cannot be read, or the token file is empty (the
                message names the setting).
        """
        token = self.mesh_token.get_secret_value() if self.mesh_token else None
        if token is None and self.mesh_token_file:
            token = _read("mesh_token_file", self.mesh_token_file).decode().strip()
            if len(token) < 16:
                raise ValueError(f"mesh_token_file: {self.mesh_token_file} holds no token of "
                                 f"at least 16 characters")
        tls = None
        if self.mesh_tls_ca_file:
            tls = MeshTls(_read("mesh_tls_ca_file", self.mesh_tls_ca_file),
                          _read("mesh_tls_cert_file", self.mesh_tls_cert_file),
                          _read("mesh_tls_key_file", self.mesh_tls_key_file),
                          self.mesh_tls_server_name)
        return MeshAuth(token, tls)


class ServiceSettings(MeshAuthSettings):
    """Fields every gRPC service has (the mesh's authentication among them)."""

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
        """The settings as a dict with every secret masked and the credentials of URLs redacted
        (`libs.redaction`), for the start-up log line."""
        out: dict[str, object] = {}
        for name, value in self.model_dump().items():
            if isinstance(getattr(self, name), SecretStr):
                value = "**********"
            elif isinstance(value, str):  # a URL with credentials in it (redis://:pass@...)
                value = redact_url_credentials(value)
            out[name] = value
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
