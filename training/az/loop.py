"""The AlphaZero loop for Connect Four (Silver et al. 2018, "A general reinforcement learning
algorithm that masters chess, shogi and Go through self-play"; with AlphaGo Zero's gating, Silver
et al. 2017): `mcts-mesh train connect4-az`.

One generation g (1, 2, ...):
1. self-play: `games_per_generation` games of batched PUCT over the best network (Dirichlet root
   noise, temperature 1 for the first `temperature_moves` plies, then greedy, no resignation),
   played here or by `actors` separate `mcts-mesh selfplay-actor` processes; shards of generation
   g in `replay/`;
2. the replay window: the shards of generations g - window + 1 .. g (older ones deleted), with
   mirrors;
3. training: the latest network (the previous candidate) takes `steps_per_generation` AdamW steps
   of cross-entropy + MSE;
4. the arena: candidate against best, `arena_games` games, half with each colour, root noise on;
   the candidate becomes the best when it scores >= `arena_threshold` (win 1, draw 1/2);
5. evaluation: on Pons' benchmark (7x6) and, on the small boards and tic-tac-toe, by the exact
   values (`training.az.exact`): the candidate alone and PUCT with it;
6. checkpoint `checkpoints/gen-GGGG` (the candidate; atomic) whose config.json holds the whole
   history and the settings; `best.json` names the best generation.
Generation 0 is the starting network (random, or `init_from`), evaluated on Pons.

Resuming: the newest checkpoint that loads is the state; one that does not (corrupt, another
architecture or size) is reported with its path and the previous one is used. Temporary files of
an interrupted write are removed. The self-play of the generation being redone is not played again
when its shards were written before the interruption.

Interrupting (Ctrl-C: KeyboardInterrupt): the generation in progress is dropped, the actors this
learner started are interrupted too (`stop_actors`), and `RunInterrupted` names the last complete
generation, whose checkpoint a resume starts from.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from services.neural.checkpoint import CheckpointError
from training.az import learner
from training.az.evaluation import pons_rates
from training.az.exact import ExactSet, exact_rates, judged_set
from training.az.games import GameRecord, SearchOptions, play_games
from training.az.replay import ReplayBuffer
from training.az.settings import AZSettings
from training.device import resolve_device

SETTINGS_FILE = "settings.json"
ACTOR_STOP_S = 10.0
"""Seconds the actors this learner started get to exit after their SIGINT, before SIGKILL."""
log = logging.getLogger(__name__)


class RunInterrupted(KeyboardInterrupt):
    """The run was interrupted (KeyboardInterrupt) before it reached its last generation.

    Attributes:
        generation: the last complete generation: the newest checkpoint that loads, which a
            resume starts from (`resumable_generation`); -1 when none does.
        checkpoint: that checkpoint's directory (None when there is none).
    """

    def __init__(self, generation: int, checkpoint: Path | None) -> None:
        super().__init__(generation, checkpoint)
        self.generation = generation
        self.checkpoint = checkpoint


def selfplay_options(settings: AZSettings, simulations: int | None = None) -> SearchOptions:
    return SearchOptions(simulations=simulations or settings.simulations,
                         leaves_per_search=settings.leaves_per_search, c_puct=settings.c_puct,
                         virtual_loss=settings.virtual_loss,
                         dirichlet_alpha=settings.dirichlet_alpha,
                         dirichlet_epsilon=settings.dirichlet_epsilon)


def self_play(settings: AZSettings, evaluate, games: int, seed: int) -> list[GameRecord]:
    """`games` self-play games of one network (see the module doc)."""
    records, _ = play_games([evaluate], [(0, 0)] * games, settings.concurrent_games,
                            selfplay_options(settings), settings.temperature_moves, seed,
                            settings.boards(), settings.opening_plies)
    return records


def arena(settings: AZSettings, candidate, best, seed: int) -> dict[str, Any]:
    """Candidate (evaluator 0) against best (1), half the games with each colour, noise on.

    Returns:
        games, wins, draws, losses (the candidate's), score = (wins + draws / 2) / games, and the
        score with each colour.
    """
    sides = [(0, 1) if game % 2 == 0 else (1, 0) for game in range(settings.arena_games)]
    records, _ = play_games([candidate, best], sides, settings.concurrent_games,
                            selfplay_options(settings, settings.arena_simulations),
                            settings.arena_temperature_moves, seed, settings.boards())
    points = np.array([0.5 if r.winner < 0 else float(r.sides[r.winner] == 0) for r in records])
    first = np.array([r.sides[0] == 0 for r in records])
    return {"games": len(records), "wins": int((points == 1).sum()),
            "draws": int((points == 0.5).sum()), "losses": int((points == 0).sum()),
            "score": round(float(points.mean()), 4),
            "score_moving_first": round(float(points[first].mean()), 4),
            "score_moving_second": round(float(points[~first].mean()), 4)}


class Run:
    """State of one run directory: the latest network, the best one, the history."""

    def __init__(self, settings: AZSettings, report: Callable[[str], None] = print) -> None:
        self.settings = settings
        self.report = report
        self.device = resolve_device(settings.device)
        self.run_dir = Path(settings.run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        _remove_temporaries(self.run_dir)
        self.game = settings.boards()
        self.buffer = ReplayBuffer(self.run_dir / "replay", self.game)
        self.judged: ExactSet | None = None
        """The exact evaluation's positions and labels (built by `start`)."""
        _write_json(self.run_dir / SETTINGS_FILE, json.loads(settings.model_dump_json()))
        self.generation = -1
        self.history: list[dict[str, Any]] = []
        self.best_generation = 0
        self.model = self.best = None
        self.resumed_from: int | None = None
        self.actors: list[subprocess.Popen] = []
        """The actor processes this learner started (their exit stops the run)."""

    def start(self) -> None:
        """Loads the newest good checkpoint, or makes and evaluates generation 0."""
        s = self.settings
        if s.exact and not s.is_standard:
            self.judged = judged_set(self.game, s.exact_max_positions, s.exact_sample, s.seed)
        for generation in sorted(_generations(self.run_dir), reverse=True):
            path = learner.generation_dir(self.run_dir, generation)
            try:
                self._resume(generation, path)
                return
            except CheckpointError as error:
                self.report(f"checkpoint left out: {error}")
        self._generation_zero()

    def _resume(self, generation: int, path: Path) -> None:
        model, metadata = learner.load_generation(path, self.settings.network, self.device)
        history = metadata.get("history")
        if not isinstance(history, list) or not history:
            raise CheckpointError(f"{path / 'config.json'}: no history in its metadata")
        best_generation = int(metadata.get("best_generation", generation))
        best_path = learner.generation_dir(self.run_dir, best_generation)
        best, _ = learner.load_generation(best_path, self.settings.network, self.device)
        self.model, self.best = model, best
        self.generation, self.history, self.best_generation = generation, history, best_generation
        self.resumed_from = generation
        learner.write_best(self.run_dir, best_generation, generation)
        self.report(f"resumed at generation {generation} (best: {best_generation}) from {path}")

    def _generation_zero(self) -> None:
        settings = self.settings
        started, cpu = time.perf_counter(), time.process_time()
        if settings.init_from is not None:
            model, _ = learner.load_generation(Path(settings.init_from), settings.network,
                                               self.device)
        else:
            model = learner.new_model(settings.network, settings.seed, self.device)
        self.model, self.best = model, copy.deepcopy(model)
        self.generation, self.best_generation = 0, 0
        entry = {"generation": 0, "init_from": str(settings.init_from or "random"),
                 "pons": self._pons(model), "exact": self._exact(model, 0), "promoted": True,
                 "best_generation": 0,
                 "cpu_s": {"eval": round(time.process_time() - cpu, 2)},
                 "wall_s": round(time.perf_counter() - started, 2)}
        self.history = [entry]
        self._save(entry)

    def _exact(self, model, generation: int) -> dict[str, Any]:
        """The exact-value rates of `model` (`training.az.exact`); {} when not judged."""
        s = self.settings
        if self.judged is None:
            return {}
        return exact_rates(learner.evaluator(model, self.device), self.judged, self.game,
                           s.exact_simulations, s.exact_puct_positions, s.leaves_per_search,
                           s.c_puct, s.seed + generation)

    def _pons(self, model) -> dict[str, Any]:
        s = self.settings
        if not s.is_standard:
            return {}
        return pons_rates(learner.evaluator(model, self.device), Path(s.pons_dir), s.pons_files,
                          s.pons_positions, s.pons_simulations, s.leaves_per_search, s.c_puct)

    def _save(self, entry: dict[str, Any]) -> None:
        metadata = {"trainer": "training.az (AlphaZero loop)",
                    "generation": self.generation, "best_generation": self.best_generation,
                    "device": self.device, "history": self.history,
                    "settings": json.loads(self.settings.model_dump_json()),
                    "totals": _totals(self.history)}
        learner.save_generation(self.run_dir, self.generation, self.model, metadata)
        learner.write_best(self.run_dir, self.best_generation, self.generation)
        self.report(_line(entry))

    def step(self) -> dict[str, Any]:
        """Runs the next generation; returns its history entry."""
        s = self.settings
        g = self.generation + 1
        started = time.perf_counter()
        cpu: dict[str, float] = {}
        learner.write_best(self.run_dir, self.best_generation, g)
        clock = time.process_time()
        produced = self._collect(g, s.seed * 1_000_003 + g)
        cpu["selfplay"] = round(produced["cpu_s"], 2)
        first = max(1, g - s.window_generations + 1)
        rolled = self.buffer.roll(first)
        data, window = self.buffer.load(first, s.mirror)
        window["shards_deleted"] = rolled
        clock = time.process_time()
        train_started = time.perf_counter()
        candidate = copy.deepcopy(self.model)
        losses = learner.train_steps(candidate, data, s.steps_per_generation, s.batch_size,
                                     s.learning_rate_at(g), s.weight_decay, self.device,
                                     np.random.default_rng([s.seed, g]))
        cpu["train"] = round(time.process_time() - clock, 2)
        train_wall = time.perf_counter() - train_started
        clock = time.process_time()
        match = arena(s, learner.evaluator(candidate, self.device),
                      learner.evaluator(self.best, self.device), s.seed * 7_919 + g)
        cpu["arena"] = round(time.process_time() - clock, 2)
        promoted = match["score"] >= s.arena_threshold and match["games"] >= s.arena_games
        clock = time.process_time()
        pons = self._pons(candidate)
        exact = self._exact(candidate, g)
        cpu["eval"] = round(time.process_time() - clock, 2)
        self.model = candidate
        if promoted:
            self.best, self.best_generation = copy.deepcopy(candidate), g
        self.generation = g
        entry = {"generation": g, "games": produced["games"], "positions": produced["positions"],
                 "window": window, "learning_rate": s.learning_rate_at(g), "losses": losses,
                 "arena": match, "promoted": promoted,
                 "best_generation": self.best_generation, "pons": pons, "exact": exact,
                 "cpu_s": cpu,
                 "gpu_train_s": round(train_wall, 2) if self.device == "cuda" else 0.0,
                 "wall_s": round(time.perf_counter() - started, 2)}
        self.history.append(entry)
        self._save(entry)
        return entry

    def _collect(self, generation: int, seed: int) -> dict[str, float]:
        """Self-play of `generation`: played here, or awaited from the actors' shards."""
        s = self.settings
        if s.actors == 0 and not s.external_actors:
            # Games of this generation already on disk were written before an interruption.
            missing = s.games_per_generation - self.buffer.produced(generation)["games"]
            if missing > 0:
                clock = time.process_time()
                records = self_play(s, learner.evaluator(self.best, self.device), missing, seed)
                self.buffer.write(records, generation, "learner", time.process_time() - clock,
                                  self.best_generation)
        else:
            while self.buffer.produced(generation)["games"] < s.games_per_generation:
                _check_actors(self.actors)
                time.sleep(0.5)
        return self.buffer.produced(generation)


def train_connect4_az(settings: AZSettings, report: Callable[[str], None] = print
                      ) -> dict[str, Any]:
    """Runs (or resumes) the loop up to `settings.generations`; returns the last checkpoint's
    summary (generation, best generation, history, totals).

    Raises:
        ValueError: a bad `--device`.
        ReplayError: the replay directory was written by a newer version (names the file).
        FileNotFoundError: a Pons file is missing.
        RunInterrupted: a KeyboardInterrupt stopped the run (names the last complete generation;
            the actors are stopped first).
    """
    previous = torch.get_num_threads()
    torch.set_num_threads(settings.torch_threads)
    run = Run(settings, report)
    try:
        run.start()
        run.actors = start_actors(run.run_dir, settings.actors, settings.torch_threads)
        while run.generation < settings.generations:
            run.step()
        # Tells the actors the run is over (an iteration past the last).
        learner.write_best(run.run_dir, run.best_generation, settings.generations + 1)
    except KeyboardInterrupt as interrupt:
        done = resumable_generation(run.run_dir, settings.network)
        path = learner.generation_dir(run.run_dir, done) if done >= 0 else None
        raise RunInterrupted(done, path) from interrupt
    finally:
        stop_actors(run.actors)
        torch.set_num_threads(previous)
    return {"run_dir": str(run.run_dir), "generation": run.generation,
            "best_generation": run.best_generation, "resumed_from": run.resumed_from,
            "device": run.device, "totals": _totals(run.history), "history": run.history}


def start_actors(run_dir: Path, count: int, torch_threads: int) -> list[subprocess.Popen]:
    """Starts `count` `mcts-mesh selfplay-actor` processes on this machine."""
    actors = []
    for index in range(count):
        command = [sys.executable, "-m", "mcts_mesh.cli", "selfplay-actor", "--run-dir",
                   str(run_dir), "--actor-id", str(index), "--torch-threads", str(torch_threads)]
        actors.append(subprocess.Popen(command, env={**os.environ, "PYTHONUNBUFFERED": "1"}))
    return actors


def _check_actors(actors: list[subprocess.Popen]) -> None:
    for actor in actors:
        if actor.poll() is not None:
            raise RuntimeError(f"self-play actor {actor.args[-3]} exited with status "
                               f"{actor.returncode}")


def stop_actors(actors: list[subprocess.Popen], timeout_s: float = ACTOR_STOP_S) -> None:
    """Interrupts the actors (SIGINT: the shard in progress is dropped, as it is of a generation
    the run will not train on now) and waits for them, all together at most `timeout_s` seconds,
    then kills those left. (SIGTERM would let each finish its shard: minutes at the default
    settings.)"""
    for actor in actors:
        if actor.poll() is None:
            actor.send_signal(signal.SIGINT)
    deadline = time.monotonic() + timeout_s
    for actor in actors:
        try:
            actor.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            actor.kill()
            actor.wait()


def resumable_generation(run_dir: Path, network: dict[str, int]) -> int:
    """The generation a run in `run_dir` of the sizes `network` resumes from: its newest
    checkpoint that loads (-1: none does). Reads the checkpoints, on the CPU."""
    for generation in sorted(_generations(run_dir), reverse=True):
        try:
            learner.load_generation(learner.generation_dir(run_dir, generation), network, "cpu")
        except CheckpointError:
            continue
        return generation
    return -1


def _generations(run_dir: Path) -> list[int]:
    found = []
    for path in (run_dir / "checkpoints").glob("gen-*"):
        try:
            found.append(int(path.name[4:]))
        except ValueError:
            continue
    return found


def _remove_temporaries(run_dir: Path) -> None:
    """Removes what an interrupted atomic write left (hidden `.name.xxxx` files/directories)."""
    for folder in (run_dir, run_dir / "checkpoints", run_dir / "replay"):
        if not folder.is_dir():
            continue
        for path in folder.glob(".*"):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)


def _write_json(path: Path, document: dict[str, Any]) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.write_text(json.dumps(document, indent=2) + "\n")
    temporary.replace(path)


def _totals(history: list[dict[str, Any]]) -> dict[str, float]:
    cpu = sum(sum(entry.get("cpu_s", {}).values()) for entry in history)
    return {"generations": len(history) - 1,
            "games": sum(entry.get("games", 0) for entry in history),
            "positions": sum(entry.get("positions", 0) for entry in history),
            "cpu_hours": round(cpu / 3600, 4),
            "gpu_minutes": round(sum(e.get("gpu_train_s", 0.0) for e in history) / 60, 3),
            "promotions": sum(1 for e in history[1:] if e.get("promoted"))}


def _line(entry: dict[str, Any]) -> str:
    """One line per generation for the terminal."""
    parts = [f"generation {entry['generation']}"]
    if "arena" in entry:
        a = entry["arena"]
        parts.append(f"arena {a['score']:.3f} ({a['wins']}W {a['draws']}D {a['losses']}L)"
                     f"{' promoted' if entry['promoted'] else ''}")
        parts.append(f"loss {entry['losses']['total']:.3f}")
        parts.append(f"positions {entry['positions']} window {entry['window']['generations']}")
    for name, rates in entry.get("pons", {}).items():
        parts.append(f"{name} net {rates['network']:.2f} puct {rates['puct']:.2f}")
    if entry.get("exact"):
        e = entry["exact"]
        parts.append(f"exact net {e['network']:.4f} puct {e['puct']:.4f} ({e['positions']} "
                     f"positions, {e['puct_positions']} for PUCT)")
    parts.append(f"{entry['wall_s']:.0f} s")
    return ", ".join(parts)
