"""HRM and TRM: preset sizes, the no-grad schedule, shapes, Q-head initialisation, stablemax,
carries, and checkpoint round trips. Tiny configs on the CPU."""

from __future__ import annotations

import math

import pytest
import torch

from services.neural.checkpoint import load_checkpoint, save_checkpoint
from services.neural.models import ARCHITECTURES
from services.neural.models.hrm import HRM, HRMConfig
from services.neural.models.presets import (
    ARC_PUZZLE_IDENTIFIERS,
    PRESETS,
    UnknownPreset,
    build_model,
    get_preset,
    preset_parameter_counts,
)
from services.neural.models.reasoning_layers import (
    IGNORE_LABEL_ID,
    RotaryEmbedding,
    apply_rope,
    count_parameters,
    log_stablemax,
    rms_norm,
    stablemax,
    stablemax_cross_entropy,
)
from services.neural.models.trm import TRM, TRMConfig

BATCH = 3
CELLS = 12
VOCAB = 8


def tiny_hrm(**overrides) -> HRM:
    torch.manual_seed(0)
    fields = dict(vocab_size=VOCAB, seq_len=CELLS, hidden_size=16, num_heads=2, h_layers=1,
                  l_layers=1, h_cycles=3, l_cycles=2, puzzle_emb_ndim=16,
                  num_puzzle_identifiers=4)
    fields.update(overrides)
    return HRM(HRMConfig(**fields))


def tiny_trm(**overrides) -> TRM:
    torch.manual_seed(0)
    fields = dict(vocab_size=VOCAB, seq_len=CELLS, hidden_size=16, num_heads=2, layers=2,
                  h_cycles=3, l_cycles=2, puzzle_emb_ndim=16, puzzle_emb_len=2,
                  num_puzzle_identifiers=4)
    fields.update(overrides)
    return TRM(TRMConfig(**fields))


def batch(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randint(1, VOCAB, (BATCH, CELLS), generator=generator)
    return inputs, torch.tensor([0, 1, 3])


def perturb_puzzle_embeddings(model: torch.nn.Module) -> None:
    """The tables start at zero; give them values so they matter in a comparison."""
    with torch.no_grad():
        model.encoder.puzzle_emb.weight.normal_()


# --- presets -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def counts() -> dict[str, int]:
    return preset_parameter_counts()


@pytest.mark.parametrize(("name", "paper"), [
    ("hrm-paper-sudoku", 27.27e6),
    ("trm-mlp-paper-sudoku", 5.03e6),
    ("trm-att-paper-maze", 6.83e6),
    ("trm-att-paper-arc", 6.83e6),
])
def test_paper_presets_match_the_published_sizes(counts, name: str, paper: float) -> None:
    count = counts[name]
    assert abs(count - paper) / paper < 0.01, (name, count)


def test_parameter_counts_are_the_documented_exact_values(counts) -> None:
    assert counts == {
        "hrm-paper-sudoku": 27_275_266,
        "trm-mlp-paper-sudoku": 5_028_353,
        "trm-att-paper-maze": 6_822_401,
        "trm-att-paper-arc": 6_828_545,
        "trm-mlp-cpu-sudoku6": 210_529,
        "trm-mlp-cpu-maze9": 279_265,
        "trm-mlp-cpu-maze7": 230_113,
        "hrm-cpu-sudoku6": 263_298,
        "hrm-cpu-maze9": 263_042,
        "trm-mlp-cpu-maze11": 532_705,
        "hrm-cpu-maze11": 263_042,
    }


def test_cpu_presets_are_small_and_sized_for_6x6_sudoku(counts) -> None:
    for name in ("trm-mlp-cpu-sudoku6", "hrm-cpu-sudoku6"):
        assert 100_000 <= counts[name] <= 500_000
        config = PRESETS[name].config
        assert (config.vocab_size, config.seq_len) == (8, 36)
    assert 100_000 <= counts["trm-mlp-cpu-maze9"] <= 500_000
    maze = PRESETS["trm-mlp-cpu-maze9"].config
    assert (maze.vocab_size, maze.seq_len) == (6, 81)  # 9x9 grid of '# SGo' plus padding


def test_counts_exclude_only_the_puzzle_table() -> None:
    model = build_model("trm-att-paper-arc", "meta")
    everything = sum(parameter.numel() for parameter in model.parameters())
    assert everything - count_parameters(model) == ARC_PUZZLE_IDENTIFIERS * 512


def test_meta_count_equals_a_real_build(counts) -> None:
    model = build_model("trm-mlp-paper-sudoku")
    assert next(model.parameters()).device.type == "cpu"
    assert count_parameters(model) == counts["trm-mlp-paper-sudoku"]


def test_unknown_preset_names_the_known_ones() -> None:
    with pytest.raises(UnknownPreset, match="hrm-paper-sudoku"):
        get_preset("hrm-huge")


def test_presets_are_registered_architectures() -> None:
    for preset in PRESETS.values():
        entry = ARCHITECTURES[preset.architecture]
        assert isinstance(preset.config, entry.config_type)


# --- the no-grad schedule --------------------------------------------------------------------

def record_calls(modules: dict[str, torch.nn.Module]) -> list[tuple[str, bool]]:
    """(name, grad enabled) for every forward call of the given modules, in order."""
    calls: list[tuple[str, bool]] = []
    for name, module in modules.items():
        module.register_forward_pre_hook(
            lambda _module, _args, name=name: calls.append((name, torch.is_grad_enabled())))
    return calls


def test_hrm_one_step_gradient_schedule() -> None:
    model = tiny_hrm(h_cycles=3, l_cycles=2)
    calls = record_calls({"L": model.L_level, "H": model.H_level})
    inputs, puzzles = batch()
    model(model.initial_carry(BATCH), inputs, puzzles)
    assert [name for name, _ in calls] == ["L", "L", "H", "L", "L", "H", "L", "L", "H"]
    assert [grad for _, grad in calls] == [False] * 7 + [True, True]


def test_trm_backpropagates_only_the_last_recursion() -> None:
    model = tiny_trm(h_cycles=3, l_cycles=2)
    calls = record_calls({"net": model.net})
    inputs, puzzles = batch()
    model(model.initial_carry(BATCH), inputs, puzzles)
    assert len(calls) == 3 * (2 + 1)
    assert [grad for _, grad in calls] == [False] * 6 + [True] * 3


def test_hrm_gradient_equals_the_last_two_updates_from_the_no_grad_states() -> None:
    model = tiny_hrm(h_cycles=2, l_cycles=2)
    perturb_puzzle_embeddings(model)
    inputs, puzzles = batch()
    carry = model.initial_carry(BATCH)
    _, output = model(carry, inputs, puzzles)
    output.logits.square().sum().backward()
    full = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)

    rope = (model.rotary.cos, model.rotary.sin)
    x = model.encoder(inputs, puzzles)
    with torch.no_grad():  # the 3 L and 1 H updates that carry no gradient
        z_h, z_l = carry.z_H, carry.z_L
        for _ in range(2):
            z_l = model.L_level(z_l, z_h + x, rope)
        z_h = model.H_level(z_h, z_l, rope)
        z_l = model.L_level(z_l, z_h + x, rope)
    z_l = model.L_level(z_l, z_h + x, rope)
    z_h = model.H_level(z_h, z_l, rope)
    model.lm_head(z_h)[:, 1:].square().sum().backward()
    manual = {name: p.grad for name, p in model.named_parameters() if p.grad is not None}
    assert manual.keys() == full.keys()
    assert "encoder.puzzle_emb.weight" in full and "q_head.weight" not in full
    for name, grad in full.items():
        dense = grad.to_dense() if grad.is_sparse else grad
        expected = manual[name].to_dense() if manual[name].is_sparse else manual[name]
        torch.testing.assert_close(dense, expected, rtol=1e-5, atol=1e-6, msg=name)


def test_every_weight_of_the_network_gets_a_gradient() -> None:
    for model in (tiny_hrm(), tiny_trm(), tiny_trm(mlp_t=True, pos_encodings="none")):
        inputs, puzzles = batch()
        _, output = model(model.initial_carry(BATCH), inputs, puzzles)
        loss = stablemax_cross_entropy(output.logits, inputs).sum()
        (loss + output.q_halt_logits.sum()).backward()
        missing = [name for name, p in model.named_parameters() if p.grad is None]
        assert missing == [], type(model).__name__
        assert model.encoder.puzzle_emb.weight.grad.is_sparse


# --- shapes, heads, mixing -------------------------------------------------------------------

def test_output_shapes_and_q_head_initialisation() -> None:
    hrm, trm = tiny_hrm(), tiny_trm()
    inputs, puzzles = batch()
    carry, output = hrm(hrm.initial_carry(BATCH), inputs, puzzles)
    assert output.logits.shape == (BATCH, CELLS, VOCAB)
    assert carry.z_H.shape == carry.z_L.shape == (BATCH, 1 + CELLS, 16)
    assert torch.count_nonzero(hrm.q_head.weight) == 0
    assert hrm.q_head.bias.tolist() == [-5.0, -5.0]
    assert output.q_halt_logits.tolist() == output.q_continue_logits.tolist() == [-5.0] * BATCH

    carry, output = trm(trm.initial_carry(BATCH), inputs, puzzles)
    assert output.logits.shape == (BATCH, CELLS, VOCAB)
    assert carry.y.shape == carry.z.shape == (BATCH, 2 + CELLS, 16)
    assert trm.q_head.weight.shape == (1, 16) and torch.count_nonzero(trm.q_head.weight) == 0
    assert output.q_halt_logits.tolist() == [-5.0] * BATCH


@pytest.mark.parametrize("mlp_t", [False, True])
def test_every_cell_sees_every_other_cell(mlp_t: bool) -> None:
    model = tiny_trm(mlp_t=mlp_t, pos_encodings="none" if mlp_t else "rope", h_cycles=1,
                     l_cycles=1).eval()
    inputs, puzzles = batch()
    changed = inputs.clone()
    changed[:, -1] = changed[:, -1] % (VOCAB - 1) + 1  # another digit in the last cell only
    carry = model.initial_carry(BATCH)
    with torch.no_grad():
        first = model(carry, inputs, puzzles)[1].logits[:, 0]
        second = model(carry, changed, puzzles)[1].logits[:, 0]
    assert not torch.allclose(first, second)  # non-causal: the first cell sees the last


def test_puzzle_identifiers_select_embedding_rows() -> None:
    model = tiny_trm().eval()
    inputs, _ = batch()
    carry = model.initial_carry(BATCH)
    same = torch.zeros(BATCH, dtype=torch.long)
    other = torch.full((BATCH,), 2)
    with torch.no_grad():
        zero_init = [model(carry, inputs, ids)[1].logits for ids in (same, other)]
        perturb_puzzle_embeddings(model)
        perturbed = [model(carry, inputs, ids)[1].logits for ids in (same, other)]
    assert torch.equal(zero_init[0], zero_init[1])  # zero-initialised table: no effect
    assert not torch.allclose(perturbed[0], perturbed[1])


def test_rope_scores_depend_only_on_the_offset() -> None:
    rotary = RotaryEmbedding(head_dim=8, positions=10)
    torch.manual_seed(3)
    query, key = torch.randn(8), torch.randn(8)
    queries = apply_rope(query.expand(1, 1, 10, 8), rotary.cos, rotary.sin)[0, 0]
    keys = apply_rope(key.expand(1, 1, 10, 8), rotary.cos, rotary.sin)[0, 0]
    assert torch.allclose(queries[2] @ keys[5], queries[6] @ keys[9], atol=1e-5)
    assert not torch.allclose(queries[2] @ keys[5], queries[2] @ keys[6], atol=1e-3)


def test_rms_norm_gives_unit_root_mean_square() -> None:
    hidden = torch.randn(4, 7, 32) * 9
    assert torch.allclose(rms_norm(hidden).square().mean(-1), torch.ones(4, 7), atol=1e-4)


def test_invalid_configs_are_refused() -> None:
    with pytest.raises(ValueError, match="h_cycles"):
        HRMConfig(vocab_size=8, seq_len=36, h_cycles=0)
    with pytest.raises(ValueError, match="pos_encodings"):
        TRMConfig(vocab_size=8, seq_len=36, pos_encodings="alibi")
    with pytest.raises(ValueError, match="heads"):
        HRMConfig(vocab_size=8, seq_len=36, hidden_size=30, num_heads=4)
    with pytest.raises(ValueError, match="puzzle_emb_ndim"):
        TRMConfig(vocab_size=8, seq_len=36, hidden_size=16, puzzle_emb_ndim=64, puzzle_emb_len=2)


# --- stablemax -------------------------------------------------------------------------------

def reference_log_stablemax(row: list[float]) -> list[float]:
    """Python floats (IEEE double) straight from the definition."""
    s = [x + 1.0 if x >= 0 else 1.0 / (1.0 - x) for x in row]
    total = math.fsum(s)
    return [math.log(value / total) for value in s]


def test_stablemax_matches_a_float64_reference() -> None:
    torch.manual_seed(5)
    logits = torch.cat([torch.randn(6, 10) * 4, torch.tensor([[-1e4, 1e4] + [0.0] * 8])])
    labels = torch.tensor([0, 3, 9, 2, 5, 7, 1])
    expected = torch.tensor([reference_log_stablemax(row) for row in logits.double().tolist()],
                            dtype=torch.float64)
    torch.testing.assert_close(log_stablemax(logits.double()), expected, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(stablemax(logits.double()).sum(-1),
                               torch.ones(7, dtype=torch.float64))
    loss = stablemax_cross_entropy(logits, labels)  # float32 in, float64 computed
    assert loss.dtype == torch.float64
    torch.testing.assert_close(loss, -expected[torch.arange(7), labels], rtol=1e-6, atol=1e-9)
    assert torch.isfinite(loss).all()


def test_stablemax_cross_entropy_ignores_padding_labels() -> None:
    logits = torch.randn(2, 3, 5)
    labels = torch.tensor([[1, IGNORE_LABEL_ID, 4], [IGNORE_LABEL_ID] * 3])
    loss = stablemax_cross_entropy(logits, labels)
    assert loss.shape == (2, 3)
    assert loss[0, 1] == 0 and torch.count_nonzero(loss[1]) == 0 and (loss[0, 0::2] > 0).all()


# --- carries ---------------------------------------------------------------------------------

def test_initial_carry_comes_from_the_fixed_buffers() -> None:
    model = tiny_hrm()
    carry = model.initial_carry(BATCH)
    assert torch.equal(carry.z_H[2, 5], model.H_init) and torch.equal(carry.z_L[0, 0],
                                                                       model.L_init)
    assert {"H_init", "L_init"} <= set(model.state_dict())


@pytest.mark.parametrize("make", [tiny_hrm, tiny_trm])
def test_two_segments_of_one_cycle_equal_one_segment_of_two(make) -> None:
    """The carry holds the whole recurrent state: splitting the same updates over two
    segments, passing the carry between them, gives the same states and logits."""
    long, short = make(h_cycles=2).eval(), make(h_cycles=1).eval()
    short.load_state_dict(long.state_dict())
    inputs, puzzles = batch()
    perturb_puzzle_embeddings(long)
    short.encoder.puzzle_emb.weight.data.copy_(long.encoder.puzzle_emb.weight.data)
    with torch.no_grad():
        carry_long, out_long = long(long.initial_carry(BATCH), inputs, puzzles)
        carry_short, _ = short(short.initial_carry(BATCH), inputs, puzzles)
        carry_short, out_short = short(carry_short, inputs, puzzles)
    torch.testing.assert_close(out_short.logits, out_long.logits)
    for a, b in zip(vars(carry_short).values(), vars(carry_long).values(), strict=True):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("make", [tiny_hrm, tiny_trm])
def test_carry_is_detached_and_reset_restores_only_halted_rows(make) -> None:
    model = make()
    inputs, puzzles = batch()
    carry, _ = model(model.initial_carry(BATCH), inputs, puzzles)
    states = list(vars(carry).values())
    assert not any(state.requires_grad for state in states)
    reset = model.reset_carry(torch.tensor([True, False, True]), carry)
    fresh = list(vars(model.initial_carry(BATCH)).values())
    for state, after, start in zip(states, vars(reset).values(), fresh, strict=True):
        assert torch.equal(after[[0, 2]], start[[0, 2]])
        assert torch.equal(after[1], state[1]) and not torch.equal(state[1], start[1])


# --- checkpoints -----------------------------------------------------------------------------

@pytest.mark.parametrize(("architecture", "make"), [
    ("hrm", tiny_hrm), ("trm", tiny_trm),
    ("trm", lambda: tiny_trm(mlp_t=True, pos_encodings="learned")),
])
def test_checkpoint_round_trip_reproduces_outputs(tmp_path, architecture, make) -> None:
    model = make().eval()
    perturb_puzzle_embeddings(model)
    inputs, puzzles = batch()
    carry = model.initial_carry(BATCH)
    with torch.no_grad():
        _, before = model(carry, inputs, puzzles)
    save_checkpoint(tmp_path / "ckpt", model, architecture, metadata={"segments": 2})
    loaded = load_checkpoint(tmp_path / "ckpt")
    assert loaded.architecture == architecture and loaded.config == vars(model.config)
    with torch.no_grad():
        _, after = loaded.model(loaded.model.initial_carry(BATCH), inputs, puzzles)
    for a, b in zip(vars(before).values(), vars(after).values(), strict=True):
        assert torch.equal(a, b)
