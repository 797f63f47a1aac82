"""Settings of a REST front."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class RestSettings:
    """Settings of a REST front (the orchestrator's main fills them from its settings).

    Attributes:
        host: interface to bind.
        port: HTTP port; 0 binds a free port (tests).
        default_deadline_s: deadline of a call when the request has no Grpc-Timeout header.
        ready_timeout_s: deadline of the health check behind /ready.
        metrics: serve the process's Prometheus registry at /metrics (the orchestrator's metrics
            are on); when False /metrics answers 404 saying they are off.
        max_deadline_s: a longer Grpc-Timeout is cut to this many seconds (gRPC allows up to
            99999999 hours, which no call needs and which overflows a deadline).
        max_body_bytes: largest request body read; a larger one is answered 413.
        max_json_depth: deepest nesting of JSON arrays and objects accepted in a body (400
            beyond).
        cors_allowed_origins: origins ("https://app.example") whose browsers may call the API
            cross-site; "*" allows any; empty (the default) turns CORS off.
        cors_max_age_s: how long a browser may cache a preflight's answer, in seconds.
        max_query_bytes: longest query string accepted (414 beyond, not parsed).
        max_query_parameters: most `&`-separated query parameters accepted (400 beyond).
        max_head_bytes: most bytes of request target and headers together (414 or 431 beyond,
            answered by the HTTP protocol before the request reaches the app).
        max_headers: most headers of a request (431 beyond).
        head_timeout_s: a request head not complete this many seconds after its first byte (or
            after the connection opened) is answered 408; a connection silent so long is closed.
        allowed_hosts: Host names answered ("*.example.com" its subdomains, "*" any); None: the
            loopback names when `host` is loopback, any otherwise (see `origins`).
        allowed_origins: origins whose cross-site requests are served besides same-origin ones
            and `cors_allowed_origins`; others are refused 403.
        offload_body_bytes: bodies of at least this many bytes are decoded in worker processes,
            off the event loop (see `offload`).
        body_workers: worker processes for those bodies (started on the first one).
        error_service: the `service` the front's own errors name in their ErrorInfo
            ("orchestrator-rest" for the orchestrator's).
        sse_heartbeat_s: a Server-Sent Events watch silent this many seconds gets a comment
            line (`: ping`), so proxies keep it open (see `sse`).
        sse_first_event_wait_s: how long an SSE watch waits for its first event (or its call's
            failure) before it starts the 200 stream; a call refused sooner is answered with its
            own HTTP status.
    """

    host: str = "127.0.0.1"
    port: int = 8080
    default_deadline_s: float = 30.0
    ready_timeout_s: float = 2.0
    metrics: bool = False
    max_deadline_s: float = 3600.0
    max_body_bytes: int = 4 * 1024 * 1024
    max_json_depth: int = 64
    cors_allowed_origins: tuple[str, ...] = field(default_factory=tuple)
    cors_max_age_s: int = 600
    max_query_bytes: int = 8 * 1024
    max_query_parameters: int = 64
    max_head_bytes: int = 128 * 1024
    max_headers: int = 100
    head_timeout_s: float = 10.0
    allowed_hosts: tuple[str, ...] | None = None
    allowed_origins: tuple[str, ...] = field(default_factory=tuple)
    offload_body_bytes: int = 16 * 1024
    body_workers: int = 2
    error_service: str = "rest"
    sse_heartbeat_s: float = 15.0
    sse_first_event_wait_s: float = 1.0
