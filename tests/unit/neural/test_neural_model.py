"""Connect4PV: output shapes, illegal columns masked, a policy over legal columns summing to 1."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from libs.connect4.board import Position, encode, legal_mask
from services.neural.models.connect4_pv import (
    Connect4PV,
    Connect4PVConfig,
    parameter_count,
    predict,
)


def _batch(moves_list):
    positions = [Position.from_moves(m) for m in moves_list]
    return (np.stack([encode(p) for p in positions]), np.stack([legal_mask(p) for p in positions]))


def test_shapes_and_value_range(tiny_model, positions):
    planes, legal = _batch(positions)
    logits, value = tiny_model(torch.from_numpy(planes), torch.from_numpy(legal))
    assert logits.shape == (len(positions), 7)
    assert value.shape == (len(positions),)
    assert torch.all(value.abs() <= 1)


def test_illegal_columns_get_zero_probability_and_legal_ones_sum_to_one(tiny_model, positions):
    planes, legal = _batch(positions)
    policy, value = predict(tiny_model, planes, legal)
    assert policy.dtype == np.float32 and value.dtype == np.float32
    full = positions.index("444444")
    assert not legal[full, 3]
    assert policy[full, 3] == 0.0
    assert np.all(policy[~legal] == 0.0)
    assert np.all(policy[legal] > 0.0)
    np.testing.assert_allclose(policy.sum(axis=1), 1.0, rtol=1e-6)


def test_masking_changes_only_the_masked_logits(tiny_model):
    planes, legal = _batch([""])
    all_legal, _ = tiny_model(torch.from_numpy(planes), torch.from_numpy(legal))
    legal[0, 0] = False
    masked, _ = tiny_model(torch.from_numpy(planes), torch.from_numpy(legal))
    assert masked[0, 0] < -1e8
    torch.testing.assert_close(masked[0, 1:], all_legal[0, 1:])


def test_the_network_sees_the_stones():
    torch.manual_seed(0)
    model = Connect4PV(Connect4PVConfig(channels=8, blocks=1)).eval()
    planes, legal = _batch(["", "4455"])
    policy, value = predict(model, planes, legal)
    assert not np.allclose(policy[0], policy[1]) or value[0] != value[1]


@pytest.mark.parametrize("channels,blocks", [(48, 4), (8, 0), (16, 2)])
def test_config_variants_build_and_run(channels, blocks):
    model = Connect4PV(Connect4PVConfig(channels=channels, blocks=blocks)).eval()
    planes, legal = _batch(["", "1234567"])
    policy, value = predict(model, planes, legal)
    assert policy.shape == (2, 7) and value.shape == (2,)
    if (channels, blocks) == (48, 4):
        assert 100_000 <= parameter_count(model) <= 300_000


def test_config_rejects_nonsense_sizes():
    with pytest.raises(ValueError):
        Connect4PVConfig(channels=0)
