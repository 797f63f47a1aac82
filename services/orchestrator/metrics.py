"""Every Prometheus metric of the orchestrator (the shared RPC metrics are in `libs.metrics`).

`/metrics` on the REST front and the metrics port serve the same registry.

Labels never carry keys, key hashes, key names or request text.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

CONSENSUS_ITERATIONS = Histogram(
    "mesh_orchestrator_consensus_iterations", "Consensus-loop iterations per answered request.",
    ["kind"], buckets=(1, 2, 3, 4, 5, 8, 10))
AGENT_OUTCOMES = Counter(
    "mesh_orchestrator_agent_outcomes_total",
    "Agent runs in the consensus loop by agent and outcome: proposed, abstained (no answer), "
    "failed (a MeshError, e.g. its service is down) or error (cancelled or a bug).",
    ["agent", "outcome"])
RATE_LIMIT_REJECTIONS = Counter(
    "mesh_orchestrator_rate_limit_rejections_total",
    "Calls refused with RESOURCE_EXHAUSTED before running, by reason: \"rate_limit\" (a key's "
    "per-second, -minute or -hour limit), \"admission\" (ORCHESTRATOR_MAX_IN_FLIGHT calls "
    "already running), \"key_in_flight\" (the key's own cap running) or \"budget\" (a key's "
    "token, dollar or simulation budget used up).",
    ["reason"])
SOLVES_WAITING = Gauge(
    "mesh_orchestrator_solves_waiting",
    "SolveProblem calls waiting for one of ORCHESTRATOR_MAX_RUNNING_SOLVES to end.")
TEXT_ROLE_CALLS = Counter(
    "mesh_orchestrator_text_role_calls_total",
    "Language-model calls of the text roles and the search over reasoning steps, by role "
    "(decompose, refine, search) and purpose (decompose, sub-answer, compose, draft, critique, "
    "revise, propose, evaluate).",
    ["role", "purpose"])
TEXT_ROLE_TOKENS = Counter(
    "mesh_orchestrator_text_role_tokens_total",
    "Prompt plus completion tokens of those calls as the providers reported them, by role.",
    ["role"])
RUNS = Gauge(
    "mesh_orchestrator_runs",
    "Durable runs in the run store by state (queued, running, succeeded, failed, cancelled), "
    "read from the store every 10 s by each orchestrator's upkeep task.",
    ["state"])
RUN_QUEUE_DEPTH = Gauge(
    "mesh_orchestrator_run_queue_depth",
    "Durable runs waiting for a worker (QUEUED), read with mesh_orchestrator_runs.")
RUN_TIME_QUEUED = Histogram(
    "mesh_orchestrator_run_time_queued_seconds",
    "Seconds from a run's creation to its first lease by a worker of this orchestrator.",
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 60, 300, 3600))
RUN_LEASE_EXPIRIES = Counter(
    "mesh_orchestrator_run_lease_expiries_total",
    "Runs this orchestrator's workers took over after another worker's lease expired (that "
    "worker died or lost the store), and leases this orchestrator's workers lost.",
    ["event"])
RUN_ATTEMPTS = Histogram(
    "mesh_orchestrator_run_attempts",
    "Attempts (leases) a run took, observed when this orchestrator's worker ended it, by how "
    "(finished: succeeded or failed; cancelled).",
    ["end"], buckets=(1, 2, 3, 5, 10))
