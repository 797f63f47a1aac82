"""Prometheus metrics every gRPC server of the mesh shares, and the metrics port.

The RPC instruments follow go-grpc-prometheus's names and labels (`grpc_server_handled_total`,
`grpc_server_handling_seconds`, labels `grpc_service`, `grpc_method`, `grpc_code`), so the usual
dashboards and alerts apply; each service declares its own instruments in
`services/<service>/metrics.py`.

Registry: the process's default `prometheus_client.REGISTRY`. One service runs per process
(`mcts-mesh serve <service>`, one Kubernetes container), so a service's metrics port shows exactly
that service. Tests that start several services in one process share the registry: the
`grpc_service` label keeps the RPC series apart, and each service's own names carry its word
(`mesh_mcts_...`), so nothing collides. Labels never carry keys, tokens or request text.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import (
    REGISTRY,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    start_http_server,
)

log = logging.getLogger(__name__)

# No `*_created` series: they double what every scrape carries and no dashboard of ours reads them.
disable_created_metrics()

LATENCY_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                     5.0, 10.0, 30.0, 60.0, 120.0)
"""Histogram buckets in seconds: from a 0.5 ms cache hit to a two-minute solve."""

RPC_HANDLED = Counter(
    "grpc_server_handled_total", "RPCs completed on the server, by method and status code.",
    ["grpc_service", "grpc_method", "grpc_code"])
RPC_SECONDS = Histogram(
    "grpc_server_handling_seconds",
    "Time from the call reaching the servicer to its status, in seconds, by method and code.",
    ["grpc_service", "grpc_method", "grpc_code"], buckets=LATENCY_BUCKETS_S)
RPC_IN_FLIGHT = Gauge(
    "grpc_server_in_flight_requests", "RPCs started on the server and not finished yet.",
    ["grpc_service", "grpc_method"])


class RpcInstruments:
    """The label children of the three RPC instruments for one method, cached: `labels()` costs a
    lock and a dict lookup per call, which the request path should not pay twice."""

    def __init__(self, full_method: str) -> None:
        service, _, method = full_method.lstrip("/").partition("/")
        self._labels = (service, method)
        self.in_flight = RPC_IN_FLIGHT.labels(service, method)
        self._by_code: dict[str, tuple[Counter, Histogram]] = {}

    def finished(self, code: str, seconds: float) -> None:
        """Counts one finished call with status `code` (e.g. "OK") that took `seconds`."""
        pair = self._by_code.get(code)
        if pair is None:
            pair = (RPC_HANDLED.labels(*self._labels, code),
                    RPC_SECONDS.labels(*self._labels, code))
            self._by_code[code] = pair
        pair[0].inc()
        pair[1].observe(seconds)


@dataclass
class MetricsServer:
    """The HTTP server of a metrics port: `port` is the bound port, `stop()` closes it."""

    server: WSGIServer
    port: int

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def start_metrics_server(name: str, host: str, port: int) -> MetricsServer | None:
    """Serves the process's registry at `http://host:port/metrics` from a daemon thread.

    Args:
        name: the service's word, for the log line.
        port: -1 serves nothing (returns None); 0 binds a free port.
    Raises:
        OSError: the port could not be bound.
    """
    if port < 0:
        return None
    server, _ = start_http_server(port, addr=host, registry=REGISTRY)
    bound = server.server_port
    log.info("%s: metrics on http://%s:%d/metrics", name, host, bound)
    return MetricsServer(server, bound)
