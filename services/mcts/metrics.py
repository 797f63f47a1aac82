"""Every Prometheus metric of the mcts service (the shared RPC metrics are in `libs.metrics`)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

SEARCHES_RUNNING = Gauge("mesh_mcts_searches_running",
                         "Search calls in progress now, those waiting for a slot included.")
SEARCHES_WAITING = Gauge("mesh_mcts_searches_waiting",
                         "UCT searches waiting for one of MCTS_SEARCH_SLOTS slots now.")
SIMULATIONS = Counter("mesh_mcts_simulations_total",
                      "Simulations run by finished searches; rate() is simulations per second.")
SIMULATIONS_PER_SECOND = Histogram(
    "mesh_mcts_search_simulations_per_second",
    "Each finished search's own rate, simulations per second of its wall time.",
    buckets=(1e3, 1e4, 1e5, 2.5e5, 5e5, 1e6, 2e6, 4e6, 8e6, 1.6e7))
TREE_NODES = Histogram(
    "mesh_mcts_tree_nodes", "Nodes in each finished search's tree.",
    buckets=(1e2, 1e3, 1e4, 1e5, 2.5e5, 5e5, 1e6, 2.5e6, 5e6, 1e7))


def observe_search(simulations: int, simulations_per_second: float, tree_nodes: int) -> None:
    """Records one finished search."""
    SIMULATIONS.inc(simulations)
    SIMULATIONS_PER_SECOND.observe(simulations_per_second)
    TREE_NODES.observe(tree_nodes)
