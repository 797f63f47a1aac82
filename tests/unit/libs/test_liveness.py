"""The "liveness" health service answers SERVING while the process answers, whatever readiness
says: Kubernetes' liveness probe (deploy/k8s, grpc.service: liveness) restarts a wedged process,
not one that is NOT_SERVING because a dependency is down."""

from __future__ import annotations

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from mesh.llm.v1 import llm_service_pb2_grpc

from libs.server import LIVENESS, Servicer, start_server
from libs.settings import ServiceSettings

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


async def test_liveness_stays_serving_when_readiness_does_not():
    running = await start_server(
        "live", ServiceSettings(port=0),
        [Servicer(llm_service_pb2_grpc.add_LlmServiceServicer_to_server,
                  llm_service_pb2_grpc.LlmServiceServicer(), "mesh.llm.v1.LlmService")])
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
            health = health_pb2_grpc.HealthStub(channel)

            async def status(service: str) -> int:
                reply = await health.Check(health_pb2.HealthCheckRequest(service=service),
                                           timeout=5)
                return reply.status

            assert (await status(""), await status(LIVENESS)) == (SERVING, SERVING)
            await running.set_serving(False)
            assert (await status(""), await status(LIVENESS)) == (NOT_SERVING, SERVING)
    finally:
        await running.stop(0)
