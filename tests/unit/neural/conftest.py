"""Fixtures of the neural unit tests: a tiny policy/value network, and positions with a full
column."""

from __future__ import annotations

import pytest
import torch

from services.neural.models.connect4_pv import Connect4PV, Connect4PVConfig

_POSITIONS = ["", "4", "444444", "4444443", "12121233", "436675",
              "7422341735647741166133573473242566"]


@pytest.fixture
def positions() -> list[str]:
    """Start, early, column 4 full, column 4 full plus one, two midgames, and a Pons endgame."""
    return list(_POSITIONS)


@pytest.fixture
def tiny_model() -> Connect4PV:
    """A randomly initialised 8-channel, 1-block network in eval mode (BatchNorm statistics
    perturbed so they matter)."""
    torch.manual_seed(7)
    model = Connect4PV(Connect4PVConfig(channels=8, blocks=1, value_hidden=16))
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.running_mean.uniform_(-0.5, 0.5)
                module.running_var.uniform_(0.5, 1.5)
    return model.eval()
