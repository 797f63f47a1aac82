"""Building blocks shared by HRM and TRM, and the stablemax loss both are trained with.

References (read, not copied):
- HRM: Wang et al., "Hierarchical Reasoning Model", arXiv:2506.21734, section 2 ("Hierarchical
  Reasoning Model": the recurrent modules are encoder-only Transformer blocks with rotary
  positions, gated linear units, RMSNorm, no biases, post-norm); sapientinc/HRM
  `models/layers.py` (CastedLinear, Attention, SwiGLU, rms_norm, RotaryEmbedding) and
  `models/losses.py` (`s`, `log_stablemax`, `stablemax_cross_entropy`: stablemax, from Prieto et
  al. 2025, "Grokking at the edge of numerical stability", for stability with small data).
- TRM: Jolicoeur-Martineau, "Less is More: Recursive Reasoning with Tiny Networks",
  arXiv:2510.04871, section 4.5 ("attention-free architecture for tasks with small fixed context
  length": an MLP over the sequence dimension, as in MLP-Mixer); SamsungSAILMontreal/
  TinyRecursiveModels `models/layers.py` and `models/recursive_reasoning/trm.py` (the `mlp_t`
  block).

Shapes use B for the batch, S for positions (puzzle-embedding prefix plus grid cells), D for the
hidden size, H for heads. All layers are float32 on the CPU; mixed precision is the trainer's
autocast, not a dtype baked into the weights.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

IGNORE_LABEL_ID = -100
"""Label of positions that carry no loss (the references' convention)."""

POSITION_ENCODINGS = ("rope", "learned", "none")

_TRUNCATED_STD = 0.87962566103423978
"""Standard deviation of a unit normal truncated to [-2, 2]; dividing by it makes the truncated
initialisation have exactly the requested standard deviation (the references' JAX-style
`trunc_normal_init_`)."""


def truncated_normal_(tensor: torch.Tensor, std: float) -> torch.Tensor:
    """Fills `tensor` in place from a normal truncated at two standard deviations, rescaled so its
    standard deviation is `std`; `std == 0` gives zeros. Returns `tensor`."""
    if std == 0:
        return nn.init.zeros_(tensor)
    scale = std / _TRUNCATED_STD
    return nn.init.trunc_normal_(tensor, mean=0.0, std=scale, a=-2 * scale, b=2 * scale)


def lecun_linear(in_features: int, out_features: int, bias: bool = False) -> nn.Linear:
    """An `nn.Linear` with truncated LeCun-normal weights (std 1/sqrt(in)) and a zero bias, as the
    references' `CastedLinear`."""
    layer = nn.Linear(in_features, out_features, bias=bias)
    with torch.no_grad():
        truncated_normal_(layer.weight, 1.0 / math.sqrt(in_features))
        if layer.bias is not None:
            layer.bias.zero_()
    return layer


def rms_norm(hidden: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """Parameter-free RMSNorm over the last dimension, computed in float32 and returned in the
    input's dtype: x / sqrt(mean(x^2) + eps)."""
    dtype = hidden.dtype
    hidden = hidden.float()
    hidden = hidden * torch.rsqrt(hidden.square().mean(-1, keepdim=True) + eps)
    return hidden.to(dtype)


def swiglu_width(hidden_size: int, expansion: float) -> int:
    """Inner width of `SwiGLU`: expansion * hidden * 2/3 (keeping the parameters of a plain MLP of
    that expansion), rounded, then up to a multiple of 256 (the references' sizing)."""
    width = round(expansion * hidden_size * 2 / 3)
    return -(width // -256) * 256


class SwiGLU(nn.Module):
    """Gated MLP (Shazeer 2020): down(silu(gate(x)) * up(x)), no biases. [..., D] -> [..., D]."""

    def __init__(self, hidden_size: int, expansion: float) -> None:
        super().__init__()
        width = swiglu_width(hidden_size, expansion)
        self.gate_up_proj = lecun_linear(hidden_size, 2 * width)
        self.down_proj = lecun_linear(width, hidden_size)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(hidden).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class RotaryEmbedding(nn.Module):
    """Rotary position embedding tables (Su et al. 2021) for `positions` positions of `head_dim`.

    Holds non-persistent float32 buffers `cos` and `sin` of shape [S, head_dim], laid out as two
    halves (frequencies repeated), which pairs dimension i with i + head_dim/2 ("rotate half").
    """

    def __init__(self, head_dim: int, positions: int, base: float = 10000.0) -> None:
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"RoPE needs an even head dimension, got {head_dim}")
        inverse_frequency = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        angles = torch.outer(torch.arange(positions, dtype=torch.float32), inverse_frequency)
        angles = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)


def apply_rope(states: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotates queries or keys [B, H, S, head_dim] by the tables [S, head_dim]."""
    half = states.shape[-1] // 2
    rotated = torch.cat((-states[..., half:], states[..., :half]), dim=-1)
    return (states.float() * cos + rotated.float() * sin).to(states.dtype)


class SelfAttention(nn.Module):
    """Non-causal multi-head self-attention with RoPE, through `F.scaled_dot_product_attention`.

    [B, S, D] -> [B, S, D]; one fused qkv projection and an output projection, no biases.
    """

    def __init__(self, hidden_size: int, num_heads: int) -> None:
        super().__init__()
        if hidden_size % num_heads:
            raise ValueError(f"hidden size {hidden_size} not divisible by {num_heads} heads")
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.qkv_proj = lecun_linear(hidden_size, 3 * hidden_size)
        self.o_proj = lecun_linear(hidden_size, hidden_size)

    def forward(self, hidden: torch.Tensor,
                rope: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
        batch, positions, _ = hidden.shape
        qkv = self.qkv_proj(hidden).view(batch, positions, 3, self.num_heads, self.head_dim)
        query, key, value = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each [B, H, S, head_dim]
        if rope is not None:
            query, key = apply_rope(query, *rope), apply_rope(key, *rope)
        attended = F.scaled_dot_product_attention(query, key, value, is_causal=False)
        return self.o_proj(attended.transpose(1, 2).reshape(batch, positions, -1))


class ReasoningBlock(nn.Module):
    """One post-norm block: x <- rms(x + mix(x)); x <- rms(x + SwiGLU(x)). [B, S, D] -> [B, S, D].

    `mixer="attention"` mixes positions by self-attention (HRM, TRM-Att); `mixer="mlp_t"` by a
    SwiGLU applied across the S positions of each channel (TRM section 4.5), which needs a fixed
    S known at construction (`positions`).
    """

    def __init__(self, hidden_size: int, num_heads: int, expansion: float, mixer: str,
                 positions: int, rms_norm_eps: float = 1e-5) -> None:
        super().__init__()
        self.mixer = mixer
        self.rms_norm_eps = rms_norm_eps
        if mixer == "attention":
            self.self_attn = SelfAttention(hidden_size, num_heads)
        elif mixer == "mlp_t":
            self.mlp_t = SwiGLU(positions, expansion)
        else:
            raise ValueError(f"unknown mixer {mixer!r}; expected 'attention' or 'mlp_t'")
        self.mlp = SwiGLU(hidden_size, expansion)

    def forward(self, hidden: torch.Tensor,
                rope: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        if self.mixer == "attention":
            mixed = self.self_attn(hidden, rope)
        else:
            mixed = self.mlp_t(hidden.transpose(1, 2)).transpose(1, 2)
        hidden = rms_norm(hidden + mixed, self.rms_norm_eps)
        return rms_norm(hidden + self.mlp(hidden), self.rms_norm_eps)


class ReasoningModule(nn.Module):
    """A stack of `ReasoningBlock`s with input injection by addition:
    f(state, injection) = blocks(state + injection). Both [B, S, D]; returns [B, S, D]."""

    def __init__(self, blocks: list[ReasoningBlock]) -> None:
        super().__init__()
        self.layers = nn.ModuleList(blocks)

    def forward(self, state: torch.Tensor, injection: torch.Tensor,
                rope: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        hidden = state + injection
        for layer in self.layers:
            hidden = layer(hidden, rope)
        return hidden


class InputEncoder(nn.Module):
    """Token ids and puzzle identifiers -> scaled input embeddings x of shape [B, P + L, D].

    The token embedding (truncated normal, std 1/sqrt(D)) is multiplied by sqrt(D), so x has unit
    scale like the RMS-normalised states it is added to. A puzzle identifier selects a row of
    `puzzle_emb` (zero-initialised; `sparse=True` so a step touches only the batch's rows, which
    the trainer updates by sign-SGD), reshaped into P = `puzzle_emb_len` prefix positions of D
    (zero-padded when `puzzle_emb_ndim < P * D`). With `pos_encodings="learned"`, a learned table
    over the P + L positions is added and the sum scaled by 1/sqrt(2) before the sqrt(D) factor.
    """

    def __init__(self, vocab_size: int, seq_len: int, hidden_size: int, puzzle_emb_ndim: int,
                 puzzle_emb_len: int, num_puzzle_identifiers: int, pos_encodings: str) -> None:
        super().__init__()
        if pos_encodings not in POSITION_ENCODINGS:
            raise ValueError(f"unknown pos_encodings {pos_encodings!r}; "
                             f"expected one of {POSITION_ENCODINGS}")
        if puzzle_emb_ndim > puzzle_emb_len * hidden_size:
            raise ValueError(f"puzzle_emb_ndim {puzzle_emb_ndim} exceeds puzzle_emb_len "
                             f"{puzzle_emb_len} x hidden_size {hidden_size}")
        self.hidden_size = hidden_size
        self.puzzle_emb_len = puzzle_emb_len
        self.puzzle_emb_ndim = puzzle_emb_ndim
        self.scale = math.sqrt(hidden_size)
        self.embed_tokens = nn.Embedding(vocab_size, hidden_size)
        truncated_normal_(self.embed_tokens.weight.data, 1.0 / self.scale)
        if puzzle_emb_ndim > 0:
            self.puzzle_emb = nn.Embedding(num_puzzle_identifiers, puzzle_emb_ndim, sparse=True)
            nn.init.zeros_(self.puzzle_emb.weight)
        if pos_encodings == "learned":
            self.embed_pos = nn.Parameter(torch.empty(puzzle_emb_len + seq_len, hidden_size))
            truncated_normal_(self.embed_pos.data, 1.0 / self.scale)
        else:
            self.embed_pos = None

    def forward(self, inputs: torch.Tensor, puzzle_identifiers: torch.Tensor) -> torch.Tensor:
        """inputs: int [B, L] token ids; puzzle_identifiers: int [B]. Returns float [B, P+L, D]."""
        embedding = self.embed_tokens(inputs.long())
        if self.puzzle_emb_ndim > 0:
            prefix = self.puzzle_emb(puzzle_identifiers.long())
            prefix = F.pad(prefix, (0, self.puzzle_emb_len * self.hidden_size - prefix.shape[-1]))
            prefix = prefix.view(-1, self.puzzle_emb_len, self.hidden_size)
            embedding = torch.cat((prefix.to(embedding.dtype), embedding), dim=-2)
        elif self.puzzle_emb_len > 0:
            embedding = F.pad(embedding, (0, 0, self.puzzle_emb_len, 0))
        if self.embed_pos is not None:
            embedding = (embedding + self.embed_pos) / math.sqrt(2.0)
        return self.scale * embedding


def puzzle_embedding_count(model: nn.Module) -> int:
    """Elements of every `puzzle_emb` table in `model` (0 when it has none)."""
    return sum(module.weight.numel() for name, module in model.named_modules()
               if name.split(".")[-1] == "puzzle_emb")


def count_parameters(model: nn.Module) -> int:
    """Trainable parameters of `model`, excluding the per-puzzle embedding table.

    The references keep puzzle embeddings in a buffer (`CastedSparseEmbedding.weights`), so the
    papers' sizes (HRM 27M, TRM 5M / 7M) count only the shared network: the table grows with the
    dataset (one row per augmented ARC task) and is not part of the model's capacity to reason.
    """
    total = sum(parameter.numel() for parameter in model.parameters())
    return total - puzzle_embedding_count(model)


def _stablemax_s(logits: torch.Tensor) -> torch.Tensor:
    # s(x) = x + 1 for x >= 0 and 1 / (1 - x) for x < 0: positive, monotone, and linear rather
    # than exponential in x, so it cannot overflow. The clamp keeps the unused branch finite.
    return torch.where(logits < 0, 1.0 / (1.0 - logits.clamp(max=0.0)), logits + 1.0)


def stablemax(logits: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Stablemax probabilities s(x_i) / sum_j s(x_j) along `dim` (Prieto et al. 2025, used by HRM
    and TRM). Same shape and dtype as `logits`."""
    values = _stablemax_s(logits)
    return values / values.sum(dim=dim, keepdim=True)


def log_stablemax(logits: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """log(stablemax(logits)) along `dim`, computed as log s(x_i) - log sum_j s(x_j)."""
    values = _stablemax_s(logits)
    return values.log() - values.sum(dim=dim, keepdim=True).log()


def stablemax_cross_entropy(logits: torch.Tensor, labels: torch.Tensor,
                            ignore_index: int = IGNORE_LABEL_ID) -> torch.Tensor:
    """Per-position stablemax cross-entropy -log stablemax(logits)[label], in float64.

    Args:
        logits: float [..., V].
        labels: int [...] in [0, V) or `ignore_index`.
    Returns:
        float64 [...]: the loss per position, 0 where the label is `ignore_index`. (The
        references compute it in float64 too; reduction is the caller's.)
    """
    log_probabilities = log_stablemax(logits.double(), dim=-1)
    valid = labels != ignore_index
    index = torch.where(valid, labels, 0).long().unsqueeze(-1)
    picked = log_probabilities.gather(-1, index).squeeze(-1)
    return torch.where(valid, -picked, torch.zeros_like(picked))
