"""Client channels between mesh services: tracing, retries declared in the service config, and the
rule that every call carries a deadline (callers pass `timeout=`)."""

from __future__ import annotations

import json

import grpc
from opentelemetry.instrumentation.grpc import aio_client_interceptors
from opentelemetry.sdk.trace import TracerProvider

# Retry only on UNAVAILABLE (the server never saw the call or is restarting): every RPC between mesh
# services is safe to repeat, since none of them changes state except an ingest, which is idempotent
# (re-ingesting a document id replaces its chunks).
_SERVICE_CONFIG = json.dumps(
    {
        "methodConfig": [
            {
                "name": [{}],
                "retryPolicy": {
                    "maxAttempts": 3,
                    "initialBackoff": "0.05s",
                    "maxBackoff": "0.5s",
                    "backoffMultiplier": 2,
                    "retryableStatusCodes": ["UNAVAILABLE"],
                },
            }
        ]
    }
)


def open_channel(target: str, tracer_provider: TracerProvider | None = None) -> grpc.aio.Channel:
    """An insecure grpc.aio channel to `target` ("host:port") with tracing and retries.

    The trace context of the current span travels in the call's metadata, so the callee's spans join
    the caller's trace. Close it with `await channel.close()`.
    """
    return grpc.aio.insecure_channel(
        target,
        options=[("grpc.service_config", _SERVICE_CONFIG),
                 ("grpc.enable_retries", 1),
                 ("grpc.max_receive_message_length", 64 * 1024 * 1024)],
        interceptors=aio_client_interceptors(tracer_provider=tracer_provider),
    )
