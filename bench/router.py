"""Accuracy and latency of the learned router against the rule router, on a mixed Connect Four
workload, in the same run.

Starts mcts, neural (serving `models/`, the meta-controller included) and two orchestrators over
them as child processes (more with `--variant`): "rules" (no router model: the rules run every
agent) and "learned" (`ORCHESTRATOR_ROUTER_MODEL`, default router-connect4, followed above
`ORCHESTRATOR_ROUTER_THRESHOLD`, the network added to a search route below
`ORCHESTRATOR_ROUTER_NETWORK_CHECK_BELOW`). The workload is `--per-file` positions of the "test"
split of each of Pons' six files (positions `mcts-mesh train router` never trains on; see
`training.router.workload`; `--split train` takes the train split's, to choose a setting
without looking at the test split), early and late shuffled together. Each position is sent to
every orchestrator one after the other, each going first in turn, at concurrency 1 over one
kept-alive channel each, with default budgets. Every returned column is judged with the exact
solver (cached in `--judge-cache`). Prints kept %, mean / median / p90 latency (client-side
wall-clock ms), the ratio of means, the share of first rounds the model routed, the share of exact
answers (the checker proved the outcome: the answer has one), and the load average before
and after.

    .venv/bin/python bench/router.py [--per-file 40] [--seed 0] [--model router-connect4] [--json]
                                     [--rows var/router/rows.jsonl] [--port-base 21000]
                                     [--variant NAME:KEY=VALUE,...]
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import grpc
import numpy as np
from mesh.orchestrator.v1 import orchestrator_service_pb2_grpc

from training.router.workload import Judge, Mesh, mixed_positions, solve


def summary(rows: list[dict]) -> dict:
    ms = np.array([r["latency_ms"] for r in rows])
    answered = [r for r in rows if not r["error"]]
    return {"positions": len(rows), "failed": len(rows) - len(answered),
            "kept_pct": 100.0 * sum(r["kept"] for r in answered) / max(1, len(rows)),
            "mean_ms": float(ms.mean()), "median_ms": float(np.median(ms)),
            "p90_ms": float(np.percentile(ms, 90)),
            "learned_pct": 100.0 * sum(r["decider"] == "learned" for r in rows) / len(rows),
            "exact_pct": 100.0 * sum(r.get("exact", False) for r in rows) / len(rows)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-file", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--split", choices=("test", "train"), default="test",
                        help="the positions: test (the table's; never trained on) or train (to "
                             "choose a setting without looking at the test split)")
    parser.add_argument("--model", default="router-connect4")
    parser.add_argument("--threshold", default=None, help="ORCHESTRATOR_ROUTER_THRESHOLD")
    parser.add_argument("--network-check-below", default=None,
                        help="ORCHESTRATOR_ROUTER_NETWORK_CHECK_BELOW (the network joins a "
                             "search route followed with a probability below it)")
    parser.add_argument("--judge-cache", default="var/router/judged.jsonl")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--rows", default="",
                        help="write every request (router, moves, file, column, kept, ms, "
                             "exact) to this JSON-lines file")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME:KEY=VALUE,...",
                        help="a further learned orchestrator measured in the same run, its "
                             "environment on top of the learned one's (e.g. 'before:"
                             "ORCHESTRATOR_ROUTER_THRESHOLD=0.6,"
                             "ORCHESTRATOR_ROUTER_NETWORK_CHECK_BELOW=0'); repeatable")
    parser.add_argument("--port-base", type=int, default=None,
                        help="serve on consecutive ports from this one (mcts, neural, then the "
                             "orchestrators); default: free ports the system chooses")
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes: a smoke run in seconds (make bench-quick)")
    args = parser.parse_args()
    if args.quick:
        args.per_file = 2
    positions = mixed_positions(args.split, args.per_file, args.seed)
    cache = Path(args.judge_cache) if args.judge_cache else None
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
    judge = Judge(cache)
    learned_env = {"ORCHESTRATOR_ROUTER_MODEL": args.model}
    if args.threshold is not None:
        learned_env["ORCHESTRATOR_ROUTER_THRESHOLD"] = args.threshold
    if args.network_check_below is not None:
        learned_env["ORCHESTRATOR_ROUTER_NETWORK_CHECK_BELOW"] = args.network_check_below
    orchestrators = {"rules": {}, "learned": learned_env}
    for variant in args.variant:
        name, _, assignments = variant.partition(":")
        items = [item for item in assignments.split(",") if item]
        if not name or name in orchestrators or not items \
                or not all("=" in item for item in items):
            parser.error(f"--variant {variant!r}: want a new NAME:KEY=VALUE,...")
        orchestrators[name] = {**learned_env, **dict(item.split("=", 1) for item in items)}
    load_before = os.getloadavg()
    rows: dict[str, list[dict]] = {name: [] for name in orchestrators}
    with Mesh(orchestrators, port_base=args.port_base) as mesh:
        channels = {name: grpc.insecure_channel(target) for name, target in mesh.targets.items()}
        stubs = {name: orchestrator_service_pb2_grpc.OrchestratorServiceStub(channel)
                 for name, channel in channels.items()}
        for stub in stubs.values():
            solve(stub, "4444443")  # warm-up
        for index, position in enumerate(positions):
            names = list(orchestrators)  # each goes first in turn
            for name in names[index % len(names):] + names[:index % len(names)]:
                answer = solve(stubs[name], position.moves)
                rows[name].append({"moves": position.moves, "file": position.file,
                                   "column": answer.column, "latency_ms": answer.latency_ms,
                                   "decider": answer.decider, "error": answer.error,
                                   "exact": answer.exact})
        for channel in channels.values():
            channel.close()
    for name in rows:  # judged after the mesh is down, so judging does not load the timing
        for row, position in zip(rows[name], positions, strict=True):
            row["kept"] = bool(row["column"]) and judge.kept(position, row["column"])
    load_after = os.getloadavg()
    if args.rows:
        with Path(args.rows).open("w") as handle:
            for name, rs in rows.items():
                for row in rs:
                    handle.write(json.dumps({"router": name, **row}) + "\n")
    table = {name: summary(r) for name, r in rows.items()}
    base = table["rules"]["mean_ms"]
    print(f"{len(positions)} positions ({args.per_file} per Pons file, {args.split} split, "
          f"shuffled); "
          f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f}")
    print(f"{'router':<10} {'kept %':>7} {'mean ms':>8} {'median ms':>9} {'p90 ms':>7} "
          f"{'x mean':>7} {'learned %':>9} {'exact %':>7} {'failed':>6}")
    for name, s in table.items():
        print(f"{name:<10} {s['kept_pct']:>7.1f} {s['mean_ms']:>8.1f} {s['median_ms']:>9.1f} "
              f"{s['p90_ms']:>7.1f} {s['mean_ms'] / base:>7.2f} {s['learned_pct']:>9.1f} "
              f"{s['exact_pct']:>7.1f} {s['failed']:>6}")
    per_file = {name: {file: summary([r for r in rs if r["file"] == file])
                       for file in sorted({r["file"] for r in rs})} for name, rs in rows.items()}
    print(f"{'file':<11} " + " ".join(f"{n + ' kept/mean':>20}" for n in rows))
    for file in sorted(per_file["rules"]):
        print(f"{file:<11} " + " ".join(
            f"{per_file[n][file]['kept_pct']:>10.1f}% {per_file[n][file]['mean_ms']:>7.1f}ms"
            for n in rows))
    if args.json:
        print(json.dumps({"table": table, "per_file": per_file,
                          "load_average": [load_before[0], load_after[0]]}))


if __name__ == "__main__":
    main()
