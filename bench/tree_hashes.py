"""Hashes of the trees that fixed seeds grow, to check that a refactoring of the search core
changes no tree (run it before and after; every line must stay the same).

Each line: a configuration, the SHA-256 (first 16 hex digits) of its tree's arrays over the used
nodes (visits, value sums, priors, children, actions) and the move it plays. The configurations
cover the rollout engine (UCT, PUCT, progressive widening, RAVE, Dirichlet noise, temperature,
tree parallelisation with one thread, with and without a transposition table) and the batched
search (PUCT with noise and temperature, virtual loss, Gumbel), on Connect Four after "4453".

    .venv/bin/python bench/tree_hashes.py [--simulations 20000]
"""

from __future__ import annotations

import argparse
import hashlib

import numpy as np

from libs.connect4.board import Position
from services.mcts.batched.evaluators import GameEvaluator
from services.mcts.batched.search import BatchedSearch, run_batched
from services.mcts.core.config import BatchedConfig, SearchConfig
from services.mcts.games.connect4 import GAME, from_position
from services.mcts.rollout.engine import grow_parallel, search

MOVES = "4453"
ENGINE = {
    "uct": SearchConfig(rule="uct", seed=7),
    "puct": SearchConfig(rule="puct", exploration=1.25, seed=7),
    "puct+dirichlet": SearchConfig(rule="puct", exploration=1.25, dirichlet_alpha=0.3, seed=7),
    "uct+widening+rave": SearchConfig(rule="uct", widening_k=1.0, rave_k=1000.0, seed=7),
    "uct+temperature": SearchConfig(rule="uct", temperature=1.0, seed=7),
    "puct+dirichlet+temperature": SearchConfig(rule="puct", dirichlet_alpha=0.3,
                                               temperature=0.5, seed=8),
    "uct tree x1+transpositions": SearchConfig(rule="uct", parallelism="tree",
                                               transpositions=True, seed=7),
    "puct+widening+rave": SearchConfig(rule="puct", exploration=1.25, widening_k=2.0,
                                       rave_k=500.0, seed=9),
    "uct tree x1": SearchConfig(rule="uct", parallelism="tree", seed=7),
    "puct tree x1+widening+rave+transpositions": SearchConfig(
        rule="puct", widening_k=2.0, rave_k=500.0, parallelism="tree", transpositions=True,
        seed=9),
    "uct+widening": SearchConfig(rule="uct", widening_k=1.0, seed=7),
    "uct tree x1+widening": SearchConfig(rule="uct", widening_k=1.0, parallelism="tree", seed=7),
}
BATCHED = {
    "batched puct": BatchedConfig(rule="puct", seed=7),
    "batched puct x8+dirichlet+temperature": BatchedConfig(
        rule="puct", batch_size=8, dirichlet_alpha=0.3, temperature=1.0, seed=7),
    "batched gumbel x4": BatchedConfig(rule="gumbel", batch_size=4, seed=7),
}


def tree_hash(tree) -> str:
    """First 16 hex digits of the SHA-256 of the tree's arrays over its used nodes."""
    used = slice(0, tree.size)
    digest = hashlib.sha256()
    for array in (tree.visits, tree.value_sum, tree.prior, tree.first_child, tree.num_children,
                  tree.action):
        digest.update(np.ascontiguousarray(array[used]).tobytes())
    return digest.hexdigest()[:16]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--simulations", type=int, default=20_000)
    args = parser.parse_args()
    state = from_position(Position.from_moves(MOVES))
    print(f"| configuration ({args.simulations:,} simulations) | tree sha256 | move |")
    print("|---|---|---|")
    for name, config in ENGINE.items():
        grown = grow_parallel(GAME, state, args.simulations, config)[0]
        move = search(GAME, state, args.simulations, config).action
        print(f"| {name} | {tree_hash(grown.tree)} | {move} |")
    for name, config in BATCHED.items():
        batched = BatchedSearch(GAME.num_actions, args.simulations // 10, config)
        result = run_batched(batched, GameEvaluator(GAME, state, seed=config.seed))
        print(f"| {name} | {tree_hash(batched.tree)} | {result.action} |")


if __name__ == "__main__":
    main()
