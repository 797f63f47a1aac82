"""Named HRM and TRM configurations: the papers' models and small ones that train on a CPU.

Paper presets (values from the papers and the reference repositories' configs and README
commands):
- `hrm-paper-sudoku`: HRM section 3 / sapientinc/HRM `config/arch/hrm_v1.yaml`: D=512, 8 heads,
  expansion 4, 4+4 blocks, N=T=2, RoPE, one 512-wide puzzle embedding, M_max=16, epsilon=0.1.
- `trm-mlp-paper-sudoku`: TRM section 4.5 / README "pretrain_mlp_t_sudoku": 2 blocks, MLP over the
  sequence, no position encoding, T=3, n=6, 16 prefix positions.
- `trm-att-paper-maze`, `trm-att-paper-arc`: TRM README "pretrain_att_maze30x30" and
  "pretrain_att_arc1concept": 2 attention blocks with RoPE, T=3, n=4.
Vocabularies follow the references' dataset builders: Sudoku 11 (pad, blank, digits 1-9), maze 6
(pad and the five cell characters `# SGo`), ARC 12 (pad, end-of-row marker, colours 0-9);
sequence lengths 81 (9x9) and 900 (30x30).

Parameter counts (`preset_parameter_counts`) follow the references, which hold puzzle embeddings
in a buffer outside `model.parameters()`: the papers' 27M / 5M / 7M exclude the per-puzzle table.
We count every parameter but that table (`reasoning_layers.count_parameters`); buffers (initial
states, RoPE tables) are not parameters. The counts: HRM Sudoku 27,275,266 (paper 27.27M),
TRM-MLP Sudoku 5,028,353 (5.03M), TRM-Att maze 6,822,401 and ARC 6,828,545 (6.83M); the CPU
presets 210,529 (trm-mlp-cpu-sudoku6), 279,265 (trm-mlp-cpu-maze9), 230,113 (trm-mlp-cpu-maze7),
532,705 (trm-mlp-cpu-maze11: the MLP over the sequence grows with the square of its length),
263,298 (hrm-cpu-sudoku6) and 263,042 (hrm-cpu-maze9, hrm-cpu-maze11: attention's weights do not
depend on the length).
Our TRM halting head has one output (q_halt only), 513 parameters fewer than the reference's
two-output head.

CPU presets are for 6x6 Sudoku (2x3 boxes): vocabulary 8 (pad, blank, digits 1-6), 36 cells;
and `trm-mlp-cpu-maze11` / `trm-mlp-cpu-maze9` / `trm-mlp-cpu-maze7`, the same TRM-MLP for mazes
on an 11x11 / 9x9 / 7x7 grid (`MazeTask` with 5x5 / 4x4 / 3x3 lattice cells): vocabulary 6, 121 /
81 / 49 cells; `hrm-cpu-maze11` / `hrm-cpu-maze9`, the CPU HRM on the same grids.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from services.neural.models import hrm, trm
from services.neural.models.reasoning_layers import count_parameters

SUDOKU9_VOCAB = 11
SUDOKU6_VOCAB = 8
MAZE_VOCAB = 6
ARC_VOCAB = 12
GRID9_CELLS = 81
GRID6_CELLS = 36
GRID7_CELLS = 49
GRID11_CELLS = 121
GRID30_CELLS = 900
ARC1_TASKS = 960
"""ARC-AGI-1 training (400) + evaluation (400) + ConceptARC (160) tasks, the TRM ARC-AGI-1 set."""
ARC_AUGMENTATIONS = 1000
ARC_PUZZLE_IDENTIFIERS = 1 + ARC1_TASKS * (1 + ARC_AUGMENTATIONS)
"""Identifier 0 (blank) plus one per task and augmented copy: the size of the table when every
task gets its 1,000 augmentations; the trainer sets the exact count of the dataset it builds.
The table is zero-initialised and excluded from the parameter count."""


@dataclass(frozen=True)
class Preset:
    """A named model: its architecture ("hrm" or "trm"), its config, and what it is for."""

    name: str
    architecture: str
    config: hrm.HRMConfig | trm.TRMConfig
    description: str


_MODEL_TYPES: dict[str, type[nn.Module]] = {hrm.ARCHITECTURE: hrm.HRM, trm.ARCHITECTURE: trm.TRM}


def _small_trm_mlp(vocab_size: int, seq_len: int) -> trm.TRMConfig:
    """The CPU-sized TRM-MLP of the `trm-mlp-cpu-*` presets (hidden 96, 3 x 4 cycles, up to 8
    segments) for a task's vocabulary and sequence length."""
    return trm.TRMConfig(vocab_size=vocab_size, seq_len=seq_len, hidden_size=96, num_heads=4,
                         mlp_t=True, pos_encodings="none", h_cycles=3, l_cycles=4,
                         puzzle_emb_ndim=96, puzzle_emb_len=4, halt_max_steps=8)


def _small_hrm(vocab_size: int, seq_len: int) -> hrm.HRMConfig:
    """The CPU-sized HRM of the `hrm-cpu-*` presets (hidden 64, 2 + 2 layers, 2 x 2 cycles, up
    to 8 segments) for a task's vocabulary and sequence length."""
    return hrm.HRMConfig(vocab_size=vocab_size, seq_len=seq_len, hidden_size=64, num_heads=4,
                         h_layers=2, l_layers=2, h_cycles=2, l_cycles=2, puzzle_emb_ndim=64,
                         halt_max_steps=8)


def _presets() -> dict[str, Preset]:
    presets = [
        Preset("hrm-paper-sudoku", hrm.ARCHITECTURE,
               hrm.HRMConfig(vocab_size=SUDOKU9_VOCAB, seq_len=GRID9_CELLS),
               "HRM as in the paper for Sudoku-Extreme (27.3M parameters)"),
        Preset("trm-mlp-paper-sudoku", trm.ARCHITECTURE,
               trm.TRMConfig(vocab_size=SUDOKU9_VOCAB, seq_len=GRID9_CELLS, mlp_t=True,
                             pos_encodings="none", h_cycles=3, l_cycles=6),
               "TRM-MLP as in the paper for Sudoku-Extreme (5.0M parameters)"),
        Preset("trm-att-paper-maze", trm.ARCHITECTURE,
               trm.TRMConfig(vocab_size=MAZE_VOCAB, seq_len=GRID30_CELLS, h_cycles=3,
                             l_cycles=4),
               "TRM-Att as in the paper for Maze-Hard 30x30 (6.8M parameters)"),
        Preset("trm-att-paper-arc", trm.ARCHITECTURE,
               trm.TRMConfig(vocab_size=ARC_VOCAB, seq_len=GRID30_CELLS, h_cycles=3, l_cycles=4,
                             num_puzzle_identifiers=ARC_PUZZLE_IDENTIFIERS),
               "TRM-Att as in the paper for ARC-AGI-1 (6.8M parameters without the puzzle "
               "embeddings)"),
        Preset("trm-mlp-cpu-sudoku6", trm.ARCHITECTURE, _small_trm_mlp(SUDOKU6_VOCAB, GRID6_CELLS),
               "small TRM-MLP for 6x6 Sudoku, trainable on a CPU"),
        Preset("trm-mlp-cpu-maze9", trm.ARCHITECTURE, _small_trm_mlp(MAZE_VOCAB, GRID9_CELLS),
               "small TRM-MLP for 9x9-grid mazes (4x4 cells), trainable on a CPU"),
        Preset("trm-mlp-cpu-maze7", trm.ARCHITECTURE, _small_trm_mlp(MAZE_VOCAB, GRID7_CELLS),
               "small TRM-MLP for 7x7-grid mazes (3x3 cells), trainable on a CPU"),
        Preset("hrm-cpu-sudoku6", hrm.ARCHITECTURE,
               _small_hrm(SUDOKU6_VOCAB, GRID6_CELLS),
               "small HRM for 6x6 Sudoku, trainable on a CPU"),
        Preset("hrm-cpu-maze9", hrm.ARCHITECTURE, _small_hrm(MAZE_VOCAB, GRID9_CELLS),
               "small HRM for 9x9-grid mazes (4x4 cells), trainable on a CPU"),
        Preset("trm-mlp-cpu-maze11", trm.ARCHITECTURE, _small_trm_mlp(MAZE_VOCAB, GRID11_CELLS),
               "small TRM-MLP for 11x11-grid mazes (5x5 cells), trainable on a CPU"),
        Preset("hrm-cpu-maze11", hrm.ARCHITECTURE, _small_hrm(MAZE_VOCAB, GRID11_CELLS),
               "small HRM for 11x11-grid mazes (5x5 cells), trainable on a CPU"),
    ]
    return {preset.name: preset for preset in presets}


PRESETS: dict[str, Preset] = _presets()


class UnknownPreset(KeyError):
    """A preset name that is not in `PRESETS`."""


def get_preset(name: str) -> Preset:
    """The preset called `name`. Raises `UnknownPreset` naming the known presets."""
    try:
        return PRESETS[name]
    except KeyError:
        raise UnknownPreset(f"unknown preset {name!r}; known: {sorted(PRESETS)}") from None


def build_model(name: str, device: torch.device | str | None = None) -> nn.Module:
    """A freshly initialised model of preset `name`, in training mode, on `device` (CPU when
    None; "meta" builds shapes without memory). Raises `UnknownPreset`."""
    preset = get_preset(name)
    with torch.device(device or "cpu"):
        return _MODEL_TYPES[preset.architecture](preset.config)


def preset_parameter_counts() -> dict[str, int]:
    """Parameters of every preset, by name, counted as the papers do (without the per-puzzle
    embedding table). Models are built on the meta device, so no weights are allocated."""
    return {name: count_parameters(build_model(name, "meta")) for name in PRESETS}
