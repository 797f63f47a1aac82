"""Every Prometheus metric of the retrieval service (the shared RPC metrics: `libs.metrics`).

The `collection` label is bounded: the first `max_collection_labels` collections this process
sees get their own series, any other is counted under "other" (collections are created by
callers, so an unbounded label would grow /metrics without limit).
"""

from __future__ import annotations

import threading

from prometheus_client import Gauge, Histogram

from libs.metrics import LATENCY_BUCKETS_S

QUERY_SECONDS = Histogram(
    "mesh_retrieval_query_seconds",
    "Seconds a search took in the retriever (embedding the query and searching the store).",
    ["collection"], buckets=LATENCY_BUCKETS_S)
POINTS = Gauge("mesh_retrieval_collection_points",
               "Points (chunks) in each collection, as last read from the store.", ["collection"])


OTHER = "other"
"""Label of every collection beyond the first `max_collection_labels`."""
_labelled: set[str] = set()
_others: dict[str, int] = {}
_lock = threading.Lock()
_max_labels = 20


def configure(max_collection_labels: int) -> None:
    """Sets how many collections get their own label (RETRIEVAL_METRICS_MAX_COLLECTION_LABELS),
    at start-up; the collections seen so far, and their series, are forgotten."""
    global _max_labels
    with _lock:
        _max_labels = max_collection_labels
        _labelled.clear()
        _others.clear()
        POINTS.clear()  # the series of the collections forgotten


def collection_label(collection: str) -> str:
    """`collection` while fewer than the maximum have their own series (or it has one), else
    "other"."""
    with _lock:
        if collection in _labelled:
            return collection
        if len(_labelled) < _max_labels and collection != OTHER:
            _labelled.add(collection)
            return collection
        return OTHER


def set_count(collection: str, chunk_count: int) -> None:
    """Sets the points gauge of `collection` (collections under "other" are summed)."""
    label = collection_label(collection)
    if label != OTHER:
        POINTS.labels(label).set(chunk_count)
        return
    with _lock:
        _others[collection] = chunk_count
        total = sum(_others.values())
    POINTS.labels(OTHER).set(total)


def forget(collection: str) -> None:
    """Drops a deleted collection's points (its own series, or its part of "other")."""
    with _lock:
        own = collection in _labelled
        _labelled.discard(collection)
        counted = _others.pop(collection, None) is not None
        total = sum(_others.values())
    if own:
        POINTS.remove(collection)
    elif counted:
        POINTS.labels(OTHER).set(total)


def set_points(collections) -> None:
    """Sets the points gauge from `CollectionInfo`s (name, chunk_count) read from the store."""
    for info in collections:
        set_count(info.name, info.chunk_count)
