"""The trainers' CUDA paths run end to end on a GPU: a reasoning preset trains a few steps under
bf16 autocast with its puzzles generated in a worker process and pinned, the AlphaZero learner's
steps lower its loss on CUDA, and a short `connect4-az` loop on CUDA writes a checkpoint that
loads. CI has no GPU: these skip there and `bench/gpu.sh` runs them on a lent one."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from services.neural.checkpoint import load_checkpoint
from services.neural.models.connect4_pv import ARCHITECTURE
from training.az import learner
from training.az.games import SearchOptions, play_games
from training.az.loop import train_connect4_az
from training.az.replay import game_examples
from training.az.settings import AZSettings
from training.reasoning.trainer import ReasoningConfig, train_reasoning

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="needs a CUDA GPU, torch sees none (bench/gpu.sh runs it "
                                       "on one)")


def test_a_reasoning_preset_trains_on_cuda_with_a_data_worker(tmp_path):
    report = train_reasoning(ReasoningConfig(
        "trm", "trm-mlp-cpu-sudoku6", tmp_path, steps=6, batch_size=32, eval_every=10**9,
        eval_puzzles=16, device="cuda", progress=False, data_workers=1))
    assert report["steps"] == 6
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in records if r["kind"] == "train"]
    assert len(losses) == 6 and all(math.isfinite(loss) for loss in losses)
    checkpoint = load_checkpoint(report["checkpoint"], device="cuda")
    assert next(checkpoint.model.parameters()).device.type == "cuda"


def uniform(planes, legal):
    return legal / legal.sum(axis=1, keepdims=True), np.zeros(len(planes))


def test_the_alphazero_learner_lowers_its_loss_on_cuda():
    records, _ = play_games([uniform], [(0, 0)] * 4, 4, SearchOptions(simulations=8), 8, seed=1)
    data = game_examples(records)
    model = learner.new_model({"channels": 8, "blocks": 1, "value_hidden": 8}, 0, "cuda")
    first = learner.train_steps(model, data, 5, 64, 3e-3, 1e-4, "cuda", np.random.default_rng(0))
    later = learner.train_steps(model, data, 60, 64, 3e-3, 1e-4, "cuda",
                                np.random.default_rng(1))
    assert later["total"] < first["total"]
    policy, value = learner.evaluator(model, "cuda")(data.planes[:8], data.legal[:8])
    np.testing.assert_allclose(policy.sum(axis=1), 1.0, rtol=1e-3)
    assert np.all(np.abs(value) <= 1.0)


def test_a_short_alphazero_loop_on_cuda_writes_a_loadable_checkpoint(tmp_path):
    settings = AZSettings(run_dir=tmp_path, generations=1, arena_games=4, steps_per_generation=2,
                          batch_size=16, channels=8, blocks=1, value_hidden=8,
                          games_per_generation=4, concurrent_games=4, simulations=8,
                          leaves_per_search=2, pons_positions=0, device="cuda")
    report = train_connect4_az(settings, report=lambda line: None)
    last = report["history"][-1]
    assert last["generation"] == 1 and last["gpu_train_s"] > 0
    checkpoint = load_checkpoint(tmp_path / "checkpoints" / "gen-0001")
    assert checkpoint.architecture == ARCHITECTURE
