"""`mesh_health_serving`: what each server's grpc.health.v1 answers now, as a Prometheus gauge.

The value is read from the server's HealthServicer when Prometheus scrapes (a collector, not a
gauge someone must remember to set), so it is whatever a health Check would answer at that moment,
whoever changed it: 1 for SERVING, 0 for anything else (NOT_SERVING while starting, draining or
unable to answer). Alert rules use it for NOT_SERVING (deploy/prometheus/alerts.yml).
"""

from __future__ import annotations

import weakref

from grpc_health.v1 import health_pb2
from grpc_health.v1._async import HealthServicer
from prometheus_client import REGISTRY
from prometheus_client.core import GaugeMetricFamily

NAME = "mesh_health_serving"


class _HealthCollector:
    def __init__(self) -> None:
        self._servers: dict[str, weakref.ref[HealthServicer]] = {}

    def watch(self, service: str, health: HealthServicer) -> None:
        self._servers[service] = weakref.ref(health)

    def collect(self):
        family = GaugeMetricFamily(
            NAME, "1 while the service's overall grpc.health.v1 status is SERVING, else 0.",
            labels=["mesh_service"])
        for service, ref in sorted(self._servers.items()):
            health = ref()
            if health is None:
                continue
            # The servicer's own table: what Check(service="") answers.
            status = health._server_status.get("")  # noqa: SLF001 - no public getter exists
            family.add_metric([service], 1.0 if status == health_pb2.HealthCheckResponse.SERVING
                              else 0.0)
        yield family

    def describe(self):
        return [GaugeMetricFamily(NAME, "", labels=["mesh_service"])]


_COLLECTOR = _HealthCollector()
REGISTRY.register(_COLLECTOR)


def watch_health(service: str, health: HealthServicer) -> None:
    """Exports `health`'s overall status as mesh_health_serving{mesh_service=service}."""
    _COLLECTOR.watch(service, health)
