"""Reference-layout state dicts (sapientinc/HRM, TinyRecursiveModels): our models written in that
layout load back with identical outputs, with or without the `_orig_mod.` / `model.` / `inner.`
prefixes; a missing, extra, duplicated or wrongly shaped key is refused naming the key."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from safetensors.torch import save_file

from services.neural.checkpoint import CheckpointError, load_checkpoint
from services.neural.models.hrm import HRM, HRMConfig
from services.neural.models.trm import TRM, TRMConfig
from services.neural.reference_checkpoint import (
    import_reference_checkpoint,
    load_reference_state_dict,
    to_reference_state_dict,
)
from services.neural.registry import ModelRegistry

VOCAB, CELLS = 8, 36


def _perturbed(model: torch.nn.Module) -> torch.nn.Module:
    # Non-zero puzzle embeddings and halting heads, so every tensor matters to the outputs.
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "puzzle_emb" in name or "q_head" in name:
                parameter.normal_(0, 0.5)
    return model.eval()


def trm_mlp() -> tuple[TRM, TRMConfig]:
    torch.manual_seed(0)
    config = TRMConfig(vocab_size=VOCAB, seq_len=CELLS, hidden_size=32, num_heads=2, layers=2,
                       h_cycles=2, l_cycles=2, mlp_t=True, pos_encodings="none",
                       puzzle_emb_ndim=48, puzzle_emb_len=2, num_puzzle_identifiers=3)
    return _perturbed(TRM(config)), config


def trm_attention() -> tuple[TRM, TRMConfig]:
    torch.manual_seed(1)
    config = TRMConfig(vocab_size=VOCAB, seq_len=CELLS, hidden_size=32, num_heads=4, layers=2,
                       h_cycles=2, l_cycles=2, pos_encodings="learned", puzzle_emb_ndim=32,
                       puzzle_emb_len=1)
    return _perturbed(TRM(config)), config


def hrm_rope() -> tuple[HRM, HRMConfig]:
    torch.manual_seed(2)
    config = HRMConfig(vocab_size=VOCAB, seq_len=CELLS, hidden_size=32, num_heads=2, h_layers=2,
                       l_layers=1, h_cycles=2, l_cycles=2, puzzle_emb_ndim=40)
    return _perturbed(HRM(config)), config


BUILDERS = {"trm-mlp": ("trm", trm_mlp), "trm-att": ("trm", trm_attention),
            "hrm": ("hrm", hrm_rope)}


def _outputs(model, segments: int = 2):
    generator = torch.Generator().manual_seed(5)
    inputs = torch.randint(1, VOCAB, (3, CELLS), generator=generator, dtype=torch.int32)
    identifiers = torch.tensor([0, 0, 0], dtype=torch.int32)
    if model.config.num_puzzle_identifiers > 1:
        identifiers = torch.tensor([0, 1, 2], dtype=torch.int32)
    with torch.no_grad():
        carry = model.initial_carry(3)
        results = []
        for _ in range(segments):
            carry, output = model(carry, inputs, identifiers)
            results.append(output)
    return results


def _assert_same_outputs(ours, loaded):
    for a, b in zip(_outputs(ours), _outputs(loaded), strict=True):
        assert torch.equal(a.logits, b.logits)
        assert torch.equal(a.q_halt_logits, b.q_halt_logits)
        if hasattr(a, "q_continue_logits"):
            assert torch.equal(a.q_continue_logits, b.q_continue_logits)


@pytest.mark.parametrize("variant", sorted(BUILDERS))
def test_a_reference_layout_state_dict_loads_with_identical_outputs(variant):
    architecture, build = BUILDERS[variant]
    model, config = build()
    state = to_reference_state_dict(model, architecture)
    assert all(key.startswith("_orig_mod.model.inner.") for key in state)
    names = {key.removeprefix("_orig_mod.model.inner.") for key in state}
    assert "embed_tokens.embedding_weight" in names and "puzzle_emb.weights" in names
    assert "H_init" in names and "L_init" in names and "lm_head.weight" in names
    assert state["_orig_mod.model.inner.q_head.weight"].shape == (2, config.hidden_size)
    if architecture == "trm":
        assert not any(name.startswith(("net.", "H_level")) for name in names)
        assert "L_level.layers.1.mlp.gate_up_proj.weight" in names
    else:
        assert "H_level.layers.1.self_attn.qkv_proj.weight" in names
    loaded = load_reference_state_dict(state, architecture, config)
    _assert_same_outputs(model, loaded)


@pytest.mark.parametrize("prefix", ["", "inner.", "model.inner.", "_orig_mod.inner."])
def test_every_prefix_combination_loads(prefix):
    model, config = trm_mlp()
    loaded = load_reference_state_dict(to_reference_state_dict(model, "trm", prefix), "trm",
                                       config)
    _assert_same_outputs(model, loaded)


def test_bf16_initial_states_of_the_references_load_as_float32():
    model, config = hrm_rope()
    state = to_reference_state_dict(model, "hrm")
    for key in ("_orig_mod.model.inner.H_init", "_orig_mod.model.inner.L_init"):
        state[key] = state[key].to(torch.bfloat16)
    loaded = load_reference_state_dict(state, "hrm", config)
    assert loaded.H_init.dtype == torch.float32
    assert torch.equal(loaded.H_init, model.H_init.to(torch.bfloat16).float())


def test_trm_keeps_q_halt_and_drops_the_reference_q_continue():
    model, config = trm_attention()
    state = to_reference_state_dict(model, "trm")
    weight = state["_orig_mod.model.inner.q_head.weight"]
    assert torch.equal(weight[0], model.q_head.weight[0])
    assert torch.equal(weight[1], torch.zeros_like(weight[1]))
    state["_orig_mod.model.inner.q_head.weight"][1] = 7.0  # q_continue: unused by our TRM
    loaded = load_reference_state_dict(state, "trm", config)
    assert torch.equal(loaded.q_head.weight, model.q_head.weight)


def test_missing_extra_duplicated_and_misshaped_keys_are_refused_by_name():
    model, config = trm_mlp()
    state = to_reference_state_dict(model, "trm")
    key = "_orig_mod.model.inner.L_level.layers.1.mlp.down_proj.weight"

    missing = dict(state)
    del missing[key]
    with pytest.raises(CheckpointError, match="missing key 'L_level.layers.1.mlp.down_proj"):
        load_reference_state_dict(missing, "trm", config)

    extra = {**state, "_orig_mod.model.inner.L_level.layers.2.mlp.down_proj.weight":
             state[key].clone()}
    with pytest.raises(CheckpointError, match="unexpected key '_orig_mod.model.inner.L_level"
                                              ".layers.2.mlp.down_proj.weight'"):
        load_reference_state_dict(extra, "trm", config)

    doubled = {**state, "inner.lm_head.weight": state["_orig_mod.model.inner.lm_head.weight"]}
    with pytest.raises(CheckpointError, match="both name 'lm_head.weight'"):
        load_reference_state_dict(doubled, "trm", config)

    misshaped = {**state, key: state[key][:, :-1]}
    with pytest.raises(CheckpointError, match=f"key '{key}': shape"):
        load_reference_state_dict(misshaped, "trm", config)

    q_one_output = {**state, "_orig_mod.model.inner.q_head.bias": torch.zeros(1)}
    with pytest.raises(CheckpointError, match="q_head.bias'.*q_halt, q_continue"):
        load_reference_state_dict(q_one_output, "trm", config)

    with pytest.raises(CheckpointError, match="no reference layout"):
        load_reference_state_dict(state, "connect4_pv", config)

    # A config of other sizes than the weights' is refused the same way.
    wider = replace(config, hidden_size=64, puzzle_emb_ndim=64)
    with pytest.raises(CheckpointError, match="shape"):
        load_reference_state_dict(state, "trm", wider)


def test_an_imported_reference_checkpoint_is_served(tmp_path):
    model, config = hrm_rope()
    weights = tmp_path / "reference.safetensors"
    save_file(to_reference_state_dict(model, "hrm"), str(weights))
    import_reference_checkpoint(weights, "hrm", config, tmp_path / "models" / "hrm-ref",
                                {"task": "sudoku-6x6"})
    _assert_same_outputs(model, load_checkpoint(tmp_path / "models" / "hrm-ref").model)
    registry = ModelRegistry.load(tmp_path / "models", "cpu")
    assert registry.get("hrm-ref").task_name == "sudoku-6x6"
    assert registry.get("hrm-ref").metadata["layout"] == "reference"
    (tmp_path / "broken.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(CheckpointError, match="not a readable safetensors"):
        import_reference_checkpoint(tmp_path / "broken.safetensors", "hrm", config,
                                    tmp_path / "models" / "nope")
