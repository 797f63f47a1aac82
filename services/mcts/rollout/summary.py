"""The rollout engine's trees merged at the root into the one result type (`SearchResult`)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from services.mcts.core.config import SearchConfig
from services.mcts.core.result import SearchResult
from services.mcts.core.root import sample_by_temperature
from services.mcts.rollout.grown import Grown
from services.mcts.rollout.kernel import BACKUP, EXPAND, ROLLOUT, SELECT, WAIT


def summarise(runs: Sequence[Grown], legal: Sequence[int], priors: np.ndarray, elapsed: float,
              config: SearchConfig, *, action_offset: int = 0) -> SearchResult:
    """The result of a search whose trees are `runs` (one per thread with root parallelisation,
    one shared tree otherwise), summed at the root.

    Args:
        legal: the root's legal actions (the candidates for the move).
        priors: float64 [A], the root's priors per action (A = the game's num_actions).
        elapsed: wall seconds of the search.
        config: its options (the temperature draw, the seed, the parallelism).
        action_offset: see `SearchResult.action_offset`.
    """
    num_actions = len(priors)
    # A handful of actions: plain Python lists cost less than numpy's per-call overhead on arrays
    # this small (a search's fixed cost is about 250 us on the loaded machine); the same values,
    # operation for operation, in float64.
    counts = [0] * num_actions
    sums = [0.0] * num_actions
    for grown in runs:
        tree = grown.tree
        children = tree.children(0)
        rows = slice(children.start, children.stop)
        for action, count, total in zip(tree.action[rows].tolist(), tree.visits[rows].tolist(),
                                        tree.value_sum[rows].tolist(), strict=True):
            counts[action] += count
            sums[action] += total
    means = [sums[a] / counts[a] if counts[a] > 0 else math.nan for a in range(num_actions)]
    visits = np.array(counts, dtype=np.int64)
    total_visits = int(visits.sum())
    if config.temperature > 0 and total_visits > 0:
        action = sample_by_temperature(visits, config.temperature, config.seed)
    else:
        action = max(legal, key=lambda a: (counts[a], means[a] if counts[a] > 0 else -math.inf,
                                           -a))
    done = sum(grown.simulations for grown in runs)
    value_sum = float(np.array(sums, dtype=np.float64).sum())
    return SearchResult(
        action=int(action), visits=visits, values=np.array(means, dtype=np.float64),
        priors=priors, root_value=value_sum / total_visits if total_visits else 0.0,
        simulations=done, tree_size=sum(grown.tree.size for grown in runs),
        max_depth=max(grown.tree.max_depth for grown in runs),
        tree_full=any(grown.tree.full for grown in runs), elapsed_s=elapsed,
        simulations_per_second=done / elapsed if elapsed > 0 else 0.0, seed=config.seed,
        action_offset=action_offset,
        threads=(max(grown.threads for grown in runs) if config.parallelism == "tree"
                 else len(runs)),
        parallelism=config.parallelism,
        transposition_hits=sum(grown.transposition_hits for grown in runs),
        **_phases(runs))


def _phases(runs: Sequence[Grown]) -> dict:
    """The work counts, per-phase seconds (mean over the trees: one thread each, or one tree of
    all threads, so their sum stays within the search's wall time) and timed simulations."""
    phases = sum(grown.phases for grown in runs)
    seconds = sum(grown.phase_seconds for grown in runs) / len(runs)
    return {
        "selection_steps": int(phases[SELECT]), "expanded_nodes": int(phases[EXPAND]),
        "rollout_plies": int(phases[ROLLOUT]), "backup_steps": int(phases[BACKUP]),
        "selection_s": float(seconds[SELECT]), "expansion_s": float(seconds[EXPAND]),
        "rollout_s": float(seconds[ROLLOUT]), "backup_s": float(seconds[BACKUP]),
        "wait_s": float(seconds[WAIT]),
        "timed_simulations": sum(grown.timed_simulations for grown in runs),
    }
