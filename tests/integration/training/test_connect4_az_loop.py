"""A short AlphaZero loop end to end (tiny network, few simulations, few arena games): the arena
promotes a candidate, the replay window rolls old shards off the disk, the checkpoint holds the
whole history, and a run resumes from the last good checkpoint when the newest one is corrupt."""

from __future__ import annotations

import json

import pytest

from training.az import learner
from training.az.loop import train_connect4_az
from training.az.settings import AZSettings

pytestmark = pytest.mark.slow

TINY = {"channels": 16, "blocks": 1, "value_hidden": 16, "games_per_generation": 32,
        "concurrent_games": 32, "simulations": 24, "leaves_per_search": 4,
        "window_generations": 2, "steps_per_generation": 60, "batch_size": 128,
        "learning_rate": 3e-3, "arena_games": 20, "pons_positions": 10, "pons_simulations": 50,
        "temperature_moves": 8, "device": "cpu", "seed": 2}


def test_a_short_loop_promotes_rolls_the_buffer_and_resumes(tmp_path, data_dir, monkeypatch):
    settings = AZSettings(run_dir=tmp_path, generations=3, learning_rate_steps=((3, 1e-3),),
                          pons_dir=data_dir / "connect4-pons", **TINY)
    rates: list[float] = []
    train_steps = learner.train_steps

    def recording(model, data, steps, batch_size, learning_rate, *args):
        rates.append(learning_rate)
        return train_steps(model, data, steps, batch_size, learning_rate, *args)

    monkeypatch.setattr(learner, "train_steps", recording)
    lines: list[str] = []
    report = train_connect4_az(settings, report=lines.append)
    history = report["history"]
    assert [entry["generation"] for entry in history] == [0, 1, 2, 3]
    # The stepped schedule: 3e-3 until generation 3, 1e-3 from it on, as trained and recorded.
    assert rates == [3e-3, 3e-3, 1e-3]
    assert [entry["learning_rate"] for entry in history[1:]] == rates
    for entry in history[1:]:
        assert entry["promoted"] == (entry["arena"]["score"] >= settings.arena_threshold)
        assert entry["arena"]["games"] == 20
        assert entry["games"] == 32 and entry["positions"] >= 32 * 7
        assert set(entry["pons"]) == {"Test_L3_R1", "Test_L2_R1"}
    promoted = [entry["generation"] for entry in history[1:] if entry["promoted"]]
    assert promoted, [entry["arena"] for entry in history]
    assert report["best_generation"] == promoted[-1]
    # The window holds two generations: generation 1's shards are gone at generation 3.
    assert history[3]["window"]["generations"] == [2, 3]
    assert history[3]["window"]["shards_deleted"] == 1
    assert sorted(p.name[:8] for p in (tmp_path / "replay").glob("gen-*.npz")) == [
        "gen-0002", "gen-0003"]
    config = json.loads((tmp_path / "checkpoints" / "gen-0003" / "config.json").read_text())
    assert config["metadata"]["history"] == history
    assert config["metadata"]["settings"]["arena_games"] == 20
    assert json.loads((tmp_path / "best.json").read_text())["generation"] == promoted[-1]

    # The newest checkpoint is damaged: the run says so, resumes from generation 2, redoes 3.
    weights = tmp_path / "checkpoints" / "gen-0003" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    lines.clear()
    again = train_connect4_az(settings, report=lines.append)
    assert any("gen-0003" in line and "left out" in line for line in lines), lines
    assert again["resumed_from"] == 2
    assert [entry["generation"] for entry in again["history"]] == [0, 1, 2, 3]
    learner.load_generation(tmp_path / "checkpoints" / "gen-0003", settings.network, "cpu")
