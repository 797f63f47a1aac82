"""Exponential moving average of a model's weights (TRM trains with one and evaluates and saves
it: TinyRecursiveModels `models/ema.py`, `ema_rate` 0.999 in its configs).

After each optimizer step, shadow <- rate * shadow + (1 - rate) * weight for every floating-point
parameter; `averaged_copy()` is a separate module holding the shadow weights (buffers copied from
the live model), which evaluation and checkpoints use while the live weights keep training.
"""

from __future__ import annotations

import copy

import torch
from torch import nn


class WeightEMA:
    """Shadow weights of `model`, initialised to its current parameters.

    Args:
        model: the live module being trained.
        rate: the decay in [0, 1); 0.999 in the TRM reference.
    """

    def __init__(self, model: nn.Module, rate: float = 0.999) -> None:
        if not 0 <= rate < 1:
            raise ValueError(f"EMA rate must be in [0, 1), got {rate}")
        self.rate = rate
        self.shadow = {name: parameter.detach().clone()
                       for name, parameter in model.named_parameters()
                       if parameter.is_floating_point()}

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        """shadow <- rate * shadow + (1 - rate) * parameter, for every tracked parameter."""
        for name, parameter in model.named_parameters():
            if name in self.shadow:
                self.shadow[name].lerp_(parameter.detach(), 1 - self.rate)

    @torch.no_grad()
    def averaged_copy(self, model: nn.Module) -> nn.Module:
        """A deep copy of `model` (same class, config and buffers) with the shadow weights, in
        eval mode and without gradients; `model` is left unchanged."""
        averaged = copy.deepcopy(model)
        for name, parameter in averaged.named_parameters():
            if name in self.shadow:
                parameter.copy_(self.shadow[name])
            parameter.requires_grad_(False)
        return averaged.eval()

    def state_dict(self) -> dict[str, torch.Tensor]:
        return dict(self.shadow)
