"""The one conversion of a search's result (`core.result.SearchResult`, either engine) to the
proto's SearchStatistics, and the messages that carry it."""

from __future__ import annotations

import math

from mesh.common.v1 import common_pb2
from mesh.mcts.v1 import mcts_service_pb2 as pb

from services.mcts.core.result import SearchResult


def to_statistics(result: SearchResult) -> common_pb2.SearchStatistics:
    """SearchStatistics of `result`; `actions` lists the actions with a prior > 0 (the root's
    legal actions) in increasing order, numbered as the caller numbers them
    (`result.action_offset`), with value 0 for an action the search never visited. The fields
    of the engine that did not run are 0."""
    actions = [
        common_pb2.ActionStatistics(
            action=a + result.action_offset,
            visits=int(result.visits[a]),
            value=0.0 if math.isnan(result.values[a]) else float(result.values[a]),
            prior=float(result.priors[a]),
        )
        for a in range(len(result.priors))
        if result.priors[a] > 0
    ]
    return common_pb2.SearchStatistics(
        simulations=result.simulations,
        simulations_per_second=result.simulations_per_second,
        tree_size=result.tree_size,
        max_depth=result.max_depth,
        root_value=result.root_value,
        actions=actions,
        elapsed_ms=result.elapsed_s * 1e3,
        seed=result.seed,
        threads=result.threads,
        tree_full=result.tree_full,
        collisions=result.collisions,
        evaluations=result.evaluations,
        batches=result.batches,
        batch_selection_ms=result.batch_selection_s * 1e3,
        evaluation_ms=result.evaluation_s * 1e3,
        batch_backup_ms=result.batch_backup_s * 1e3,
        transposition_hits=result.transposition_hits,
        selection_ms=result.selection_s * 1e3,
        expansion_ms=result.expansion_s * 1e3,
        rollout_ms=result.rollout_s * 1e3,
        backup_ms=result.backup_s * 1e3,
        wait_ms=result.wait_s * 1e3,
        timed_simulations=result.timed_simulations,
    )


def to_response(result: SearchResult) -> pb.SearchResponse:
    """The Search RPC's response: the move in the caller's numbering and the statistics."""
    return pb.SearchResponse(best_action=result.best_action, statistics=to_statistics(result))


def to_external_result(result: SearchResult) -> pb.SearchExternalResponse:
    """The SearchExternal stream's last message: the move, the search policy and the
    statistics."""
    return pb.SearchExternalResponse(result=pb.ExternalSearchResult(
        best_action=result.best_action, policy=result.policy.tolist(),
        statistics=to_statistics(result)))
