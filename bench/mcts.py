"""UCT for Connect Four: the numba search of services/mcts against a plain pure-Python UCT.

Both search from the empty board with c = 2, one rollout per new leaf, the same expansion rule
(the root at once, other leaves on their second visit) and the same rollout policy (uniform random
with decisive and anti-decisive moves). The pure-Python search keeps one object per node and a
list of children, with Python-int bitboards; it is the baseline a straightforward implementation
gives. Runs alternate between the implementations (interleaved, same process) and the table shows
medians of simulations per CPU-second (process time, all threads) and per wall-second.

    .venv/bin/python bench/mcts.py [--rounds 5] [--simulations 200000] [--python-simulations 5000]
                                   [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import time

from services.mcts.search import uct_search

WIDTH, HEIGHT, H1 = 7, 6, 7
CELLS = WIDTH * HEIGHT
BOTTOM = sum(1 << (c * H1) for c in range(WIDTH))
BOARD = BOTTOM * ((1 << HEIGHT) - 1)


def completing(stones: int) -> int:
    """Cells completing four in a row for `stones` (occupied or not)."""
    r = (stones << 1) & (stones << 2) & (stones << 3)
    for shift in (H1, HEIGHT, HEIGHT + 2):
        p = (stones << shift) & (stones << 2 * shift)
        r |= p & (stones << 3 * shift)
        r |= p & (stones >> shift)
        p = (stones >> shift) & (stones >> 2 * shift)
        r |= p & (stones << shift)
        r |= p & (stones >> 3 * shift)
    return r & BOARD


def playable(mask: int) -> list[int]:
    """Single-bit moves: the lowest empty cell of each non-full column, left to right."""
    cells = (mask + BOTTOM) & BOARD
    return [cells & (((1 << HEIGHT) - 1) << (c * H1)) for c in range(WIDTH)
            if cells & (((1 << HEIGHT) - 1) << (c * H1))]


class Node:
    __slots__ = ("parent", "move", "children", "visits", "value_sum", "won", "drawn")

    def __init__(self, parent: Node | None, move: int, won: bool, drawn: bool) -> None:
        self.parent = parent
        self.move = move
        self.children: list[Node] = []
        self.visits = 0
        self.value_sum = 0.0
        self.won = won
        self.drawn = drawn


def rollout(position: int, mask: int, num_moves: int, rng: random.Random) -> float:
    sign = 1.0
    mine, theirs = position, position ^ mask
    while num_moves < CELLS:
        moves = playable(mask)
        cells = sum(moves)
        if completing(mine) & cells:
            return sign
        threats = completing(theirs) & cells
        move = threats & -threats if threats else rng.choice(moves)
        mine |= move
        mask |= move
        mine, theirs = theirs, mine
        num_moves += 1
        sign = -sign
    return 0.0


def python_uct(simulations: int, exploration: float, seed: int) -> Node:
    """Pure-Python UCT from the empty board; returns the root."""
    rng = random.Random(seed)
    root = Node(None, 0, False, False)
    for _ in range(simulations):
        node, position, mask, num_moves = root, 0, 0, 0
        while node.children:
            log_n = math.log(node.visits)
            best, best_score = node.children[0], -math.inf
            for child in node.children:
                if child.visits == 0:
                    best = child
                    break
                score = child.value_sum / child.visits + exploration * math.sqrt(
                    log_n / child.visits)
                if score > best_score:
                    best, best_score = child, score
            node = best
            position, mask = position ^ mask, mask | node.move
            num_moves += 1
        if not (node.won or node.drawn) and (node is root or node.visits > 0):
            wins = completing(position)
            node.children = [Node(node, move, bool(wins & move), num_moves + 1 == CELLS)
                             for move in playable(mask)]
            node = node.children[0]
            position, mask = position ^ mask, mask | node.move
            num_moves += 1
        if node.won:
            value = 1.0
        elif node.drawn:
            value = 0.0
        else:
            value = -rollout(position, mask, num_moves, rng)
        while node is not None:
            node.visits += 1
            node.value_sum += value
            value = -value
            node = node.parent
    return root


def timed(run, simulations: int) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    run()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return simulations / cpu, simulations / wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--simulations", type=int, default=200_000)
    parser.add_argument("--python-simulations", type=int, default=5_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    uct_search("", 64, threads=2)  # compile (or load numba's cache) before timing
    runs: dict[str, list[tuple[float, float]]] = {"numba": [], "numba_threads2": [], "python": []}
    for round_ in range(args.rounds):
        runs["numba"].append(timed(lambda r=round_: uct_search("", args.simulations, 2.0, r),
                                   args.simulations))
        runs["python"].append(timed(lambda r=round_: python_uct(args.python_simulations, 2.0, r),
                                    args.python_simulations))
        runs["numba_threads2"].append(
            timed(lambda r=round_: uct_search("", args.simulations, 2.0, r, threads=2),
                  args.simulations))

    medians = {name: (statistics.median(c for c, _ in values),
                      statistics.median(w for _, w in values))
               for name, values in runs.items()}
    base_cpu, base_wall = medians["python"]
    print(f"Connect Four UCT from the empty board, c=2, {args.rounds} interleaved rounds (medians)")
    print(f"{'implementation':<28} {'sims/CPU-s':>12} {'sims/wall-s':>12} {'x python (CPU)':>15}")
    labels = {"numba": "numba UCT, 1 thread", "numba_threads2": "numba UCT, root-parallel x2",
              "python": "pure-Python UCT (objects)"}
    for name in ("numba", "numba_threads2", "python"):
        cpu, wall = medians[name]
        print(f"{labels[name]:<28} {cpu:>12,.0f} {wall:>12,.0f} {cpu / base_cpu:>15.1f}")
    if args.json:
        print(json.dumps({
            "uct_c4_sims_per_cpu_s": round(medians["numba"][0], 1),
            "uct_c4_sims_per_wall_s": round(medians["numba"][1], 1),
            "uct_c4_threads2_sims_per_cpu_s": round(medians["numba_threads2"][0], 1),
            "uct_c4_threads2_sims_per_wall_s": round(medians["numba_threads2"][1], 1),
            "pure_python_c4_sims_per_cpu_s": round(base_cpu, 1),
            "pure_python_c4_sims_per_wall_s": round(base_wall, 1),
            "ratio": round(medians["numba"][0] / base_cpu, 1),
        }))


if __name__ == "__main__":
    main()
