"""Exponential moving average of a model's weights (TRM trains with one and evaluates and saves
it: TinyRecursiveModels `models/ema.py`, `ema_rate` 0.999 in its configs).

After each optimizer step, shadow <- decay * shadow + (1 - decay) * weight for every
floating-point parameter; `averaged_copy()` is a separate module holding the shadow weights
(buffers copied from the live model), which evaluation and checkpoints use while the live
weights keep training.

With `warmup=True` the decay of update t (counted from 1) is min(rate, (1 + t) / (10 + t)), the
`num_updates` schedule of TensorFlow's `tf.train.ExponentialMovingAverage`. A fixed 0.999 keeps
0.999^t of the random initial weights after t updates (55% after 600), which hides what a short
run has learned; the reference trains for tens of thousands of steps, where the two agree (the
schedule reaches 0.999 at t = 8,991).
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
        warmup: cap the decay of update t at (1 + t) / (10 + t) (see the module docstring).
    Raises:
        ValueError: `rate` outside [0, 1).
    """

    def __init__(self, model: nn.Module, rate: float = 0.999, warmup: bool = False) -> None:
        if not 0 <= rate < 1:
            raise ValueError(f"EMA rate must be in [0, 1), got {rate}")
        self.rate = rate
        self.warmup = warmup
        self.updates = 0
        self.shadow = {name: parameter.detach().clone()
                       for name, parameter in model.named_parameters()
                       if parameter.is_floating_point()}

    def decay(self, update: int) -> float:
        """The decay used by update number `update` (from 1)."""
        if not self.warmup:
            return self.rate
        return min(self.rate, (1 + update) / (10 + update))

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        """shadow <- decay * shadow + (1 - decay) * parameter, for every tracked parameter."""
        self.updates += 1
        weight = 1 - self.decay(self.updates)
        for name, parameter in model.named_parameters():
            if name in self.shadow:
                self.shadow[name].lerp_(parameter.detach(), weight)

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
