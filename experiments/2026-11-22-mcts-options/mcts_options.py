"""How often each search option keeps the game-theoretic outcome on Pons positions.

Every configuration searches the same positions with the same simulation budget and seed; the
move it picks is judged with the exact solver (`libs.connect4.outcome.keeps_outcome`). The rollout
configurations run the engine in this process (`services.mcts.rollout.engine.search`, Connect Four
with the service's decisive rollouts); the neural configurations go through a running mcts service
(`MctsService.Search` with `LEAF_EVALUATOR_NEURAL`, which asks the neural service's
`connect4-pv` network for each batch of leaves), so start the mesh first (`mcts-mesh up`).

    .venv/bin/python experiments/2026-11-22-mcts-options/mcts_options.py \\
        ../shared/data/connect4-pons/Test_L2_R2 --limit 100 \\
        --simulations 20000 --neural-simulations 2000

Prints a table (kept rate, median ms per search) and, with --json, one JSON object last.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import grpc
from mesh.common.v1 import common_pb2
from mesh.mcts.v1 import mcts_service_pb2 as pb
from mesh.mcts.v1 import mcts_service_pb2_grpc

from libs.connect4.board import Position
from libs.connect4.outcome import keeps_outcome
from libs.connect4.pons import read_pons
from services.mcts.core.config import SearchConfig
from services.mcts.games.connect4 import GAME, from_position
from services.mcts.rollout.engine import search

BASE = SearchConfig(rule="uct", exploration=2.0, seed=0)
ROLLOUT_OPTIONS: dict[str, tuple[SearchConfig, int]] = {
    "uct": (BASE, 1),
    "uct + progressive widening (k=1, alpha=0.5)": (replace(BASE, widening_k=1.0), 1),
    "uct + RAVE (k=1000)": (replace(BASE, rave_k=1000.0), 1),
    "puct (c=2, uniform priors)": (replace(BASE, rule="puct"), 1),
    "uct + transposition table": (replace(BASE, transpositions=True), 1),
    "uct, root parallel x2": (BASE, 2),
    "uct, tree parallel x2": (replace(BASE, parallelism="tree"), 2),
}


def rollout_move(config: SearchConfig, threads: int, simulations: int) -> Callable[[str], int]:
    """A function from a Pons move string to the column (1..7) the engine picks."""

    # Room for every node the simulations can create (7 children per expansion), as uct_search.
    sized = replace(config, max_nodes=7 * simulations + 8)

    def move(moves: str) -> int:
        state = from_position(Position.from_moves(moves))
        return search(GAME, state, simulations, sized, threads=threads).action + 1

    return move


def service_move(stub, rule: int, simulations: int, batch_size: int) -> Callable[[str], int]:
    """A function from a Pons move string to the column the mcts service picks with neural
    leaf evaluation."""

    def move(moves: str) -> int:
        response = stub.Search(pb.SearchRequest(
            game=pb.GAME_CONNECT_FOUR, connect_four=common_pb2.ConnectFourPosition(moves=moves),
            simulations=simulations, rule=rule, evaluator=pb.LEAF_EVALUATOR_NEURAL,
            model="connect4-pv", batch_size=batch_size, seed=0), timeout=600)
        return response.best_action

    return move


def measure(name: str, move: Callable[[str], int], rows: list[tuple[str, int]]) -> dict:
    kept, times = 0, []
    for moves, score in rows:
        started = time.perf_counter()
        column = move(moves)
        times.append((time.perf_counter() - started) * 1e3)
        kept += keeps_outcome(moves, column, score)
    return {"option": name, "positions": len(rows), "kept": kept,
            "kept_rate": kept / len(rows), "median_ms": statistics.median(times)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+")
    parser.add_argument("--limit", type=int, default=100)
    parser.add_argument("--simulations", type=int, default=20000)
    parser.add_argument("--neural-simulations", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--mcts-target", default="127.0.0.1:50052")
    parser.add_argument("--no-neural", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    results = []
    with grpc.insecure_channel(args.mcts_target) as channel:
        stub = mcts_service_pb2_grpc.MctsServiceStub(channel)
        for file in args.files:
            rows = read_pons(Path(file), args.limit)
            configs: list[tuple[str, Callable[[str], int]]] = [
                (f"{name}, {args.simulations} sims", rollout_move(config, threads,
                                                                  args.simulations))
                for name, (config, threads) in ROLLOUT_OPTIONS.items()]
            if not args.no_neural:
                n = args.neural_simulations
                configs += [
                    (f"uct rollouts, {n} sims", rollout_move(BASE, 1, n)),
                    (f"puct + connect4-pv (batch {args.batch_size}), {n} sims",
                     service_move(stub, pb.SELECTION_RULE_PUCT, n, args.batch_size)),
                    (f"gumbel + connect4-pv (batch {args.batch_size}), {n} sims",
                     service_move(stub, pb.SELECTION_RULE_GUMBEL, n, args.batch_size)),
                ]
            print(f"\n{Path(file).name}: first {len(rows)} positions")
            print(f"{'option':<58} {'kept':>6} {'rate':>7} {'median ms':>10}")
            for name, move in configs:
                result = {"file": Path(file).name, **measure(name, move, rows)}
                results.append(result)
                print(f"{name:<58} {result['kept']:>6} {result['kept_rate']:>7.1%} "
                      f"{result['median_ms']:>10.1f}", flush=True)
    if args.json:
        print(json.dumps({"results": results}))


if __name__ == "__main__":
    main()
