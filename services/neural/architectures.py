"""The architecture names a checkpoint's config.json records, and the limits the servicer checks
before any model runs, kept free of torch so that the service can read checkpoints and validate
requests before torch is imported (`services.neural.fast_start`)."""

from __future__ import annotations

CONNECT4_PV = "connect4_pv"
"""Connect Four policy/value network (`services.neural.models.connect4_pv`)."""
HRM = "hrm"
"""Hierarchical Reasoning Model (`services.neural.models.hrm`)."""
TRM = "trm"
"""Tiny Recursive Model (`services.neural.models.trm`)."""
ROUTER_GRU = "router_gru"
"""Meta-controller over routing features (`services.neural.models.router_gru`)."""
ROUTER_TEXT = "router_text"
"""Text router over a query (`services.neural.models.router_text`)."""

REASONING = (HRM, TRM)
"""The architectures `Solve` runs on grids."""

TEXT_ROUTER_MAX_QUERY_CHARS = 10_000
"""Longest query (characters) a text router takes."""
