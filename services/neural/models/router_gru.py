"""The meta-controller: a GRU over the sequence of routing-feature vectors of a request, and a
linear head giving a distribution over the agent sets it chooses among.

As the original framework's RNN meta-controller (langgraph-multi-agent-mcts,
`src/agents/meta_controller/rnn_controller.py`: GRU over the normalised feature vector, linear
head, softmax over agents), with the output units named in the config (`routes`, e.g.
"checker+neural") instead of fixed agents, so the served model says what each unit means.

Each feature first goes through a piecewise-linear encoding (Gorishniy, Rubachev & Babenko, "On
Embeddings for Numerical Features in Tabular Deep Learning", NeurIPS 2022): `bins` uniform bins
over [0, 1], bin k worth clamp(x * bins - k, 0, 1). The features are in [0, 1] and the decision
turns on thresholds of them (a Connect Four position's plies played, 42 steps of 1/42), which a GRU
reading the raw value resolves only with very large input weights; with the encoding a threshold
is one weight. `bins` = 0 feeds the raw features.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from services.neural import architectures

ARCHITECTURE = architectures.ROUTER_GRU


@dataclass(frozen=True)
class RouterGRUConfig:
    """Shape of a meta-controller.

    Attributes:
        num_features: features per step (10: `routing.FEATURE_NAMES`).
        hidden: GRU hidden units.
        bins: piecewise-linear encoding bins per feature (0: the raw features).
        routes: the names of the output units, in order ("checker+mcts+neural", ...).
        dropout: dropout before the head, in training only.
    """

    num_features: int = 10
    hidden: int = 32
    bins: int = 42
    routes: tuple[str, ...] = field(default_factory=tuple)
    dropout: float = 0.1

    def __post_init__(self) -> None:
        object.__setattr__(self, "routes", tuple(self.routes))
        if self.num_features < 1 or self.hidden < 1 or not 0 <= self.bins <= 256:
            raise ValueError("num_features and hidden must be >= 1, bins in 0..256")
        if len(self.routes) < 2 or len(set(self.routes)) != len(self.routes):
            raise ValueError("routes must name at least two distinct agent sets")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError("dropout must be in [0, 1)")


class RouterGRU(nn.Module):
    """features float32 [B, T, num_features] in [0, 1] (T >= 1 steps, oldest first) -> logits
    [B, routes].

    The logits are the head applied to the GRU's last hidden state; the GRU reads each step's
    piecewise-linear encoding, float [B, T, num_features * bins] (the raw step when bins = 0).
    """

    def __init__(self, config: RouterGRUConfig) -> None:
        super().__init__()
        self.config = config
        width = config.num_features * config.bins if config.bins else config.num_features
        self.gru = nn.GRU(width, config.hidden, batch_first=True)
        self.dropout = nn.Dropout(config.dropout)
        self.head = nn.Linear(config.hidden, len(config.routes))

    def encode(self, features: torch.Tensor) -> torch.Tensor:
        """The piecewise-linear encoding [B, T, num_features * bins] of [B, T, num_features]."""
        bins = self.config.bins
        if not bins:
            return features
        offsets = torch.arange(bins, dtype=features.dtype, device=features.device)
        encoded = (features.unsqueeze(-1) * bins - offsets).clamp(0.0, 1.0)
        return encoded.flatten(-2)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        _, last = self.gru(self.encode(features))
        return self.head(self.dropout(last[-1]))


def predict(module: RouterGRU, steps: list[list[float]]) -> list[float]:
    """The probabilities of the routes (softmax of the logits) for one sequence of steps.

    Args:
        module: a `RouterGRU` in eval mode.
        steps: T lists of `num_features` floats, oldest first.
    Returns:
        len(routes) probabilities summing to 1.
    """
    parameter = next(module.parameters())
    inputs = torch.tensor([steps], dtype=torch.float32, device=parameter.device)
    with torch.inference_mode():
        return torch.softmax(module(inputs), dim=-1)[0].tolist()
