"""mesh_health_serving follows what the health service answers, at scrape time."""

from __future__ import annotations

from grpc_health.v1 import health_pb2
from grpc_health.v1._async import HealthServicer
from prometheus_client import REGISTRY

from libs.health_metrics import watch_health


async def test_gauge_follows_the_health_status():
    health = HealthServicer()
    watch_health("unit-health", health)

    def value():
        return REGISTRY.get_sample_value("mesh_health_serving", {"mesh_service": "unit-health"})

    assert value() == 1.0  # a new HealthServicer answers SERVING for ""
    await health.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
    assert value() == 0.0
    await health.set("", health_pb2.HealthCheckResponse.SERVING)
    assert value() == 1.0
    await health.enter_graceful_shutdown()
    assert value() == 0.0
