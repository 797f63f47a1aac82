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
