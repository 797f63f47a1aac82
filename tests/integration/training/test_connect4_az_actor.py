"""Self-play actors and the learning-curve command on a run directory: an actor reads the best
checkpoint named by best.json and writes a shard of the learner's current generation; the
history of a checkpoint becomes a table and a PNG."""

from __future__ import annotations

import subprocess
import sys

import pytest

from training.az import learner
from training.az.actor import run_actor
from training.az.loop import Run
from training.az.replay import ReplayBuffer, read_shard
from training.az.settings import AZSettings

pytestmark = pytest.mark.slow

TINY = {"channels": 8, "blocks": 1, "value_hidden": 8, "games_per_generation": 4,
        "concurrent_games": 4, "simulations": 8, "leaves_per_search": 2, "pons_positions": 0,
        "device": "cpu"}


def test_an_actor_writes_shards_of_the_learners_generation_with_the_best_network(tmp_path):
    run = Run(AZSettings(run_dir=tmp_path, **TINY), report=lambda line: None)
    run.start()  # generation 0: best.json names it
    learner.write_best(tmp_path, 0, 1)  # the learner now collects generation 1
    assert run_actor(tmp_path, "pod-a", max_shards=2, report=lambda line: None) == 2
    shards = ReplayBuffer(tmp_path / "replay").shards()
    assert [g for g, _ in shards] == [1, 1]
    _, meta = read_shard(shards[0][1], meta_only=True)
    assert meta["source"] == "actor-pod-a" and meta["network"] == 0 and meta["games"] == 4
    assert meta["cpu_s"] > 0
    assert ReplayBuffer(tmp_path / "replay").produced(1)["games"] == 8
    # The learner marks the run finished: the actor stops without playing.
    learner.write_best(tmp_path, 0, run.settings.generations + 1)
    assert run_actor(tmp_path, "pod-a", report=lambda line: None) == 0


def test_plot_history_draws_the_curve_and_prints_the_table(tmp_path):
    from training.az.loop import train_connect4_az

    settings = AZSettings(run_dir=tmp_path / "run", generations=1, arena_games=4,
                          steps_per_generation=2, batch_size=16, **TINY)
    train_connect4_az(settings, report=lambda line: None)
    output = tmp_path / "curve.png"
    done = subprocess.run([sys.executable, "-m", "mcts_mesh.cli", "plot-history",
                           str(tmp_path / "run" / "checkpoints" / "gen-0001"),
                           "--output", str(output)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert output.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    lines = done.stdout.splitlines()
    assert lines[0].split()[:5] == ["gen", "games", "positions", "cpu_s", "arena"]
    assert lines[2].split()[0] == "1"
    broken = subprocess.run([sys.executable, "-m", "mcts_mesh.cli", "plot-history",
                             str(tmp_path / "missing")], capture_output=True, text=True,
                            timeout=120)
    assert broken.returncode != 0 and "missing/config.json" in broken.stderr
    assert "Traceback" not in broken.stderr
