"""Golden regression test of the search core: fixed seeds grow fixed trees.

Each case is a configuration of the rollout engine (UCT, PUCT, progressive widening, RAVE,
Dirichlet noise, temperature, tree parallelisation with one thread, with and without a
transposition table) or of the batched search (PUCT with noise and temperature, virtual loss,
Gumbel), searched on Connect Four after "4453". The SHA-256 (first 16 hex digits) of the tree's
arrays over its used nodes (visits, value sums, priors, children, actions) and the move played
were recorded from the code before the service's split into subpackages (issue 30, formerly the
oracle `bench/tree_hashes.py`); a refactoring of the search must change none of them. A change
that means to change the trees (a new rule, a different random stream) updates the literals in
the same commit and says why.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from libs.connect4.board import Position
from services.mcts.batched.evaluators import GameEvaluator
from services.mcts.batched.search import BatchedSearch, run_batched
from services.mcts.core.config import BatchedConfig, SearchConfig
from services.mcts.games.connect4 import GAME, from_position
from services.mcts.rollout.engine import grow_parallel, search

MOVES = "4453"
SIMULATIONS = 3_000
"""Simulations per rollout search (the batched searches run a tenth): enough for trees several
plies deep with RAVE, widening and the table all in play, in well under a second each."""

ENGINE = {
    "uct": (SearchConfig(rule="uct", seed=7), "388d6e79853bcfd4", 6),
    "puct": (SearchConfig(rule="puct", exploration=1.25, seed=7), "c94a4eaf8b1fe17c", 3),
    "puct+dirichlet": (SearchConfig(rule="puct", exploration=1.25, dirichlet_alpha=0.3, seed=7),
                       "1ac1d7e8b30b89a9", 6),
    "uct+widening+rave": (SearchConfig(rule="uct", widening_k=1.0, rave_k=1000.0, seed=7),
                          "db87fc07a9e80fd8", 6),
    "uct+temperature": (SearchConfig(rule="uct", temperature=1.0, seed=7), "388d6e79853bcfd4", 6),
    "puct+dirichlet+temperature": (SearchConfig(rule="puct", dirichlet_alpha=0.3,
                                                temperature=0.5, seed=8), "fc488532d2ab2ba7", 3),
    "uct tree x1+transpositions": (SearchConfig(rule="uct", parallelism="tree",
                                                transpositions=True, seed=7),
                                   "3c9ab3e40e706ba3", 3),
    "puct+widening+rave": (SearchConfig(rule="puct", exploration=1.25, widening_k=2.0,
                                        rave_k=500.0, seed=9), "39f6cf46431b1038", 3),
    "uct tree x1": (SearchConfig(rule="uct", parallelism="tree", seed=7), "388d6e79853bcfd4", 6),
    "puct tree x1+widening+rave+transpositions": (SearchConfig(
        rule="puct", widening_k=2.0, rave_k=500.0, parallelism="tree", transpositions=True,
        seed=9), "1b01e9a728aac580", 3),
    "uct+widening": (SearchConfig(rule="uct", widening_k=1.0, seed=7), "15e952a87be8e3fc", 5),
    "uct tree x1+widening": (SearchConfig(rule="uct", widening_k=1.0, parallelism="tree", seed=7),
                             "15e952a87be8e3fc", 5),
}
"""name -> (config, expected tree hash, expected move)."""

BATCHED = {
    "batched puct": (BatchedConfig(rule="puct", seed=7), "5fa92ac893529c60", 6),
    "batched puct x8+dirichlet+temperature": (BatchedConfig(
        rule="puct", batch_size=8, dirichlet_alpha=0.3, temperature=1.0, seed=7),
        "8d5bfd69dc4d5f78", 4),
    "batched gumbel x4": (BatchedConfig(rule="gumbel", batch_size=4, seed=7),
                          "59a2d3f5182fecd8", 6),
}


def tree_hash(tree) -> str:
    """First 16 hex digits of the SHA-256 of the tree's arrays over its used nodes."""
    used = slice(0, tree.size)
    digest = hashlib.sha256()
    for array in (tree.visits, tree.value_sum, tree.prior, tree.first_child, tree.num_children,
                  tree.action):
        digest.update(np.ascontiguousarray(array[used]).tobytes())
    return digest.hexdigest()[:16]


def _state() -> np.ndarray:
    return from_position(Position.from_moves(MOVES))


@pytest.mark.parametrize("name", list(ENGINE))
def test_the_rollout_engine_grows_the_recorded_tree(name: str) -> None:
    config, expected_hash, expected_move = ENGINE[name]
    state = _state()
    grown = grow_parallel(GAME, state, SIMULATIONS, config)[0]
    move = search(GAME, state, SIMULATIONS, config).action
    assert (tree_hash(grown.tree), move) == (expected_hash, expected_move)


@pytest.mark.parametrize("name", list(BATCHED))
def test_the_batched_search_grows_the_recorded_tree(name: str) -> None:
    config, expected_hash, expected_move = BATCHED[name]
    batched = BatchedSearch(GAME.num_actions, SIMULATIONS // 10, config)
    result = run_batched(batched, GameEvaluator(GAME, _state(), seed=config.seed))
    assert (tree_hash(batched.tree), result.action) == (expected_hash, expected_move)
