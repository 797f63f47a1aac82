"""How often does UCT alone keep the game-theoretic outcome on Pascal Pons' benchmark positions?

For each position the search (in process, no mesh) picks a move;
`libs.connect4.outcome.keeps_outcome` judges it with the exact solver. Prints one row per file;
`--json` prints one JSON object last.

    .venv/bin/python experiments/2026-11-22-mcts-outcome/mcts_outcome.py --simulations 200000 \\
        --limit 100 Test_L3_R1 Test_L2_R1
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from libs.connect4.outcome import keeps_outcome
from libs.connect4.pons import read_pons
from services.mcts.rollout.connect4 import uct_search

PONS_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "connect4-pons"


def evaluate(path: Path, limit: int | None, simulations: int, exploration: float, seed: int,
             threads: int, decisive: bool) -> dict[str, object]:
    rows = read_pons(path, limit)
    kept = 0
    rates = []
    started = time.perf_counter()
    for moves, score in rows:
        result = uct_search(moves, simulations, exploration, seed, threads,
                            decisive_rollouts=decisive)
        rates.append(result.simulations_per_second)
        kept += keeps_outcome(moves, result.best_action, score)
    return {
        "file": path.name,
        "positions": len(rows),
        "kept": kept,
        "keeps_outcome_rate": kept / len(rows),
        "median_simulations_per_second": sorted(rates)[len(rates) // 2],
        "wall_s": time.perf_counter() - started,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", help="Pons file names (in ../shared/data) or paths")
    parser.add_argument("--simulations", type=int, default=200_000)
    parser.add_argument("--exploration", type=float, default=2.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--plain-rollouts", action="store_true",
                        help="uniform random rollouts without decisive/anti-decisive moves")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    uct_search("", 16)  # compile before timing
    rows = []
    print(f"{'file':<12} {'positions':>9} {'kept':>6} {'rate':>7} {'sims/s':>10} {'wall s':>7}")
    for name in args.files:
        path = Path(name) if Path(name).is_file() else PONS_DIR / name
        row = evaluate(path, args.limit, args.simulations, args.exploration, args.seed,
                       args.threads, not args.plain_rollouts)
        rows.append(row)
        print(f"{row['file']:<12} {row['positions']:>9} {row['kept']:>6} "
              f"{row['keeps_outcome_rate']:>7.1%} {row['median_simulations_per_second']:>10.0f} "
              f"{row['wall_s']:>7.1f}", flush=True)
    if args.json:
        print(json.dumps({"simulations": args.simulations, "exploration": args.exploration,
                          "decisive_rollouts": not args.plain_rollouts, "files": rows}))


if __name__ == "__main__":
    main()
