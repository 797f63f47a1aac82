"""Optimizers and the learning-rate schedule of the HRM and TRM trainers.

- `AdamATan2`: Adam whose update is atan2(m_hat, b * sqrt(v_hat)) instead of
  m_hat / (sqrt(v_hat) + eps) (Everett et al. 2024, "Scaling Exponents Across Parameterizations
  and Optimizers", section "Adam-atan2"): bounded, scale-invariant, and no epsilon to tune. Both
  references train with it (sapientinc/HRM `pretrain.py` and TinyRecursiveModels `pretrain.py`
  import `adam_atan2`, a CUDA kernel); ours is plain torch and runs on the CPU. Weight decay is
  decoupled (AdamW style): p <- p * (1 - lr * weight_decay) before the update.
- `SparseSignSGD`: the references' optimizer of the per-puzzle embedding table
  (`CastedSparseEmbeddingSignSGD_Distributed`): only the rows the batch used are touched, by
  p <- p * (1 - lr * weight_decay) - lr * sign(grad), where grad sums the batch's rows.
- `warmup_constant`: linear warm-up from 0 then constant (the references' cosine schedule with
  `lr_min_ratio = 1`).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch.optim import Optimizer


class AdamATan2(Optimizer):
    """Adam-atan2 with decoupled weight decay (Everett et al. 2024).

    Per parameter, with step t, gradient g:
        p <- p * (1 - lr * weight_decay)
        m <- beta1 * m + (1 - beta1) * g;  v <- beta2 * v + (1 - beta2) * g^2
        p <- p - lr * a * atan2(m / (1 - beta1^t), b * sqrt(v / (1 - beta2^t)))
    `a` and `b` are the paper's scale constants (1 and 1 by default). Dense gradients only.
    """

    def __init__(self, params: Iterable[torch.Tensor] | Iterable[dict], lr: float = 1e-4,
                 betas: tuple[float, float] = (0.9, 0.95), weight_decay: float = 0.1,
                 a: float = 1.0, b: float = 1.0) -> None:
        if lr < 0 or weight_decay < 0:
            raise ValueError(f"invalid lr {lr} or weight_decay {weight_decay}")
        if not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise ValueError(f"invalid betas {betas}")
        super().__init__(params, {"lr": lr, "betas": betas, "weight_decay": weight_decay,
                                  "a": a, "b": b})

    @torch.no_grad()
    def step(self, closure=None):  # noqa: ANN001, ANN201 - torch.optim.Optimizer's signature
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, (beta1, beta2) = group["lr"], group["betas"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                grad = param.grad
                if grad.is_sparse:
                    raise RuntimeError("AdamATan2 takes dense gradients; use SparseSignSGD for "
                                       "sparse embeddings")
                state = self.state[param]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(param)
                    state["exp_avg_sq"] = torch.zeros_like(param)
                state["step"] += 1
                step = state["step"]
                exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                param.mul_(1 - lr * group["weight_decay"])
                exp_avg.lerp_(grad, 1 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                first = exp_avg / (1 - beta1**step)
                second = (exp_avg_sq / (1 - beta2**step)).sqrt_().mul_(group["b"])
                param.add_(torch.atan2(first, second), alpha=-lr * group["a"])
        return loss


class SparseSignSGD(Optimizer):
    """Sign-SGD with decoupled weight decay on embedding tables with sparse gradients.

    For the rows r present in the gradient (duplicates summed): p[r] <- p[r] * (1 - lr * wd)
    - lr * sign(g[r]); other rows are untouched (neither decayed nor moved). A dense gradient
    is treated the same way over its nonzero rows.
    """

    def __init__(self, params: Iterable[torch.Tensor] | Iterable[dict], lr: float = 1e-4,
                 weight_decay: float = 0.1) -> None:
        if lr < 0 or weight_decay < 0:
            raise ValueError(f"invalid lr {lr} or weight_decay {weight_decay}")
        super().__init__(params, {"lr": lr, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure=None):  # noqa: ANN001, ANN201 - torch.optim.Optimizer's signature
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, decay = group["lr"], group["weight_decay"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                grad = param.grad
                if grad.is_sparse:
                    grad = grad.coalesce()
                    rows, values = grad.indices()[0], grad.values()
                else:
                    rows = grad.reshape(grad.shape[0], -1).abs().sum(-1).nonzero().squeeze(-1)
                    values = grad[rows]
                updated = param[rows] * (1 - lr * decay) - lr * values.sign()
                param.index_copy_(0, rows, updated.to(param.dtype))
        return loss


def warmup_constant(step: int, base_lr: float, warmup_steps: int) -> float:
    """Learning rate at optimizer step `step` (0-based): base_lr * min(1, (step + 1) /
    warmup_steps); base_lr throughout when warmup_steps is 0."""
    if warmup_steps <= 0:
        return base_lr
    return base_lr * min(1.0, (step + 1) / warmup_steps)


def set_learning_rate(optimizer: Optimizer, lr: float) -> None:
    """Sets `lr` on every parameter group of `optimizer`."""
    for group in optimizer.param_groups:
        group["lr"] = lr
