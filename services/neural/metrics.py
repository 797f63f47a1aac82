"""Every Prometheus metric of the neural service (the shared RPC metrics are in `libs.metrics`)."""

from __future__ import annotations

from prometheus_client import Gauge, Histogram

BATCH_SIZE = Histogram(
    "mesh_neural_batch_size", "Rows (positions or puzzles) per forward pass of a dynamic batch.",
    ["model"], buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512))
QUEUE_WAIT = Histogram(
    "mesh_neural_queue_wait_seconds",
    "Seconds a request waited in the batcher's queue before its batch ran.",
    ["model"], buckets=(0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0))
MODEL_LOAD_SECONDS = Gauge(
    "mesh_neural_model_load_seconds",
    "Seconds the last load of each model took (checkpoint read and module built).", ["model"])
