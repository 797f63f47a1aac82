"""Every Prometheus metric of the orchestrator (the shared RPC metrics are in `libs.metrics`).

`/metrics` on the REST front and the metrics port serve the same registry.
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

CONSENSUS_ITERATIONS = Histogram(
    "mesh_orchestrator_consensus_iterations", "Consensus-loop iterations per answered request.",
    ["kind"], buckets=(1, 2, 3, 4, 5, 8, 10))
AGENT_OUTCOMES = Counter(
    "mesh_orchestrator_agent_outcomes_total",
    "Agent runs in the consensus loop by agent and outcome (proposed, failed, skipped).",
    ["agent", "outcome"])
RATE_LIMIT_REJECTIONS = Counter(
    "mesh_orchestrator_rate_limit_rejections_total",
    "Requests refused by the per-key rate limits or admission control, by reason.", ["reason"])
