"""The mcts service's search against its peers, in one process, interleaved; medians and ratios.

Three parts (issue 4, "Benchmarks"):

1. Connect Four UCT from the empty board, c = 2, one random rollout per leaf, `--simulations`
   (default 20,000 and 200,000) simulations: our numba kernel
   (`services.mcts.rollout.connect4.uct_search`) against OpenSpiel's C++ `pyspiel.MCTSBot` (with
   `pyspiel.RandomRolloutEvaluator(1, seed)`, solve off, `mcts_search` from the initial state of
   `connect_four`) and the object-per-node pure-Python UCT of `bench/mcts_python.py`
   (`--python-simulations`, default 5,000: it is slow, and rates are per second). All three use
   uniformly random rollouts and the same expansion rule (a leaf is expanded on its second visit,
   the root at once), as OpenSpiel does. Our default rollouts take immediate wins and block
   immediate losses ("decisive"); rows with those rollouts (ours and pure Python) are shown apart.
   Within a round every implementation runs once per size, in turn; a first round warms up
   unrecorded (our searches then reuse trees whose memory is already mapped,
   `services.mcts.rollout.engine.SPARE_TREES`, as a service's do); the table shows medians over
   `--rounds` rounds of simulations per CPU-second of this process (`time.process_time`, all
   threads: OpenSpiel's C++ and our numba kernels both run in this process) and per wall-second,
   and the ratios per CPU-second.
2. Batched PUCT with a small MLP evaluator (embedding 64). The issue's "batch 1, 64 x 64 and
   64 x 800 simulations" is read as: root batch 1 (one search, one leaf per network call),
   64 actions, and 64 or 800 simulations per search: 64 x 64 and 64 x 800 are actions x
   simulations (mctx's examples and the Gumbel MuZero paper state search sizes that way, and 800
   is AlphaZero's simulation count; "batch 1" already fixes the number of roots, so the first 64
   cannot be a batch of 64 searches). Ours, twice: compiled (the headline rows and keys:
   `bench/mcts_puct.py`'s `ours_puct_mlp_compiled`, `BatchedSearch.run_compiled` with the MLP as
   the njit evaluator `mlp_evaluate`, the whole loop in numba) and ask/tell (rows and keys
   `*_asktell`: `ours_puct_mlp` over `BatchedSearch.next_batch` / `submit` with the numpy MLP,
   the driver for evaluators outside numba); theirs: `mctx.muzero_policy` (PUCT)
   and `mctx.gumbel_muzero_policy` (Gumbel, m = 16) on JAX CPU with the same weights
   (`bench/mcts_mctx.py`: one `jax.jit` per policy and size, compiled before timing,
   `block_until_ready`). muzero_policy runs twice: with our rule's Q scale (`q_as_ours`: the same
   PUCT formula, so both grow the same tree up to a few visits of 800: the like-for-like row the
   ratio keys use) and with mctx's default min-max Q normalisation, which with this network grows
   much deeper trees (depth ~55 against ~3 at 800 simulations) and so costs more per simulation
   for reasons of search behaviour, not implementation (shown apart, `*_default_q`). Ratios are
   mctx's median CPU time per search over ours, PUCT against muzero_policy and Gumbel against
   gumbel_muzero_policy (whose trees equal ours); `overhead_us_per_sim` is our own CPU time per
   simulation outside the network calls (64 x 800, PUCT, compiled: total minus a replay of the
   njit network on the search's leaves; ask/tell: total minus the timed numpy calls; see
   `bench/mcts_puct.py`).
   At root batch 1 every network call has batch 1 in both, and numpy's per-call cost for that
   MLP (~70 us per leaf) exceeds mctx's whole fused simulation; an extra row gives ours with
   `--puct-leaf-batch` (16) leaves per network call collected with virtual loss (still one root;
   mctx has no such option; the tree differs from the sequential one), keys `*_leaf_batch_*`.
3. Through the mesh: the same Connect Four search (`--hop-simulations`, default 20,000, the
   orchestrator's default) as a MctsService.Search over loopback gRPC against `uct_search`
   in-process (`bench/mcts_hop.py`): the hop's cost in ms and as a ratio.

A peer that is not installed (PyPI `open-spiel`; `jax[cpu]` and `mctx`) gets a row
"skipped: ... not installed" and null JSON values; so does our batched search while
`bench/mcts_puct.py` does not import.

    .venv/bin/python bench/mcts.py [--rounds 5] [--simulations 20000,200000]
        [--python-simulations 5000] [--puct-simulations 64,800] [--puct-actions 64]
        [--puct-searches 8] [--puct-leaf-batch 16] [--hop-simulations 20000] [--hop-rounds 10]
        [--no-hop] [--quick] [--json]

`--json` prints, last, one JSON object (keys in `build_report`'s doc).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:  # sibling modules when imported
    sys.path.insert(0, str(Path(__file__).resolve().parent))

import mcts_hop  # noqa: E402
import mcts_mctx  # noqa: E402
import numpy as np  # noqa: E402
from mcts_python import python_uct  # noqa: E402

from services.mcts.rollout.connect4 import uct_search  # noqa: E402

try:  # benchmark-only dependency
    import pyspiel
except ImportError:  # pragma: no cover - depends on the environment
    pyspiel = None

try:  # helper H3's side of part 2; "not available" until it imports
    import mcts_puct
except ImportError:  # pragma: no cover - depends on the tree
    mcts_puct = None

EXPLORATION = 2.0
OPENSPIEL_MEMORY_MB = 8192
"""MCTSBot's tree memory cap; far above what 200,000 simulations use, so no search stops early."""


@dataclass
class Options:
    """Sizes of one benchmark run (see the module doc and `--help`)."""

    rounds: int = 5
    simulations: tuple[int, ...] = (20_000, 200_000)
    python_simulations: int = 5_000
    puct_actions: int = 64
    puct_simulations: tuple[int, ...] = (64, 800)
    puct_searches: int = 8
    puct_leaf_batch: int = 16
    puct_embedding: int = 64
    hop_simulations: int = 20_000
    hop_rounds: int = 10


QUICK = Options(rounds=1, simulations=(2_000,), python_simulations=300, puct_simulations=(16,),
                puct_searches=2, puct_leaf_batch=4, hop_simulations=2_000, hop_rounds=2)
"""`--quick`: a smoke run of every part in seconds (after the kernels are compiled)."""


@dataclass
class Samples:
    """Per-run measurements of one row: rates (simulations per CPU-s and per wall-s) or times."""

    cpu: list[float] = field(default_factory=list)
    wall: list[float] = field(default_factory=list)

    def add(self, cpu: float, wall: float) -> None:
        self.cpu.append(cpu)
        self.wall.append(wall)

    def medians(self) -> tuple[float, float] | None:
        if not self.cpu:
            return None
        return statistics.median(self.cpu), statistics.median(self.wall)


def _rate(run: Callable[[], int]) -> tuple[float, float]:
    """Simulations per CPU-second and per wall-second of `run()` (which returns the simulations
    it completed)."""
    cpu, wall = time.process_time(), time.perf_counter()
    done = run()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return done / max(cpu, 1e-9), done / max(wall, 1e-9)


def openspiel_version() -> str | None:
    if pyspiel is None:
        return None
    from importlib.metadata import version

    return version("open-spiel")


def openspiel_uct(simulations: int, seed: int) -> int:
    """OpenSpiel's C++ MCTSBot (UCT, c = 2, one uniformly random rollout per leaf, solve off) from
    the initial Connect Four state; returns the root's visit count (the simulations done)."""
    game = pyspiel.load_game("connect_four")
    bot = pyspiel.MCTSBot(game, pyspiel.RandomRolloutEvaluator(1, seed), EXPLORATION,
                          simulations, OPENSPIEL_MEMORY_MB, False, seed, False)
    root = bot.mcts_search(game.new_initial_state())
    return int(root.explore_count)


def _ours_uct(simulations: int, seed: int, decisive: bool, threads: int = 1) -> int:
    return uct_search("", simulations, EXPLORATION, seed, threads,
                      decisive_rollouts=decisive).simulations


def _python(simulations: int, seed: int, decisive: bool) -> int:
    return python_uct(simulations, EXPLORATION, seed, decisive).visits


def connect_four_part(options: Options) -> dict:
    """Part 1: {"rows": {name: Samples}, "skipped": {name: reason}}; names are
    `ours_{n}`, `ours_threads2_{n}`, `ours_decisive_{n}`, `openspiel_{n}` per size n, and
    `python`, `python_decisive` (one size, `python_simulations`)."""
    uct_search("", 64, threads=2, decisive_rollouts=False)  # compile / load numba's cache
    uct_search("", 64, threads=2)
    rows: dict[str, Samples] = {}
    skipped: dict[str, str] = {}
    if pyspiel is None:
        skipped.update({f"openspiel_{n}": "skipped: open-spiel not installed"
                        for n in options.simulations})
    # Round -1 warms up, unrecorded: every implementation runs each size once, so that the
    # recorded rounds time a process in its steady state (our trees come from a pool of spare
    # trees whose pages are already mapped, as in a service running search after search).
    for round_ in range(-1, options.rounds):
        seed = round_ if round_ >= 0 else options.rounds  # a seed no recorded round uses
        for n in options.simulations:
            runs: list[tuple[str, Callable[[], int]]] = [
                (f"ours_{n}", lambda n=n, r=seed: _ours_uct(n, r, False)),
                (f"openspiel_{n}", lambda n=n, r=seed: openspiel_uct(n, r)),
                (f"ours_decisive_{n}", lambda n=n, r=seed: _ours_uct(n, r, True)),
                (f"ours_threads2_{n}", lambda n=n, r=seed: _ours_uct(n, r, False, 2)),
            ]
            for name, run in runs:
                if name in skipped:
                    continue
                rate = _rate(run)
                if round_ >= 0:
                    rows.setdefault(name, Samples()).add(*rate)
        for name, decisive in (("python", False), ("python_decisive", True)):
            rate = _rate(lambda r=seed, d=decisive: _python(options.python_simulations, r, d))
            if round_ >= 0:
                rows.setdefault(name, Samples()).add(*rate)
    return {"rows": rows, "skipped": skipped}


PAIRS = (("puct", ("muzero_matched", "muzero")), ("gumbel", ("gumbel",)))
"""Our rule and the mctx policies it is compared with (`bench/mcts_mctx.py`'s POLICIES); the first
of each is the like-for-like one the ratio keys use."""
MCTX_LABELS = {"muzero_matched": "mctx.muzero_policy, our Q scale",
               "muzero": "mctx.muzero_policy, default min-max Q",
               "gumbel": "mctx.gumbel_muzero_policy"}


VARIANT_LABELS = {"": "ours compiled (run_compiled)", "_asktell": "ours ask/tell (BatchedSearch)"}
OVERHEAD_LABELS = {"": "compiled", "_asktell": "ask/tell"}
"""Our two drivers of the batched search, by the suffix of their row names and JSON keys: the
compiled loop with the njit MLP (`ours_puct_mlp_compiled`, the headline) and the Python ask/tell
loop with the numpy MLP (`ours_puct_mlp`)."""


def _variants() -> dict:
    """Suffix -> our timed search function (`bench/mcts_puct.py`), as VARIANT_LABELS."""
    return {"": mcts_puct.ours_puct_mlp_compiled, "_asktell": mcts_puct.ours_puct_mlp}


def puct_part(options: Options) -> dict:
    """Part 2: {"rows": {name: Samples of seconds per search}, "overhead": {(suffix, n):
    [us/sim]}, "depth": {name: [max depth]}, "skipped": {name: reason}}; names
    `ours_{rule}{suffix}_{n}` (rule puct / gumbel, suffix of VARIANT_LABELS) and
    `mctx_{policy}_{n}` (policy of mcts_mctx.POLICIES) per simulation count n."""
    rows: dict[str, Samples] = {}
    overhead: dict[tuple[str, int], list[float]] = {}
    depth: dict[str, list[int]] = {}
    skipped: dict[str, str] = {}
    sizes = options.puct_simulations
    if mcts_puct is None:
        skipped.update({f"ours_{rule}{suffix}_{n}":
                        "not available: bench/mcts_puct.py does not import"
                        for rule, _ in PAIRS for suffix in VARIANT_LABELS for n in sizes})
    reason = mcts_mctx.available() if mcts_puct is not None else "needs bench/mcts_puct.py"
    if reason is not None:
        skipped.update({f"mctx_{policy}_{n}": f"skipped: {reason}"
                        for policy in mcts_mctx.POLICIES for n in sizes})
    leaf_overhead: dict[int, list[float]] = {}
    result = {"rows": rows, "overhead": overhead, "leaf_overhead": leaf_overhead, "depth": depth,
              "skipped": skipped}
    if mcts_puct is None:
        return result
    actions, embedding = options.puct_actions, options.puct_embedding
    model = mcts_puct.MlpMuZero(actions, embedding, 0)
    variants = _variants()
    observation = np.random.default_rng(1).normal(size=(1, embedding)).astype(np.float32)
    searches = {}
    for n in sizes:
        for rule, _ in PAIRS:  # compile / load numba's cache for both rules and both drivers
            for variant in variants.values():
                variant(actions, min(n, 8), embedding, 0, rule=rule, model=model)
        if options.puct_leaf_batch > 1:
            mcts_puct.ours_puct_mlp(actions, min(n, 8), embedding, 0, model=model,
                                    batch_size=options.puct_leaf_batch)
        if reason is None:
            for policy in mcts_mctx.POLICIES:
                searches[policy, n] = mcts_mctx.MctxSearch(model, policy, n)
                searches[policy, n].warm_up(observation)
    for round_ in range(options.rounds):
        for n in sizes:
            for k in range(options.puct_searches):
                seed = round_ * options.puct_searches + k
                for rule, policies in PAIRS:
                    for suffix, variant in variants.items():
                        ours = variant(actions, n, embedding, seed, rule=rule, model=model)
                        rows.setdefault(f"ours_{rule}{suffix}_{n}", Samples()).add(
                            ours["total_cpu_s"], ours["total_s"])
                        if rule == "puct":
                            overhead.setdefault((suffix, n), []).append(
                                ours["overhead_us_per_sim"])
                    for policy in policies:
                        if (policy, n) not in searches:
                            continue
                        theirs = mcts_mctx.timed_search(searches[policy, n], observation, seed)
                        rows.setdefault(f"mctx_{policy}_{n}", Samples()).add(
                            theirs["total_cpu_s"], theirs["total_s"])
                        depth.setdefault(f"mctx_{policy}_{n}", []).append(theirs["max_depth"])
                if options.puct_leaf_batch > 1:
                    ours = mcts_puct.ours_puct_mlp(actions, n, embedding, seed, model=model,
                                                   batch_size=options.puct_leaf_batch)
                    rows.setdefault(f"ours_puct_leaf_batch_{n}", Samples()).add(
                        ours["total_cpu_s"], ours["total_s"])
                    leaf_overhead.setdefault(n, []).append(ours["overhead_us_per_sim"])
    return result


def build_report(options: Options, *, hop: bool = True) -> dict:
    """Runs the parts and returns {"tables": [lines], "json": {...}}.

    JSON keys (null when the peer or our batched search is missing): uct_c4_sims_per_cpu_s,
    uct_c4_sims_per_wall_s, openspiel_c4_sims_per_cpu_s, pure_python_c4_sims_per_cpu_s (at the
    largest `simulations` size; pure Python at `python_simulations`), ratio_vs_openspiel_cpu,
    ratio_vs_python_cpu, per-size `uct_c4_{n}_*` / `openspiel_c4_{n}_*` rates, decisive-rollout
    and two-thread rates; puct_64x64_ratio_vs_mctx and puct_64x800_ratio_vs_mctx (mctx
    muzero_policy with our Q scale, CPU-s per search / ours compiled PUCT; keys named
    `puct_{A}x{n}_*` by the actual sizes, the issue's two always present),
    puct_{A}x{n}_ratio_vs_mctx_default_q (mctx's default Q normalisation),
    gumbel_{A}x{n}_ratio_vs_mctx, {rule}_{A}x{n}_ms_per_search, the same for the ask/tell driver
    with the suffix `_asktell` after `mctx` / `default_q` / the rule
    (`puct_{A}x{n}_ratio_vs_mctx_asktell`, `puct_asktell_{A}x{n}_ms_per_search`),
    mctx_{policy}_{A}x{n}_ms_per_search and _max_depth, overhead_us_per_sim (median, compiled
    PUCT, the largest size), overhead_us_per_sim_asktell, overhead_us_per_sim_{A}x{n} and
    overhead_us_per_sim_asktell_{A}x{n};
    hop_ms, hop_ratio, grpc_search_ms, in_process_search_ms (absent with `hop=False`);
    versions of the peers.
    """
    lines: list[str] = []
    out: dict = {}
    c4 = connect_four_part(options)
    rows, skipped = c4["rows"], c4["skipped"]
    python = rows["python"].medians()
    python_decisive = rows["python_decisive"].medians()
    lines.append(f"Connect Four UCT from the empty board, c = 2, one rollout per leaf; "
                 f"{options.rounds} interleaved rounds, medians")
    lines.append(f"{'implementation':<44} {'sims':>8} {'sims/CPU-s':>12} {'sims/wall-s':>12} "
                 f"{'x OpenSpiel':>11} {'x Python':>9}")
    largest = max(options.simulations)
    for n in options.simulations:
        openspiel = rows.get(f"openspiel_{n}", Samples()).medians()
        for name, label, base in (
                (f"ours_{n}", "ours (numba), random rollouts, 1 thread", python),
                (f"openspiel_{n}", "OpenSpiel C++ MCTSBot, random rollouts", python),
                (f"ours_threads2_{n}", "ours, random rollouts, root-parallel x2", python),
                (f"ours_decisive_{n}", "ours, decisive rollouts, 1 thread", python_decisive)):
            if name in skipped:
                lines.append(f"{name.rsplit('_', 1)[0]:<44} {n:>8} {skipped[name]}")
                continue
            cpu, wall = rows[name].medians()
            vs_os = f"{cpu / openspiel[0]:>11.1f}" if openspiel and "decisive" not in name \
                else f"{'-':>11}"
            lines.append(f"{label:<44} {n:>8} {cpu:>12,.0f} {wall:>12,.0f} {vs_os} "
                         f"{cpu / base[0]:>9.1f}")
            key = {"ours": "uct_c4", "openspiel": "openspiel_c4",
                   "ours_threads2": "uct_c4_threads2",
                   "ours_decisive": "uct_c4_decisive"}[name.rsplit("_", 1)[0]]
            out[f"{key}_{n}_sims_per_cpu_s"] = round(cpu, 1)
            out[f"{key}_{n}_sims_per_wall_s"] = round(wall, 1)
        out.setdefault(f"openspiel_c4_{n}_sims_per_cpu_s", None)
        out.setdefault(f"openspiel_c4_{n}_sims_per_wall_s", None)
    for label, value in (("pure Python (objects), random rollouts", python),
                         ("pure Python (objects), decisive rollouts", python_decisive)):
        lines.append(f"{label:<44} {options.python_simulations:>8} {value[0]:>12,.0f} "
                     f"{value[1]:>12,.0f} {'-':>11} {1.0:>9.1f}")
    out["uct_c4_sims_per_cpu_s"] = out[f"uct_c4_{largest}_sims_per_cpu_s"]
    out["uct_c4_sims_per_wall_s"] = out[f"uct_c4_{largest}_sims_per_wall_s"]
    out["openspiel_c4_sims_per_cpu_s"] = out[f"openspiel_c4_{largest}_sims_per_cpu_s"]
    out["pure_python_c4_sims_per_cpu_s"] = round(python[0], 1)
    out["pure_python_c4_sims_per_wall_s"] = round(python[1], 1)
    out["pure_python_c4_decisive_sims_per_cpu_s"] = round(python_decisive[0], 1)
    out["ratio_vs_openspiel_cpu"] = (
        None if out["openspiel_c4_sims_per_cpu_s"] is None
        else round(out["uct_c4_sims_per_cpu_s"] / out["openspiel_c4_sims_per_cpu_s"], 2))
    out["ratio_vs_python_cpu"] = round(out["uct_c4_sims_per_cpu_s"] / python[0], 1)
    out["ratio_decisive_vs_python_decisive_cpu"] = round(
        out[f"uct_c4_decisive_{largest}_sims_per_cpu_s"] / python_decisive[0], 1)

    puct = puct_part(options)
    rows, skipped = puct["rows"], puct["skipped"]
    a = options.puct_actions
    lines.append("")
    lines.append(f"Batched PUCT / Gumbel, MLP embedding {options.puct_embedding}, root batch 1, "
                 f"{a} actions; {options.rounds} x {options.puct_searches} interleaved searches, "
                 f"medians per search")
    lines.append(f"{'implementation':<44} {'AxN':>8} {'CPU ms':>12} {'wall ms':>12} "
                 f"{'x mctx CPU':>11} {'us/sim':>9}")
    largest_puct = max(options.puct_simulations)
    for n in options.puct_simulations:
        size = f"{a}x{n}"
        for rule, policies in PAIRS:
            theirs = {policy: rows.get(f"mctx_{policy}_{n}", Samples()).medians()
                      for policy in policies}
            for policy in policies:
                out[f"mctx_{policy}_{size}_ms_per_search"] = (
                    None if theirs[policy] is None else round(theirs[policy][0] * 1e3, 3))
                depths = puct["depth"].get(f"mctx_{policy}_{n}")
                out[f"mctx_{policy}_{size}_max_depth"] = (
                    None if not depths else statistics.median(depths))
            entries = []
            for suffix, variant_label in VARIANT_LABELS.items():
                ours = rows.get(f"ours_{rule}{suffix}_{n}", Samples()).medians()
                ratios = {policy: theirs[policy][0] / ours[0] if ours and theirs[policy]
                          else None for policy in policies}
                like = ratios[policies[0]]
                out[f"{rule}_{size}_ratio_vs_mctx{suffix}"] = (
                    None if like is None else round(like, 2))
                if rule == "puct":
                    other = ratios["muzero"]
                    out[f"puct_{size}_ratio_vs_mctx_default_q{suffix}"] = (
                        None if other is None else round(other, 2))
                out[f"{rule}{suffix}_{size}_ms_per_search"] = (
                    None if ours is None else round(ours[0] * 1e3, 3))
                entries.append((f"ours_{rule}{suffix}_{n}", f"{variant_label}, {rule}", ours,
                                like, ratios))
            mctx_entries = [(f"mctx_{policy}_{n}", MCTX_LABELS[policy], theirs[policy], None, {})
                            for policy in policies]
            for name, label, value, ratio, ratios in entries + mctx_entries:
                if name in skipped:
                    lines.append(f"{label:<44} {size:>8} {skipped[name]}")
                    continue
                vs = f"{ratio:>11.2f}" if ratio is not None else f"{'-':>11}"
                lines.append(f"{label:<44} {size:>8} {value[0] * 1e3:>12.2f} "
                             f"{value[1] * 1e3:>12.2f} {vs} {value[0] / n * 1e6:>9.1f}")
                if rule == "puct" and ratios.get("muzero") is not None:
                    lines.append(f"{'  x mctx default-Q PUCT (CPU)':<44} {size:>8} "
                                 f"{ratios['muzero']:>12.2f}  (mctx tree depth "
                                 f"{out[f'mctx_muzero_{size}_max_depth']:.0f} vs "
                                 f"{out[f'mctx_muzero_matched_{size}_max_depth']:.0f} matched)")
        for suffix in VARIANT_LABELS:
            overhead = puct["overhead"].get((suffix, n))
            out[f"overhead_us_per_sim{suffix}_{size}"] = (
                None if not overhead else round(statistics.median(overhead), 2))
            if overhead:
                label = f"  overhead outside the network, {OVERHEAD_LABELS[suffix]}"
                lines.append(f"{label:<44} {size:>8} {statistics.median(overhead):>12.1f} "
                             f"us/sim (CPU)")
        batched = rows.get(f"ours_puct_leaf_batch_{n}", Samples()).medians()
        if batched:
            b = options.puct_leaf_batch
            matched = rows.get(f"mctx_muzero_matched_{n}", Samples()).medians()
            default = rows.get(f"mctx_muzero_{n}", Samples()).medians()
            leaf_overhead = statistics.median(puct["leaf_overhead"][n])
            vs = f"{matched[0] / batched[0]:>11.2f}" if matched else f"{'-':>11}"
            lines.append(f"{f'ours ask/tell, puct, {b} leaves/call (v. loss)':<44} {size:>8} "
                         f"{batched[0] * 1e3:>12.2f} {batched[1] * 1e3:>12.2f} {vs} "
                         f"{batched[0] / n * 1e6:>9.1f}")
            lines.append(f"{'  its overhead outside the network':<44} {size:>8} "
                         f"{leaf_overhead:>12.1f} us/sim (CPU)"
                         + (f"; x mctx default-Q {default[0] / batched[0]:.2f}" if default
                            else ""))
            out[f"puct_{size}_leaf_batch_ms_per_search"] = round(batched[0] * 1e3, 3)
            out[f"puct_{size}_leaf_batch_ratio_vs_mctx"] = (
                round(matched[0] / batched[0], 2) if matched else None)
            out[f"puct_{size}_leaf_batch_ratio_vs_mctx_default_q"] = (
                round(default[0] / batched[0], 2) if default else None)
            out[f"overhead_us_per_sim_leaf_batch_{size}"] = round(leaf_overhead, 2)
            out["puct_leaf_batch"] = b
    out["overhead_us_per_sim"] = out[f"overhead_us_per_sim_{a}x{largest_puct}"]
    out["overhead_us_per_sim_asktell"] = out[f"overhead_us_per_sim_asktell_{a}x{largest_puct}"]
    for size in ("64x64", "64x800"):  # the keys, null when not measured at these sizes
        for suffix in VARIANT_LABELS:
            out.setdefault(f"puct_{size}_ratio_vs_mctx{suffix}", None)

    if hop:
        lines.append("")
        h = mcts_hop.measure_hop(options.hop_simulations, options.hop_rounds, EXPLORATION)
        lines.append(f"Through the mesh: Connect Four UCT, {h['simulations']:,} simulations, "
                     f"{h['rounds']} interleaved rounds, median wall ms")
        lines.append(f"  MctsService.Search over loopback gRPC {h['grpc_ms']:10.2f} ms "
                     f"(search {h['search_ms_in_service']:.2f} ms in the service)")
        lines.append(f"  uct_search in-process                 {h['in_process_ms']:10.2f} ms")
        lines.append(f"  the hop: {h['hop_ms']:+.2f} ms, x{h['hop_ratio']:.3f}")
        out.update({"hop_ms": round(h["hop_ms"], 3), "hop_ratio": round(h["hop_ratio"], 4),
                    "grpc_search_ms": round(h["grpc_ms"], 3),
                    "in_process_search_ms": round(h["in_process_ms"], 3),
                    "hop_simulations": h["simulations"]})
    out["versions"] = {"open-spiel": openspiel_version(), **mcts_mctx.versions()}
    return {"tables": lines, "json": out}


def _sizes(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(",") if part)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    defaults = Options()
    parser.add_argument("--rounds", type=int, default=defaults.rounds)
    parser.add_argument("--simulations", type=_sizes, default=defaults.simulations,
                        help="comma list of Connect Four simulation counts")
    parser.add_argument("--python-simulations", type=int, default=defaults.python_simulations)
    parser.add_argument("--puct-actions", type=int, default=defaults.puct_actions)
    parser.add_argument("--puct-simulations", type=_sizes, default=defaults.puct_simulations)
    parser.add_argument("--puct-searches", type=int, default=defaults.puct_searches,
                        help="searches per size and round (each implementation)")
    parser.add_argument("--puct-leaf-batch", type=int, default=defaults.puct_leaf_batch,
                        help="leaves per network call of the extra virtual-loss row (<= 1: off)")
    parser.add_argument("--hop-simulations", type=int, default=defaults.hop_simulations)
    parser.add_argument("--hop-rounds", type=int, default=defaults.hop_rounds)
    parser.add_argument("--no-hop", action="store_true", help="skip the gRPC part")
    parser.add_argument("--quick", action="store_true", help="a smoke run of every part")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    options = QUICK if args.quick else Options(
        rounds=args.rounds, simulations=args.simulations,
        python_simulations=args.python_simulations, puct_actions=args.puct_actions,
        puct_simulations=args.puct_simulations, puct_searches=args.puct_searches,
        puct_leaf_batch=args.puct_leaf_batch,
        hop_simulations=args.hop_simulations, hop_rounds=args.hop_rounds)
    report = build_report(options, hop=not args.no_hop)
    print("\n".join(report["tables"]), flush=True)
    if args.json:
        print(json.dumps(report["json"]))


if __name__ == "__main__":
    main()
