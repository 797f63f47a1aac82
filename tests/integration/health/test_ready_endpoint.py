"""/ready of the REST front: 200 while the orchestrator's own health is SERVING whatever its
dependencies' states, 503 only when the orchestrator itself is not serving; the body lists the
dependencies either way (a real gRPC server and REST front on port 0)."""

from __future__ import annotations

import httpx
from mesh.orchestrator.v1 import orchestrator_service_pb2_grpc as pb_grpc

from libs.rest import RestSettings, serve_rest
from libs.server import Servicer, start_server
from libs.settings import ServiceSettings
from services.orchestrator.api.rest import build_rest_app

SERVICE = "mesh.orchestrator.v1.OrchestratorService"
DOWN = [{"name": "mcts", "service": "mesh.mcts.v1.MctsService", "state": "UNKNOWN",
         "detail": "no answer within 1.0 s", "for_s": 3.0},
        {"name": "neural", "service": "mesh.neural.v1.NeuralService", "state": "NOT_SERVING",
         "detail": "unreachable (UNAVAILABLE)", "for_s": 1.5}]


async def test_ready_lists_dependencies_and_is_503_only_when_the_orchestrator_is_not_serving():
    running = await start_server("orchestrator", ServiceSettings(port=0), [
        Servicer(pb_grpc.add_OrchestratorServiceServicer_to_server,
                 pb_grpc.OrchestratorServiceServicer(), SERVICE)])
    app = build_rest_app(running.in_process, RestSettings(port=0),
                         dependencies=lambda: DOWN)
    rest = await serve_rest(app, "127.0.0.1", 0)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{rest.port}") as client:
            reply = await client.get("/ready")
            assert reply.status_code == 200
            assert reply.json() == {"status": "SERVING", "dependencies": DOWN}

            await running.set_serving(False)
            reply = await client.get("/ready")
            assert reply.status_code == 503
            assert reply.json() == {"status": "NOT_SERVING", "dependencies": DOWN, "code": 14,
                                    "message": f"{SERVICE}: NOT_SERVING", "details": []}

            await running.stop(0)  # draining: NOT_SERVING for every name
            reply = await client.get("/ready")
            assert reply.status_code == 503
            assert reply.json()["status"] == "NOT_SERVING"
            assert reply.json()["dependencies"] == DOWN
    finally:
        await rest.stop()
        await running.stop(0)


async def test_ready_is_503_unknown_when_the_server_does_not_serve_the_service():
    running = await start_server("orchestrator", ServiceSettings(port=0), [])
    rest = await serve_rest(build_rest_app(running.in_process, RestSettings(port=0)),
                            "127.0.0.1", 0)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{rest.port}") as client:
            reply = await client.get("/ready")
        assert reply.status_code == 503
        assert reply.json()["status"] == "UNKNOWN"
        assert reply.json()["message"] == f"{SERVICE}: health check failed: NOT_FOUND: "
    finally:
        await rest.stop()
        await running.stop(0)
