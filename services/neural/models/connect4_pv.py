"""A small residual policy/value network for Connect Four, AlphaZero style.

Reference: Silver et al., "Mastering the game of Go without human knowledge" (Nature 2017), the
network of its Methods section ("Neural network architecture"): a convolutional stem, a tower of
residual blocks (conv-BN-ReLU-conv-BN plus the skip), a policy head (1x1 conv to 2 planes, then a
linear layer to one logit per action) and a value head (1x1 conv to 1 plane, a hidden linear layer,
then a scalar squashed by tanh). Sizes are scaled down for a 7x6 board and fast CPU inference.

A network plays one board size, its config's `columns` W and `rows` H (7 and 6 by default, which a
config written before boards had a size reads as): input planes float32 [2, H, W] from
`libs.connect4.board.encode`, plane 0 the stones of the player to move, plane 1 the opponent's;
one policy logit per column. Outputs are from the point of view of the player to move.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from services.neural import architectures

ARCHITECTURE = architectures.CONNECT4_PV
ROWS = 6
"""Rows of the standard board (the config's default)."""
COLUMNS = 7
"""Columns of the standard board (the config's default)."""
PLANES = 2
ILLEGAL_LOGIT = -1.0e9
"""Logit given to illegal columns: finite, so a soft-target cross-entropy (target 0 times log
probability) stays 0 instead of NaN, and small enough that softmax gives them exactly 0."""


@dataclass(frozen=True)
class Connect4PVConfig:
    """Sizes of `Connect4PV`. The defaults give about 170k parameters."""

    channels: int = 48
    """Feature maps in the stem and every residual block."""
    blocks: int = 4
    """Residual blocks in the tower."""
    value_hidden: int = 64
    """Width of the value head's hidden layer."""
    columns: int = COLUMNS
    """W, the board's columns: the policy's width and the planes' last dimension."""
    rows: int = ROWS
    """H, the board's rows (`libs.connect4.geometry.Board` sets the limits the services check)."""
    actions: int = 0
    """Policy logits; 0 (Connect Four) means one per column. Tic-tac-toe's network (3 x 3 planes)
    has 9, one per cell, as the AlphaZero loop trains it (`training.az`)."""

    def __post_init__(self) -> None:
        if self.channels < 1 or self.blocks < 0 or self.value_hidden < 1 \
                or self.columns < 1 or self.rows < 1 or self.actions < 0:
            raise ValueError(f"invalid Connect4PVConfig {self}")

    @property
    def policy_size(self) -> int:
        """Policy logits: `actions`, or `columns` when it is 0."""
        return self.actions or self.columns


class ResidualBlock(nn.Module):
    """conv3x3-BN-ReLU-conv3x3-BN, plus the input, then ReLU. [B, C, H, W] -> [B, C, H, W]."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(x + y)


class Connect4PV(nn.Module):
    """Policy/value network: (planes [B, 2, H, W], legal [B, W] bool) -> (logits [B, W], value
    [B]), H and W the config's rows and columns (6 and 7 by default).

    Logits of illegal columns are `ILLEGAL_LOGIT`, so `softmax(logits)` is 0 there and sums to 1
    over the legal columns. The value is tanh-squashed, in [-1, 1], for the player to move.
    """

    def __init__(self, config: Connect4PVConfig) -> None:
        super().__init__()
        self.config = config
        c = config.channels
        self.stem = nn.Sequential(
            nn.Conv2d(PLANES, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU()
        )
        self.tower = nn.Sequential(*[ResidualBlock(c) for _ in range(config.blocks)])
        self.policy_conv = nn.Sequential(nn.Conv2d(c, 2, 1, bias=False), nn.BatchNorm2d(2),
                                         nn.ReLU())
        cells = config.rows * config.columns
        self.policy_fc = nn.Linear(2 * cells, config.policy_size)
        self.value_conv = nn.Sequential(nn.Conv2d(c, 1, 1, bias=False), nn.BatchNorm2d(1),
                                        nn.ReLU())
        self.value_fc1 = nn.Linear(cells, config.value_hidden)
        self.value_fc2 = nn.Linear(config.value_hidden, 1)

    def forward(self, planes: torch.Tensor, legal: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """planes float32 [B, 2, H, W], legal bool [B, W] -> logits float32 [B, W], value [B]."""
        x = self.tower(self.stem(planes))                          # [B, C, H, W]
        p = self.policy_conv(x).flatten(1)                         # [B, 2*H*W]
        logits = self.policy_fc(p).masked_fill(~legal, ILLEGAL_LOGIT)  # [B, W]
        v = self.value_conv(x).flatten(1)                          # [B, H*W]
        value = torch.tanh(self.value_fc2(F.relu(self.value_fc1(v)))).squeeze(1)  # [B]
        return logits, value


def parameter_count(model: nn.Module) -> int:
    """Trainable parameters of `model`."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


class PolicyValueProbabilities(nn.Module):
    """`Connect4PV` with the legal-column softmax of `predict` folded in: (planes, legal) ->
    (policy float32 [B, W], value float32 [B]), one module for an export or a CUDA graph."""

    def __init__(self, network: Connect4PV) -> None:
        super().__init__()
        self.network = network

    def forward(self, planes: torch.Tensor, legal: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        logits, value = self.network(planes, legal)
        return torch.softmax(logits.float(), dim=-1), value.float()


def predict(model: Connect4PV, planes: np.ndarray, legal: np.ndarray) -> tuple[np.ndarray,
                                                                              np.ndarray]:
    """One forward pass on numpy arrays, on the model's device, without gradients.

    Args:
        planes: float32 [B, 2, H, W] from `libs.connect4.board.encode` (the model's board).
        legal: bool [B, W] from `libs.connect4.board.legal_mask`; at least one True per row.
    Returns:
        policy float32 [B, W] (softmax over legal columns, 0 on illegal ones, rows sum to 1) and
        value float32 [B] in [-1, 1], both for the player to move.
    """
    device = next(model.parameters()).device
    with torch.inference_mode():
        logits, value = model(torch.as_tensor(planes, device=device),
                              torch.as_tensor(legal, device=device))
        policy = torch.softmax(logits.float(), dim=-1)
    return policy.cpu().numpy(), value.float().cpu().numpy()
