"""Strength-speedup of root and tree parallelisation (Chaslot, Winands & van den Herik 2008,
"Parallel Monte-Carlo Tree Search") on Pascal Pons' Connect Four positions.

Chaslot et al. measure a parallel search by its strength-speedup: how many times more thinking
time the sequential search needs to play as strongly. Here time is counted in simulations (the
machine's cores are shared, so wall time would measure the load, not the algorithm): a parallel
search with T threads runs T x S simulations, S per thread, which take the wall time of S
sequential simulations when the T cores are free; the sequential search runs S x m simulations
for each m of a ladder (1, 2, 4, ...). Strength is the share of positions (x seeds) where the
chosen move keeps the game-theoretic outcome (`libs.connect4.outcome.keeps_outcome`, judged with
the exact solver once per position and column). Positions without a decision (lost ones, where
every move keeps the outcome, and those where every legal move keeps it) are left out: they
cannot tell searches apart. The strength-speedup is the m at which the sequential strength
reaches the parallel one, interpolated linearly in log2(m) between ladder rungs ("<= 1" or
"> max" outside the ladder). With `--transpositions` every search is also run with a
transposition table; the parallel rows are then compared with the ladder of sequential searches
with a table, and each sequential row with a table gets the table's own strength-speedup: the
plain simulations per simulation with the table that play as well. The output also gives the
measured simulations per wall-second and per CPU-second of each search, so the speedup in time
can be read off on an idle machine (short searches pay for starting their threads).

    .venv/bin/python experiments/2026-11-22-mcts-parallel/mcts_parallel.py Test_L2_R1 \\
        --limit 100 --simulations 2000 \\
        --threads 2 4 --ladder 1 2 4 8 --seeds 2 [--transpositions] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

from libs.connect4.board import WIDTH, Position
from libs.connect4.outcome import keeps_outcome
from libs.connect4.pons import read_pons
from services.mcts.rollout.connect4 import uct_search

PONS_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "connect4-pons"


def decisive_positions(files: list[str], limit: int | None) -> list[tuple[str, set[int]]]:
    """(moves, columns 1..7 that keep the outcome) for each position with a decision."""
    positions = []
    for name in files:
        path = Path(name) if Path(name).is_file() else PONS_DIR / name
        for moves, score in read_pons(path, limit):
            if score < 0:
                continue
            root = Position.from_moves(moves)
            legal = [col + 1 for col in range(WIDTH) if root.can_play(col)]
            good = {col for col in legal if keeps_outcome(moves, col, score)}
            if len(good) < len(legal):
                positions.append((moves, good))
    return positions


def strength(positions: list[tuple[str, set[int]]], simulations: int, threads: int,
             parallelism: str, seeds: int, transpositions: bool) -> dict[str, float]:
    """Share of (position, seed) searches whose move keeps the outcome, and the speed."""
    kept = 0
    done = 0
    wall = 0.0
    cpu = 0.0
    for moves, good in positions:
        for seed in range(seeds):
            started_cpu = time.process_time()
            result = uct_search(moves, simulations, seed=seed, threads=threads,
                                parallelism=parallelism, transpositions=transpositions)
            cpu += time.process_time() - started_cpu
            wall += result.elapsed_s
            done += result.simulations
            kept += result.best_action in good
    searches = len(positions) * seeds
    return {"strength": kept / searches, "searches": searches,
            "simulations_per_wall_s": done / wall, "simulations_per_cpu_s": done / cpu}


def strength_speedup(ladder: list[tuple[int, float]], target: float) -> float | None:
    """The ladder multiple m (interpolated in log2 m) where the sequential strength first
    reaches `target`; ladder = [(m, strength)] by increasing m. 0.0 when the first rung already
    reaches it, None when no rung does."""
    if target <= ladder[0][1]:
        return 0.0
    for (m0, s0), (m1, s1) in zip(ladder, ladder[1:], strict=False):
        if s0 < target <= s1:
            fraction = (target - s0) / (s1 - s0)
            return 2 ** (math.log2(m0) + fraction * (math.log2(m1) - math.log2(m0)))
    return None


def speedup_text(value: float | None, ladder: list[tuple[int, float]], scale: float = 1.0) -> str:
    """`strength_speedup` as printed: "<= first rung" / "> last rung" outside the ladder;
    divided by `scale` (the searched multiple, for a search that itself ran m x S)."""
    if value is None:
        return f"> {ladder[-1][0] / scale:g}"
    if value == 0.0:
        return f"<= {ladder[0][0] / scale:g}"
    return f"{value / scale:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", default=["Test_L2_R1"],
                        help="Pons file names (in ../shared/data/connect4-pons) or paths")
    parser.add_argument("--limit", type=int, default=100, help="positions read per file")
    parser.add_argument("--simulations", type=int, default=2_000,
                        help="S: simulations per thread (and of the ladder's first rung)")
    parser.add_argument("--threads", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--ladder", type=int, nargs="+", default=[1, 2, 4, 8],
                        help="multiples m of S run by the sequential search")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--transpositions", action="store_true",
                        help="also run every search with a transposition table")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    for parallelism in ("root", "tree"):  # compile before timing
        uct_search("", 64, threads=2, parallelism=parallelism, transpositions=True)
        uct_search("", 64, threads=1, parallelism=parallelism)
    started = time.perf_counter()
    positions = decisive_positions(args.files, args.limit)
    print(f"{len(positions)} positions with a decision from {', '.join(args.files)} "
          f"(judged in {time.perf_counter() - started:.1f} s); S = {args.simulations}, "
          f"{args.seeds} seeds")
    tables = [False, True] if args.transpositions else [False]
    rows = []
    plain_ladder: list[tuple[int, float]] = []
    for transpositions in tables:
        ladder = []
        for m in sorted(args.ladder):
            row = strength(positions, args.simulations * m, 1, "root", args.seeds,
                           transpositions)
            row.update(search=f"sequential x{m}", threads=1, multiple=m,
                       transpositions=transpositions)
            if transpositions:
                # The table's own strength-speedup: plain simulations needed per simulation.
                row["strength_speedup"] = speedup_text(
                    strength_speedup(plain_ladder, row["strength"]), plain_ladder, m)
            ladder.append((m, row["strength"]))
            rows.append(row)
        for threads in args.threads:
            for parallelism in ("root", "tree"):
                row = strength(positions, args.simulations * threads, threads, parallelism,
                               args.seeds, transpositions)
                row.update(search=f"{parallelism} x{threads} threads", threads=threads,
                           parallelism=parallelism, transpositions=transpositions,
                           strength_speedup=speedup_text(
                               strength_speedup(ladder, row["strength"]), ladder))
                rows.append(row)
        if not transpositions:
            plain_ladder = ladder
    print(f"{'search':<22} {'table':>5} {'strength':>9} {'strength-speedup':>17} "
          f"{'sims/wall-s':>12} {'sims/CPU-s':>11}")
    for row in rows:
        print(f"{row['search']:<22} {'yes' if row['transpositions'] else 'no':>5} "
              f"{row['strength']:>9.1%} {row.get('strength_speedup', ''):>17} "
              f"{row['simulations_per_wall_s']:>12,.0f} {row['simulations_per_cpu_s']:>11,.0f}")
    if args.json:
        print(json.dumps({"files": args.files, "positions": len(positions),
                          "simulations_per_thread": args.simulations, "seeds": args.seeds,
                          "rows": rows}))


if __name__ == "__main__":
    main()
