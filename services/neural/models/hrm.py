"""The Hierarchical Reasoning Model (HRM).

Reference: Guan Wang et al., "Hierarchical Reasoning Model", arXiv:2506.21734 (2025).
- Section 2, "Hierarchical Reasoning Model": a slow high-level module f_H and a fast low-level
  module f_L, each a stack of encoder-only Transformer blocks; within one forward pass ("segment")
  the L state is updated L_cycles times per H update, for H_cycles H updates (N x T timesteps),
  and each module receives its inputs by element-wise addition (input injection).
- Section 2, "Approximate gradient" (the one-step gradient): only the last f_L and the last f_H
  update carry gradients; every earlier update runs without building a graph, so memory is O(1)
  in the number of timesteps.
- Section 2, "Deep supervision" and "Adaptive computational time (ACT)": the (z_H, z_L) carry is
  detached between segments, and a Q head on the first position of z_H gives Q(halt) and
  Q(continue) logits learned by Q-learning (the trainer's job).
Reference code read: sapientinc/HRM `models/hrm/hrm_act_v1.py` (the inner model and its carry),
`models/layers.py`, `models/losses.py`.

Inputs are token ids [B, L] and puzzle identifiers [B]; states are float32 [B, P + L, D] with P
the puzzle-embedding prefix (P = ceil(puzzle_emb_ndim / D)).
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

ARCHITECTURE = architectures.HRM
Q_HEAD_INIT_BIAS = -5.0
"""Initial bias of both Q logits (weights start at zero): sigmoid(-5) ~ 0.007, so the model
starts confident that halting is wrong, and Q-learning bootstraps from near zero."""


@dataclass(frozen=True)
class HRMConfig:
    """Sizes and schedule of `HRM`. Defaults are the paper's Sudoku-Extreme model (27.3M
    parameters with the 11-token Sudoku vocabulary); see `presets.py`."""

    vocab_size: int
    """Token ids in [0, vocab_size); 0 is padding in the references' datasets."""
    seq_len: int
    """Grid cells L per example (81 for 9x9 Sudoku, 900 for 30x30 mazes and ARC)."""
    hidden_size: int = 512
    num_heads: int = 8
    expansion: float = 4.0
    """SwiGLU width factor (see `reasoning_layers.swiglu_width`)."""
    h_layers: int = 4
    """Blocks in the high-level module f_H."""
    l_layers: int = 4
    """Blocks in the low-level module f_L."""
    h_cycles: int = 2
    """N: high-level updates per segment."""
    l_cycles: int = 2
    """T: low-level updates per high-level update."""
    puzzle_emb_ndim: int = 512
    """Width of the per-puzzle embedding (0: none); occupies ceil(ndim / D) prefix positions."""
    num_puzzle_identifiers: int = 1
    """Rows of the puzzle-embedding table (1 for Sudoku and mazes: every puzzle shares id 0)."""
    pos_encodings: str = "rope"
    """"rope", "learned" or "none"."""
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    halt_max_steps: int = 16
    """M_max: most segments per example (ACT); used by the trainer and the solver, not here."""
    halt_exploration_prob: float = 0.1
    """epsilon of the ACT exploration of minimum segments; used by the trainer."""

    def __post_init__(self) -> None:
        positive = ("vocab_size", "seq_len", "hidden_size", "num_heads", "h_layers", "l_layers",
                    "h_cycles", "l_cycles", "num_puzzle_identifiers", "halt_max_steps")
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"HRMConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.puzzle_emb_ndim < 0 or self.expansion <= 0:
            raise ValueError(f"invalid HRMConfig {self}")
        if self.hidden_size % self.num_heads or (self.hidden_size // self.num_heads) % 2:
            raise ValueError(f"HRMConfig.hidden_size {self.hidden_size} must split into "
                             f"{self.num_heads} heads of even width")
        if self.pos_encodings not in POSITION_ENCODINGS:
            raise ValueError(f"HRMConfig.pos_encodings {self.pos_encodings!r} not in "
                             f"{POSITION_ENCODINGS}")

    @property
    def puzzle_emb_len(self) -> int:
        """P: prefix positions holding the puzzle embedding."""
        return -(self.puzzle_emb_ndim // -self.hidden_size)

    @property
    def positions(self) -> int:
        """P + L: positions of every state."""
        return self.puzzle_emb_len + self.seq_len


@dataclass(frozen=True)
class HRMCarry:
    """The recurrent state between segments: z_H and z_L, float [B, P + L, D], no graph."""

    z_H: torch.Tensor
    z_L: torch.Tensor


@dataclass(frozen=True)
class HRMOutput:
    """One segment's predictions.

    logits: float [B, L, vocab_size], per grid cell (the prefix is dropped).
    q_halt_logits, q_continue_logits: float32 [B], the Q head on z_H's first position.
    """

    logits: torch.Tensor
    q_halt_logits: torch.Tensor
    q_continue_logits: torch.Tensor


class HRM(nn.Module):
    """HRM for one segment: (carry, inputs [B, L], puzzle_identifiers [B]) -> (carry, output).

    One call runs h_cycles x l_cycles low-level updates z_L <- f_L(z_L, z_H + x) and h_cycles
    high-level updates z_H <- f_H(z_H, z_L); all but the final f_L and final f_H run under
    `torch.no_grad()` (the one-step gradient), so gradients reach the weights only through those
    two calls. The returned carry is detached, ready for the next deep-supervision segment.
    """

    def __init__(self, config: HRMConfig) -> None:
        super().__init__()
        self.config = config
        d = config.hidden_size
        self.encoder = InputEncoder(config.vocab_size, config.seq_len, d, config.puzzle_emb_ndim,
                                    config.puzzle_emb_len, config.num_puzzle_identifiers,
                                    config.pos_encodings)
        if config.pos_encodings == "rope":
            self.rotary = RotaryEmbedding(d // config.num_heads, config.positions,
                                          config.rope_theta)
        else:
            self.rotary = None

        def block() -> ReasoningBlock:
            return ReasoningBlock(d, config.num_heads, config.expansion, "attention",
                                  config.positions, config.rms_norm_eps)

        self.H_level = ReasoningModule([block() for _ in range(config.h_layers)])
        self.L_level = ReasoningModule([block() for _ in range(config.l_layers)])
        self.lm_head = lecun_linear(d, config.vocab_size)
        self.q_head = lecun_linear(d, 2, bias=True)
        with torch.no_grad():
            self.q_head.weight.zero_()
            self.q_head.bias.fill_(Q_HEAD_INIT_BIAS)
        # Fixed initial states (section 2: z^0 sampled once from a truncated normal and kept);
        # persistent so a checkpoint restores the same start.
        self.register_buffer("H_init", truncated_normal_(torch.empty(d), 1.0))
        self.register_buffer("L_init", truncated_normal_(torch.empty(d), 1.0))

    def initial_carry(self, batch_size: int) -> HRMCarry:
        """The start state of `batch_size` fresh examples: every position is H_init / L_init."""
        shape = (batch_size, self.config.positions, self.config.hidden_size)
        return HRMCarry(z_H=self.H_init.expand(shape).clone(),
                        z_L=self.L_init.expand(shape).clone())

    def reset_carry(self, reset: torch.Tensor, carry: HRMCarry) -> HRMCarry:
        """Replaces the states of examples where `reset` (bool [B]) is true by the initial ones
        (deep supervision: a halted example's slot receives a fresh puzzle)."""
        mask = reset.view(-1, 1, 1)
        return HRMCarry(z_H=torch.where(mask, self.H_init, carry.z_H),
                        z_L=torch.where(mask, self.L_init, carry.z_L))

    def forward(self, carry: HRMCarry, inputs: torch.Tensor,
                puzzle_identifiers: torch.Tensor) -> tuple[HRMCarry, HRMOutput]:
        config = self.config
        rope = (self.rotary.cos, self.rotary.sin) if self.rotary is not None else None
        x = self.encoder(inputs, puzzle_identifiers)  # [B, P+L, D]
        z_H, z_L = carry.z_H, carry.z_L
        with torch.no_grad():
            for h_step in range(config.h_cycles):
                last_h = h_step == config.h_cycles - 1
                for l_step in range(config.l_cycles):
                    if not (last_h and l_step == config.l_cycles - 1):
                        z_L = self.L_level(z_L, z_H + x, rope)
                if not last_h:
                    z_H = self.H_level(z_H, z_L, rope)
        # One-step gradient: the final L and H updates build the graph.
        z_L = self.L_level(z_L, z_H + x, rope)
        z_H = self.H_level(z_H, z_L, rope)
        logits = self.lm_head(z_H)[:, config.puzzle_emb_len:]
        q_logits = self.q_head(z_H[:, 0]).float()
        output = HRMOutput(logits=logits, q_halt_logits=q_logits[..., 0],
                           q_continue_logits=q_logits[..., 1])
        return HRMCarry(z_H=z_H.detach(), z_L=z_L.detach()), output
