"""Every trainer takes one frozen config and writes it whole into its checkpoint's config.json
(`training.config.CONFIG_KEY`), so a checkpoint says how it was trained and the config can be
rebuilt from it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from services.neural.checkpoint import load_checkpoint
from services.neural.models.connect4_pv import Connect4PVConfig
from training.config import CONFIG_KEY, config_json
from training.connect4_selfplay import SelfPlayConfig, train_connect4_pv
from training.reasoning.trainer import ReasoningConfig, train_reasoning

PONS_LINES = {"Test_L3_R1": ["7422341735647741166133573473242566 1"],
              "Test_L2_R1": ["24617524315172127 3"]}


def test_config_json_is_the_dataclass_with_paths_as_strings_and_refuses_anything_else():
    config = SelfPlayConfig(Path("/tmp/x"), games=3, network=Connect4PVConfig(channels=8))
    document = config_json(config)
    assert document["output_dir"] == "/tmp/x" and document["games"] == 3
    assert document["network"] == dataclasses.asdict(Connect4PVConfig(channels=8))
    for wrong in ({"games": 3}, SelfPlayConfig):
        with pytest.raises(TypeError, match="not a dataclass instance"):
            config_json(wrong)


def test_configs_are_frozen():
    config = ReasoningConfig("trm", "trm-mlp-cpu-sudoku6", "out")
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.steps = 3  # type: ignore[misc]


def test_the_reasoning_checkpoint_holds_its_config_whole(tmp_path):
    torch.set_num_threads(1)
    config = ReasoningConfig("trm", "trm-mlp-cpu-sudoku6", tmp_path, steps=1, batch_size=2,
                             eval_every=0, eval_puzzles=2, eval_segments=1, progress=False)
    summary = train_reasoning(config)
    stored = load_checkpoint(summary["checkpoint"]).metadata[CONFIG_KEY]
    assert stored == config_json(config)
    assert ReasoningConfig(**stored) == dataclasses.replace(config, output_dir=str(tmp_path))


def test_the_connect4_checkpoint_holds_its_config_whole(tmp_path):
    torch.set_num_threads(1)
    pons = tmp_path / "pons"
    pons.mkdir()
    for name, lines in PONS_LINES.items():
        (pons / name).write_text("\n".join(lines) + "\n")
    config = SelfPlayConfig(tmp_path / "connect4-pv", games=2, simulations=16, epochs=1,
                            workers=1, network=Connect4PVConfig(channels=8, blocks=1),
                            pons_dir=pons, progress=False)
    report = train_connect4_pv(config)
    stored = load_checkpoint(tmp_path / "connect4-pv").metadata[CONFIG_KEY]
    assert stored == config_json(config) == report[CONFIG_KEY]
    assert stored["network"]["channels"] == 8 and stored["pons_dir"] == str(pons)
