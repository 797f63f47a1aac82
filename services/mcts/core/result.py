"""The one result type of both search engines, for the player to move at the root; the gRPC edge
turns it into the proto's SearchStatistics in one function (`services.mcts.api.responses`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


class SearchStopped(Exception):
    """The time limit passed, or the stop event was set, before any simulation finished."""


@dataclass(frozen=True)
class SearchResult:
    """A finished search; A = the game's num_actions.

    Attributes:
        action: the action chosen, 0..A-1: the most visited (ties: higher mean value, then lower
            action), a sample of the visits with a temperature, or Gumbel's sequential-halving
            winner; -1 when the root has no child (a terminal root of the batched engine).
        visits: int64 [A], root visits per action (0 for an illegal or unvisited action).
        values: float64 [A], mean result per action for the player to move, in [-1, 1]; nan for
            an action never visited.
        priors: float64 [A], root priors after noise (0 for an illegal action).
        root_value: mean result at the root for the player to move.
        simulations: simulations completed (fewer than asked when a deadline or a stop event
            ended the search).
        tree_size: nodes over all trees; max_depth: deepest node, plies below the root.
        tree_full: True when an expansion was refused for lack of room (results stay valid).
        elapsed_s: wall-clock seconds; simulations_per_second: simulations / elapsed_s.
        seed: the seed given (tree or thread i of the rollout engine used `seed + i`).
        action_offset: added to an action to number it for the caller (1 for Connect Four's
            columns 1..7 in the proto, 0 otherwise); see `best_action`.
        threads: threads searching (one tree each with root parallelisation; 1 when batched).
        parallelism: "root" or "tree" (rollout engine).
        policy: float64 [A], the batched engine's search policy: visit shares (PUCT) or the
            improved policy softmax(logits + sigma(completed q)) (Gumbel); None for rollouts.
        transposition_hits: positions found in a transposition table when first reached.
        selection_steps, expanded_nodes, rollout_plies, backup_steps: the rollout engine's work
            counts per phase.
        selection_s, expansion_s, rollout_s, backup_s, wait_s: the rollout engine's wall seconds
            per phase, mean over the threads (their sum is at most `elapsed_s`); 0 when
            `timed_simulations` is 0.
        timed_simulations: simulations timed phase by phase (about 1 in 16).
        collisions: batched descents that reached a leaf already in their batch.
        evaluations: leaves the batched engine's evaluator evaluated, the root included.
        batches: batches handed out, the root's included.
        batch_selection_s, evaluation_s, batch_backup_s: the batched engine's wall seconds in
            selection, in the caller's evaluation and in submitting the evaluations.
    """

    action: int
    visits: np.ndarray
    values: np.ndarray
    priors: np.ndarray
    root_value: float
    simulations: int
    tree_size: int
    max_depth: int
    tree_full: bool
    elapsed_s: float
    simulations_per_second: float
    seed: int = 0
    action_offset: int = 0
    threads: int = 1
    parallelism: str = "root"
    policy: np.ndarray | None = None
    transposition_hits: int = 0
    selection_steps: int = 0
    expanded_nodes: int = 0
    rollout_plies: int = 0
    backup_steps: int = 0
    selection_s: float = 0.0
    expansion_s: float = 0.0
    rollout_s: float = 0.0
    backup_s: float = 0.0
    wait_s: float = 0.0
    timed_simulations: int = 0
    collisions: int = 0
    evaluations: int = 0
    batches: int = 0
    batch_selection_s: float = 0.0
    evaluation_s: float = 0.0
    batch_backup_s: float = 0.0

    @property
    def best_action(self) -> int:
        """The action in the caller's numbering, `action + action_offset` (Connect Four: the
        column 1..7)."""
        return self.action + self.action_offset
