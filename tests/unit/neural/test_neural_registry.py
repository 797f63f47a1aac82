"""ModelRegistry and PositionEvaluator: every checkpoint directory loads, lookups fail with the
right domain errors, and the device follows the settings."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from libs.errors import FailedPrecondition, InvalidArgument, NotFound, Unavailable
from services.neural.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from services.neural.evaluator import PositionEvaluator
from services.neural.loading import select_device
from services.neural.models.connect4_pv import (
    ARCHITECTURE,
    Connect4PV,
    Connect4PVConfig,
    predict,
)
from services.neural.registry import ModelRegistry, RegisteredModel
from services.neural.settings import REPO_ROOT, NeuralSettings


def test_loads_every_checkpoint_directory(tmp_path, tiny_model):
    save_checkpoint(tmp_path / "connect4-pv", tiny_model, ARCHITECTURE, {"games": 12})
    save_checkpoint(tmp_path / "connect4-pv-old", tiny_model, ARCHITECTURE, {"note": "old"})
    (tmp_path / "README.md").write_text("checkpoints")
    (tmp_path / ".cache").mkdir()
    registry = ModelRegistry.load(tmp_path, "cpu")
    assert [m.name for m in registry.list()] == ["connect4-pv", "connect4-pv-old"]
    model = registry.get("connect4-pv")
    assert model.version == load_checkpoint(tmp_path / "connect4-pv").version
    assert model.parameter_count == sum(p.numel() for p in tiny_model.parameters())
    assert model.device == "cpu" and model.architecture == ARCHITECTURE
    assert model.metadata_strings() == {"games": "12"}


def test_unknown_model_is_not_found_and_an_empty_registry_is_unavailable(tmp_path, tiny_model):
    assert len(ModelRegistry.load(tmp_path / "missing", "cpu")) == 0
    with pytest.raises(Unavailable):
        ModelRegistry.load(tmp_path, "cpu").get("connect4-pv")
    save_checkpoint(tmp_path / "connect4-pv", tiny_model, ARCHITECTURE)
    with pytest.raises(NotFound, match="nope"):
        ModelRegistry.load(tmp_path, "cpu").get("nope")


def test_a_broken_checkpoint_fails_loading_loudly(tmp_path, tiny_model):
    save_checkpoint(tmp_path / "good", tiny_model, ARCHITECTURE)
    (tmp_path / "broken").mkdir()
    torch.save(tiny_model.state_dict(), tmp_path / "broken" / "model.pt")
    with pytest.raises(CheckpointError, match="broken.*model.pt look like pickled"):
        ModelRegistry.load(tmp_path, "cpu")


def test_device_selection():
    assert select_device("cpu") == "cpu"
    if torch.cuda.is_available():
        assert select_device("auto").startswith("cuda:")
    else:
        assert select_device("auto") == "cpu"
        with pytest.raises(FailedPrecondition):
            select_device("cuda")


def test_settings_resolve_the_committed_models_folder_from_anywhere(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    settings = NeuralSettings()
    assert settings.port == 50053 and settings.default_model == "connect4-pv"
    assert settings.resolved_models_dir() == REPO_ROOT / "models"
    (tmp_path / "models").mkdir()
    assert NeuralSettings().resolved_models_dir() == tmp_path / "models"
    with pytest.raises(ValueError):
        NeuralSettings(max_batch=0)


async def test_evaluator_before_loading_and_for_a_model_of_another_kind(tiny_model):
    evaluator = PositionEvaluator("connect4-pv", max_batch=8, max_wait_ms=1)
    planes = np.zeros((1, 2, 6, 7), dtype=np.float32)
    legal = np.ones((1, 7), dtype=np.bool_)
    with pytest.raises(Unavailable, match="loading"):
        await evaluator.evaluate("", planes, legal)
    other = RegisteredModel(name="sudoku-trm", version="v", architecture="trm",
                            parameter_count=1, device="cpu", metadata={}, config={},
                            module=tiny_model)
    evaluator.install(ModelRegistry({"sudoku-trm": other}))
    with pytest.raises(InvalidArgument) as raised:
        await evaluator.evaluate("sudoku-trm", planes, legal)
    assert raised.value.field == "model"
    with pytest.raises(NotFound):
        await evaluator.evaluate("", planes, legal)


async def test_a_reloaded_network_answers_evaluations_with_its_new_weights(tmp_path, tiny_model):
    save_checkpoint(tmp_path / "connect4-pv", tiny_model, ARCHITECTURE)
    registry = ModelRegistry.load(tmp_path, "cpu")
    evaluator = PositionEvaluator("connect4-pv", max_batch=8, max_wait_ms=0)
    evaluator.install(registry)
    planes = np.zeros((1, 2, 6, 7), dtype=np.float32)
    legal = np.ones((1, 7), dtype=np.bool_)
    before, policy_before, _ = await evaluator.evaluate("", planes, legal)
    torch.manual_seed(11)
    other = Connect4PV(Connect4PVConfig(channels=8, blocks=1, value_hidden=16)).eval()
    save_checkpoint(tmp_path / "connect4-pv", other, ARCHITECTURE)
    reloaded = registry.reload("connect4-pv")
    after, policy_after, value_after = await evaluator.evaluate("", planes, legal)
    assert after is reloaded and after.version != before.version
    expected_policy, expected_value = predict(other, planes, legal)
    np.testing.assert_allclose(policy_after, expected_policy, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(value_after, expected_value, rtol=1e-5, atol=1e-6)
    assert not np.allclose(policy_after, policy_before)
    await evaluator.close()
