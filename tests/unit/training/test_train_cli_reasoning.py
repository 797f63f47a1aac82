"""`mcts-mesh train trm|hrm` hands its options to the trainer: the EMA decay among them (none
given: TRM averages at 0.999 and HRM not at all, as their reference code)."""

from __future__ import annotations

import pytest

from mcts_mesh.cli import main
from training.reasoning import trainer


@pytest.mark.parametrize(("argv", "model", "ema"), [
    (["--ema-rate", "0.999"], "hrm", 0.999), ([], "hrm", None), ([], "trm", 0.999),
    (["--ema-rate", "0.99"], "trm", 0.99)])
def test_the_ema_rate_reaches_the_training_settings(argv, model, ema, monkeypatch, tmp_path,
                                                    capsys):
    seen = []
    monkeypatch.setattr(trainer, "train_reasoning",
                        lambda config: seen.append(config.training_settings()) or {})
    preset = "hrm-cpu-sudoku6" if model == "hrm" else "trm-mlp-cpu-sudoku6"
    assert main(["train", model, "--preset", preset, "--output", str(tmp_path), *argv]) == 0
    assert [settings.ema_rate for settings in seen] == [ema]
