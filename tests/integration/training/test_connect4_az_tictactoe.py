"""The AlphaZero loop learns, judged exactly: tic-tac-toe from random weights, through the same loop
as Connect Four (self-play, replay window with the board's symmetries, learner, arena), judged on
every one of the 4,520 reachable unfinished positions (labelled by an exhaustive negamax). After
12 generations the network alone and PUCT (50 simulations, on a uniform 500 of them) both keep the
game-theoretic outcome on every position: 100% (measured: the network alone from generation 9 on).
Two things make the last positions right: random openings (each self-play game starts after 0..6
random moves, so the openings after a blunder reach the data) and the square's eight symmetries
(without them the network stalled at 99.5-99.9%). Seeds fix every random draw (one torch thread),
so the run is the same on every machine with the same libraries; a broken value target,
symmetry or gating makes it miss. The history in the checkpoint's config.json holds the rates,
which plot-history draws."""

from __future__ import annotations

import json

import pytest
import torch

from training.az.loop import train_connect4_az
from training.az.plot import plot_history
from training.az.settings import AZSettings

pytestmark = pytest.mark.slow

TICTACTOE = {"game": "tictactoe", "channels": 32, "blocks": 2, "value_hidden": 32,
             "games_per_generation": 200, "concurrent_games": 200, "simulations": 100,
             "leaves_per_search": 8, "window_generations": 8, "steps_per_generation": 400,
             "batch_size": 256, "learning_rate": 3e-3, "arena_games": 20,
             "arena_threshold": 0.5, "temperature_moves": 9, "dirichlet_alpha": 1.0,
             "dirichlet_epsilon": 0.25, "exact_puct_positions": 500, "exact_simulations": 50,
             "opening_plies": 6, "device": "cpu", "seed": 1}
GENERATIONS = 12


@pytest.fixture(autouse=True)
def one_torch_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def test_tictactoe_is_learned_to_perfect_play_from_random_weights(tmp_path):
    settings = AZSettings(run_dir=tmp_path, generations=GENERATIONS, **TICTACTOE)
    report = train_connect4_az(settings, report=lambda line: None)
    history = report["history"]
    first, last = history[0]["exact"], history[-1]["exact"]
    assert (first["positions"], first["how"]) == (4520, "every reachable position")
    assert first["network"] < 0.7  # random weights
    assert last["puct"] == 1.0 and last["network"] == 1.0, [e["exact"] for e in history]
    config = json.loads((tmp_path / "checkpoints" / f"gen-{GENERATIONS:04d}" / "config.json")
                        .read_text())
    assert config["metadata"]["history"][-1]["exact"] == last
    assert config["config"]["actions"] == 9 and config["config"]["columns"] == 3
    table = plot_history(tmp_path / "checkpoints" / f"gen-{GENERATIONS:04d}", tmp_path / "c.png")
    assert "exact net/puct" in table and (tmp_path / "c.png").stat().st_size > 0
