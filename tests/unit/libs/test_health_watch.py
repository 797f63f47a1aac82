"""gRPC health's Watch answers over the wire through the mesh's server (its handler is a coroutine
that writes with `context.write`, which the error-mapping interceptor must pass through)."""

from __future__ import annotations

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from libs.server import start_server
from libs.settings import ServiceSettings


async def test_watch_streams_the_serving_status():
    running = await start_server("watched", ServiceSettings(port=0), [])
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
            call = health_pb2_grpc.HealthStub(channel).Watch(
                health_pb2.HealthCheckRequest(service=""), timeout=10)
            first = await call.read()
            assert first.status in (health_pb2.HealthCheckResponse.SERVING,
                                    health_pb2.HealthCheckResponse.NOT_SERVING)
            call.cancel()
    finally:
        await running.stop(0)
