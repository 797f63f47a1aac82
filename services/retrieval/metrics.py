"""Every Prometheus metric of the retrieval service (the shared RPC metrics: `libs.metrics`)."""

from __future__ import annotations

from prometheus_client import Gauge, Histogram

from libs.metrics import LATENCY_BUCKETS_S

QUERY_SECONDS = Histogram(
    "mesh_retrieval_query_seconds",
    "Seconds a search took in the retriever (embedding the query and searching the store).",
    ["collection"], buckets=LATENCY_BUCKETS_S)
POINTS = Gauge("mesh_retrieval_collection_points",
               "Points (chunks) in each collection, as last read from the store.", ["collection"])


def set_points(collections) -> None:
    """Sets the points gauge from `CollectionInfo`s (name, chunk_count) read from the store."""
    for info in collections:
        POINTS.labels(info.name).set(info.chunk_count)
