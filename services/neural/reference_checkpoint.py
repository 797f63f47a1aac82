"""State dicts in the layout of the reference repositories, loaded into our HRM and TRM.

The references save `train_state.model.state_dict()` where the model is the loss head
(`ACTLossHead`, attribute `model`) around the ACT wrapper (attribute `inner`), usually compiled by
`torch.compile` (which adds `_orig_mod.`); so a key reads `_orig_mod.model.inner.<name>`. Both
prefixes may be absent (an uncompiled run, or a state dict of the wrapper or the inner model). Key
names and shapes (read in sapientinc/HRM `models/hrm/hrm_act_v1.py`, `models/layers.py`,
`models/sparse_embedding.py`, and TinyRecursiveModels `models/recursive_reasoning/trm.py`):

| reference (after `inner.`)                     | ours                               |
| ---------------------------------------------- | ---------------------------------- |
| `embed_tokens.embedding_weight` [V, D]         | `encoder.embed_tokens.weight`      |
| `puzzle_emb.weights` [identifiers, ndim]       | `encoder.puzzle_emb.weight`        |
| `embed_pos.embedding_weight` [P + L, D]        | `encoder.embed_pos`                |
| `lm_head.weight` [V, D]                        | `lm_head.weight`                   |
| `q_head.weight` [2, D], `q_head.bias` [2]      | `q_head.*` (TRM: row 0, q_halt)    |
| `H_level.layers.<i>.<block>` (HRM)             | `H_level.layers.<i>.<block>`       |
| `L_level.layers.<i>.<block>`                   | HRM: the same; TRM: `net.layers.<i>.<block>` |
| `H_init`, `L_init` [D] (bf16 in the references) | HRM: the same; TRM: `y_init`, `z_init` |

where `<block>` is `self_attn.qkv_proj.weight` [3D, D], `self_attn.o_proj.weight` [D, D],
`mlp.gate_up_proj.weight` [2F, D], `mlp.down_proj.weight` [D, F], or for TRM-MLP
`mlp_t.gate_up_proj.weight` [2F', P + L] and `mlp_t.down_proj.weight` [P + L, F'].

The fused qkv projection has the same row order in both (queries, keys, values, each head after
head), so it maps without reshuffling. TRM's reference halting head has two outputs; with its
default `no_ACT_continue` only q_halt (row 0) is used, which is the one output of ours, so row 1
is dropped on load (and written as the references initialise it on export). Tensors are cast to
float32. The RoPE tables and the sparse embedding's per-batch buffers are not persistent in the
references, so no state dict holds them.

Known difference in the forward pass (not in the weights): TinyRecursiveModels' `mlp_t` block
applies its RMSNorm while the states are transposed, that is over the P + L positions, where our
`reasoning_layers.ReasoningBlock` normalises over the D channels; TRM-Att and HRM blocks agree.
A reference TRM-MLP checkpoint therefore loads exactly but does not compute the reference's
outputs until that block follows the reference.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import nn

from services.neural.checkpoint import CheckpointError, save_checkpoint
from services.neural.models import ARCHITECTURES, hrm, trm

PREFIXES = ("_orig_mod.", "model.", "inner.")
"""Optional key prefixes of a reference state dict, in the order they nest."""
EXPORT_PREFIX = "_orig_mod.model.inner."
"""The prefix of a compiled reference run's checkpoint, written by `to_reference_state_dict`."""

_COMMON = (
    ("encoder.embed_tokens.weight", "embed_tokens.embedding_weight"),
    ("encoder.puzzle_emb.weight", "puzzle_emb.weights"),
    ("encoder.embed_pos", "embed_pos.embedding_weight"),
    ("lm_head.", "lm_head."),
    ("q_head.", "q_head."),
)
_RENAMES: dict[str, tuple[tuple[str, str], ...]] = {
    hrm.ARCHITECTURE: _COMMON + (("H_level.", "H_level."), ("L_level.", "L_level."),
                                 ("H_init", "H_init"), ("L_init", "L_init")),
    trm.ARCHITECTURE: _COMMON + (("net.", "L_level."), ("y_init", "H_init"),
                                 ("z_init", "L_init")),
}
_TRM_Q_OUTPUTS = 2
"""Outputs of the reference TRM halting head (q_halt, q_continue); ours keeps q_halt."""


def reference_key(architecture: str, key: str) -> str:
    """The reference name (without prefix) of our state-dict key `key`.

    Raises:
        KeyError: `key` has no reference counterpart (a module this file does not map).
    """
    for ours, theirs in _RENAMES[architecture]:
        if ours.endswith("."):
            if key.startswith(ours):
                return theirs + key[len(ours):]
        elif key == ours:
            return theirs
    raise KeyError(f"{architecture} key {key!r} has no reference name")


def _strip_prefixes(key: str) -> str:
    for prefix in PREFIXES:
        if key.startswith(prefix):
            key = key[len(prefix):]
    return key


def _is_trm_q_head(architecture: str, key: str) -> bool:
    return architecture == trm.ARCHITECTURE and key in ("q_head.weight", "q_head.bias")


def to_reference_state_dict(model: nn.Module, architecture: str,
                            prefix: str = EXPORT_PREFIX) -> dict[str, torch.Tensor]:
    """Our HRM / TRM state dict in the references' layout, keys `prefix + <reference name>`.

    TRM's one-output halting head becomes the references' two outputs: row 0 ours (q_halt), row
    1 as the references initialise q_continue (zero weights, bias -5). Tensors are float32
    copies on the CPU.
    Raises:
        ValueError: `architecture` is not "hrm" or "trm".
    """
    if architecture not in _RENAMES:
        raise ValueError(f"no reference layout for architecture {architecture!r}")
    state: dict[str, torch.Tensor] = {}
    for key, tensor in model.state_dict().items():
        tensor = tensor.detach().to("cpu", torch.float32).clone()
        if _is_trm_q_head(architecture, key):
            extra = torch.full((_TRM_Q_OUTPUTS - tensor.shape[0], *tensor.shape[1:]),
                               trm.Q_HEAD_INIT_BIAS if key.endswith("bias") else 0.0)
            tensor = torch.cat((tensor, extra))
        state[prefix + reference_key(architecture, key)] = tensor
    return state


def load_reference_state_dict(state: Mapping[str, torch.Tensor], architecture: str,
                              config: hrm.HRMConfig | trm.TRMConfig) -> nn.Module:
    """Builds our `architecture` model from `config` and loads a reference-layout state dict.

    Args:
        state: reference key -> tensor; keys may carry the `PREFIXES` (all, some or none).
        architecture: "hrm" or "trm".
        config: our config of the same sizes as the reference run (hidden size, layers, heads,
            expansion, vocabulary, sequence length, puzzle-embedding sizes, position encoding).
    Returns:
        The model in eval mode on the CPU, float32.
    Raises:
        CheckpointError: an unknown architecture; a key that is missing, unexpected, or given
            twice (with and without a prefix); or a tensor of the wrong shape. The message names
            the reference key.
    """
    if architecture not in _RENAMES:
        raise CheckpointError(f"no reference layout for architecture {architecture!r}; "
                              f"known: {sorted(_RENAMES)}")
    model = ARCHITECTURES[architecture].model_type(config)
    ours = model.state_dict()
    wanted = {reference_key(architecture, key): key for key in ours}
    given: dict[str, tuple[str, torch.Tensor]] = {}
    for raw, tensor in state.items():
        name = _strip_prefixes(raw)
        if name in given:
            raise CheckpointError(f"reference keys {given[name][0]!r} and {raw!r} both name "
                                  f"{name!r}")
        given[name] = (raw, tensor)
    unexpected = sorted(raw for name, (raw, _) in given.items() if name not in wanted)
    if unexpected:
        raise CheckpointError(f"unexpected key {unexpected[0]!r} for {architecture} with this "
                              f"config ({len(unexpected)} unexpected: {unexpected[:5]})")
    missing = sorted(name for name in wanted if name not in given)
    if missing:
        raise CheckpointError(f"missing key {missing[0]!r} (as '[_orig_mod.][model.][inner.]"
                              f"{missing[0]}'; {len(missing)} missing: {missing[:5]})")
    converted: dict[str, torch.Tensor] = {}
    for name, key in wanted.items():
        raw, tensor = given[name]
        expected = tuple(ours[key].shape)
        if _is_trm_q_head(architecture, key):
            if tensor.shape[:1] != (_TRM_Q_OUTPUTS,):
                raise CheckpointError(f"key {raw!r}: shape {tuple(tensor.shape)}, expected "
                                      f"({_TRM_Q_OUTPUTS}, ...) (q_halt, q_continue)")
            tensor = tensor[:expected[0]]
        if tuple(tensor.shape) != expected:
            raise CheckpointError(f"key {raw!r}: shape {tuple(tensor.shape)}, expected "
                                  f"{expected} for {key!r}")
        converted[key] = tensor.to(torch.float32)
    model.load_state_dict(converted, strict=True)
    return model.eval()


def import_reference_checkpoint(weights: Path | str, architecture: str,
                                config: hrm.HRMConfig | trm.TRMConfig, directory: Path | str,
                                metadata: dict[str, Any] | None = None) -> str:
    """Converts a reference state dict saved as safetensors into our checkpoint directory
    (`save_checkpoint`), which the service then serves. Pickled reference checkpoints
    (`torch.save`) are not read: convert them to safetensors where they are trusted.

    `metadata` should name the task ("task": "sudoku-9x9", "maze-30x30") for serving by `Solve`.
    Returns the version of the written checkpoint.
    Raises:
        CheckpointError: unreadable safetensors, or see `load_reference_state_dict`.
    """
    try:
        state = load_file(str(weights), device="cpu")
    except (SafetensorError, OSError, ValueError) as error:
        raise CheckpointError(f"{weights}: not a readable safetensors file ({error})") from error
    model = load_reference_state_dict(state, architecture, config)
    return save_checkpoint(directory, model, architecture,
                           {**(metadata or {}), "imported_from": str(weights),
                            "layout": "reference"})
