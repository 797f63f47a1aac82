"""The Tiny Recursive Model (TRM).

Reference: Alexia Jolicoeur-Martineau, "Less is More: Recursive Reasoning with Tiny Networks",
arXiv:2510.04871 (2025).
- Section 4.1-4.2: one tiny network replaces HRM's two modules; the state is the current answer y
  (HRM's z_H) and a latent reasoning feature z (HRM's z_L). One recursion ("latent recursion")
  updates z n times, z <- net(z, y + x), then the answer once, y <- net(y, z); the input x is
  left out of the answer update, which is how the same network tells the two tasks apart.
- Section 4.1 (no fixed-point theorem, full backpropagation): a segment runs T recursions, the
  first T-1 without gradients and the last one fully backpropagated through its n + 1 calls.
- Sections 4.3 (a single network) and 4.4 (two layers suffice), and 4.5 (an MLP over the
  sequence in place of self-attention for small fixed contexts such as 9x9 Sudoku: `mlp_t`).
- Section 4.6 (simpler ACT): a single halting logit q_halt, trained with binary cross-entropy on
  whether the current answer is exactly right; no Q(continue) and no extra forward pass.
Reference code read: SamsungSAILMontreal/TinyRecursiveModels `models/recursive_reasoning/trm.py`,
`models/layers.py`, `models/losses.py`.

Inputs are token ids [B, L] and puzzle identifiers [B]; states are float32 [B, P + L, D] with P =
`puzzle_emb_len` prefix positions (16 in the paper's configs).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from services.neural import architectures
from services.neural.models.reasoning_layers import (
    POSITION_ENCODINGS,
    InputEncoder,
    ReasoningBlock,
    ReasoningModule,
    RotaryEmbedding,
    lecun_linear,
    truncated_normal_,
)

ARCHITECTURE = architectures.TRM
Q_HEAD_INIT_BIAS = -5.0
"""Initial bias of the halting logit (weights start at zero): the model starts by not halting."""


@dataclass(frozen=True)
class TRMConfig:
    """Sizes and schedule of `TRM`. Defaults are the paper's attention model with T=3, n=6; see
    `presets.py` for the paper's Sudoku (MLP), maze and ARC settings."""

    vocab_size: int
    """Token ids in [0, vocab_size); 0 is padding in the references' datasets."""
    seq_len: int
    """Grid cells L per example (81 for 9x9 Sudoku, 900 for 30x30 mazes and ARC)."""
    hidden_size: int = 512
    num_heads: int = 8
    expansion: float = 4.0
    """SwiGLU width factor (see `reasoning_layers.swiglu_width`)."""
    layers: int = 2
    """Blocks in the single network."""
    h_cycles: int = 3
    """T: recursions per segment (T-1 without gradients, the last with full backpropagation)."""
    l_cycles: int = 6
    """n: latent updates z <- net(z, y + x) per recursion."""
    mlp_t: bool = False
    """Mix positions with an MLP over the sequence instead of self-attention (section 4.5)."""
    puzzle_emb_ndim: int = 512
    """Width of the per-puzzle embedding (0: none)."""
    puzzle_emb_len: int = 16
    """P: prefix positions; the embedding fills the first ceil(ndim / D), the rest are zeros."""
    num_puzzle_identifiers: int = 1
    """Rows of the puzzle-embedding table (1 for Sudoku and mazes: every puzzle shares id 0)."""
    pos_encodings: str = "rope"
    """"rope", "learned" or "none" (the paper's MLP Sudoku model uses none)."""
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    halt_max_steps: int = 16
    """N_sup: most supervision segments per example; used by the trainer and the solver."""
    halt_exploration_prob: float = 0.1
    """epsilon of the ACT exploration of minimum segments; used by the trainer."""

    def __post_init__(self) -> None:
        positive = ("vocab_size", "seq_len", "hidden_size", "num_heads", "layers", "h_cycles",
                    "l_cycles", "num_puzzle_identifiers", "halt_max_steps")
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"TRMConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.puzzle_emb_ndim < 0 or self.puzzle_emb_len < 0 or self.expansion <= 0:
            raise ValueError(f"invalid TRMConfig {self}")
        if self.puzzle_emb_ndim > self.puzzle_emb_len * self.hidden_size:
            raise ValueError(f"TRMConfig.puzzle_emb_ndim {self.puzzle_emb_ndim} does not fit in "
                             f"puzzle_emb_len {self.puzzle_emb_len} positions")
        if self.hidden_size % self.num_heads or (self.hidden_size // self.num_heads) % 2:
            raise ValueError(f"TRMConfig.hidden_size {self.hidden_size} must split into "
                             f"{self.num_heads} heads of even width")
        if self.pos_encodings not in POSITION_ENCODINGS:
            raise ValueError(f"TRMConfig.pos_encodings {self.pos_encodings!r} not in "
                             f"{POSITION_ENCODINGS}")

    @property
    def positions(self) -> int:
        """P + L: positions of every state."""
        return self.puzzle_emb_len + self.seq_len


@dataclass(frozen=True)
class TRMCarry:
    """The recurrent state between segments: the answer y and the latent z, float
    [B, P + L, D], no graph."""

    y: torch.Tensor
    z: torch.Tensor


@dataclass(frozen=True)
class TRMOutput:
    """One segment's predictions.

    logits: float [B, L, vocab_size], per grid cell (the prefix is dropped).
    q_halt_logits: float32 [B], the halting head on y's first position (> 0: halt).
    """

    logits: torch.Tensor
    q_halt_logits: torch.Tensor


class TRM(nn.Module):
    """TRM for one segment: (carry, inputs [B, L], puzzle_identifiers [B]) -> (carry, output).

    One call runs T recursions of [n x (z <- net(z, y + x)), then y <- net(y, z)]; the first T-1
    under `torch.no_grad()`, the last with its n + 1 network calls in the graph. The returned
    carry is detached, ready for the next deep-supervision segment.
    """

    def __init__(self, config: TRMConfig) -> None:
        super().__init__()
        self.config = config
        d = config.hidden_size
        self.encoder = InputEncoder(config.vocab_size, config.seq_len, d, config.puzzle_emb_ndim,
                                    config.puzzle_emb_len, config.num_puzzle_identifiers,
                                    config.pos_encodings)
        if config.pos_encodings == "rope" and not config.mlp_t:
            self.rotary = RotaryEmbedding(d // config.num_heads, config.positions,
                                          config.rope_theta)
        else:
            self.rotary = None
        mixer = "mlp_t" if config.mlp_t else "attention"
        self.net = ReasoningModule([
            ReasoningBlock(d, config.num_heads, config.expansion, mixer, config.positions,
                           config.rms_norm_eps)
            for _ in range(config.layers)
        ])
        self.lm_head = lecun_linear(d, config.vocab_size)
        self.q_head = lecun_linear(d, 1, bias=True)
        with torch.no_grad():
            self.q_head.weight.zero_()
            self.q_head.bias.fill_(Q_HEAD_INIT_BIAS)
        # Fixed initial y and z, sampled once and saved with the weights.
        self.register_buffer("y_init", truncated_normal_(torch.empty(d), 1.0))
        self.register_buffer("z_init", truncated_normal_(torch.empty(d), 1.0))

    def initial_carry(self, batch_size: int) -> TRMCarry:
        """The start state of `batch_size` fresh examples: every position is y_init / z_init."""
        shape = (batch_size, self.config.positions, self.config.hidden_size)
        return TRMCarry(y=self.y_init.expand(shape).clone(), z=self.z_init.expand(shape).clone())

    def reset_carry(self, reset: torch.Tensor, carry: TRMCarry) -> TRMCarry:
        """Replaces the states of examples where `reset` (bool [B]) is true by the initial ones
        (deep supervision: a halted example's slot receives a fresh puzzle)."""
        mask = reset.view(-1, 1, 1)
        return TRMCarry(y=torch.where(mask, self.y_init, carry.y),
                        z=torch.where(mask, self.z_init, carry.z))

    def _recursion(self, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor,
                   rope: tuple[torch.Tensor, torch.Tensor] | None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        for _ in range(self.config.l_cycles):
            z = self.net(z, y + x, rope)
        y = self.net(y, z, rope)
        return y, z

    def forward(self, carry: TRMCarry, inputs: torch.Tensor,
                puzzle_identifiers: torch.Tensor) -> tuple[TRMCarry, TRMOutput]:
        rope = (self.rotary.cos, self.rotary.sin) if self.rotary is not None else None
        x = self.encoder(inputs, puzzle_identifiers)  # [B, P+L, D]
        y, z = carry.y, carry.z
        with torch.no_grad():
            for _ in range(self.config.h_cycles - 1):
                y, z = self._recursion(x, y, z, rope)
        y, z = self._recursion(x, y, z, rope)
        logits = self.lm_head(y)[:, self.config.puzzle_emb_len:]
        q_halt_logits = self.q_head(y[:, 0]).float().squeeze(-1)
        return TRMCarry(y=y.detach(), z=z.detach()), TRMOutput(logits, q_halt_logits)
