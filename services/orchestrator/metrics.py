"""The orchestrator's own Prometheus metrics (prometheus-client, the process's default registry).

Labels never carry keys, key hashes, key names or request text.
"""

from __future__ import annotations

from prometheus_client import Counter

RATE_LIMIT_REJECTIONS = Counter(
    "mesh_orchestrator_rate_limit_rejections_total",
    "Calls refused with RESOURCE_EXHAUSTED before running, by reason: \"rate_limit\" (a key's "
    "per-second, -minute or -hour limit) or \"admission\" (ORCHESTRATOR_MAX_IN_FLIGHT calls "
    "already running).",
    ["reason"])
