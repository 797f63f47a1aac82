"""A self-play actor (`mcts-mesh selfplay-actor`): a separate process that reads the best
checkpoint named by the run directory's `best.json` and writes replay shards, so self-play scales
out over processes on one machine (`train connect4-az --actors N` starts them) or over pods (the
Deployment in deploy/k8s/). The actor and the learner share only the run directory (a volume).

Loop: read `best.json` (best generation g*, learner iteration i); reload the network when g*
changed; play `concurrent_games` games with the run's settings (`settings.json`, written by the
learner); write them as a shard of iteration i. It stops after `max_shards` shards, when the
learner marks the run finished, or on SIGTERM between shards.
"""

from __future__ import annotations

import signal
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from services.neural.checkpoint import CheckpointError
from training.az import learner
from training.az.loop import SETTINGS_FILE, self_play
from training.az.replay import ReplayBuffer
from training.az.settings import AZSettings
from training.device import resolve_device

POLL_S = 0.5


def run_actor(run_dir: Path | str, actor_id: str, torch_threads: int = 1,
              max_shards: int | None = None, device: str | None = None,
              report: Callable[[str], None] = print) -> int:
    """Plays and writes shards until stopped (see the module doc); returns the shards written.

    Args:
        actor_id: names the actor's shards and seeds its games: unique among the actors of a run
            (a number, or a pod's name).

    Raises:
        FileNotFoundError: the run directory has no settings.json after 10 minutes.
        pydantic.ValidationError: settings.json does not hold valid settings.
        ReplayError: the replay directory was written by a newer version.
    """
    run_dir = Path(run_dir)
    settings = AZSettings.model_validate_json(_wait_for(run_dir / SETTINGS_FILE).read_text())
    device = resolve_device(device or settings.device)
    torch.set_num_threads(torch_threads)
    buffer = ReplayBuffer(run_dir / "replay", settings.boards())
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    loaded, evaluate, written = None, None, 0
    while not stopping and (max_shards is None or written < max_shards):
        best = learner.read_best(run_dir)
        if best is None or best[1] > settings.generations:
            if best is not None:
                break
            time.sleep(POLL_S)
            continue
        generation, iteration = best
        if generation != loaded:
            try:
                model, _ = learner.load_generation(learner.generation_dir(run_dir, generation),
                                                   settings.network, device)
            except CheckpointError as error:
                report(f"actor {actor_id}: {error}; retrying")
                time.sleep(POLL_S)
                continue
            loaded, evaluate = generation, learner.evaluator(model, device)
        seed = int(np.random.SeedSequence([settings.seed, zlib.crc32(actor_id.encode()),
                                           iteration, written])
                   .generate_state(1)[0])
        clock = time.process_time()
        records = self_play(settings, evaluate, settings.concurrent_games, seed)
        path = buffer.write(records, iteration, f"actor-{actor_id}", time.process_time() - clock,
                            generation)
        written += 1
        report(f"actor {actor_id}: {path.name} ({len(records)} games, network {generation})")
    return written


def _wait_for(path: Path, timeout_s: float = 600.0) -> Path:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise FileNotFoundError(f"{path} not found: start the learner "
                                    "(mcts-mesh train connect4-az) on this run directory")
        time.sleep(POLL_S)
    return path
