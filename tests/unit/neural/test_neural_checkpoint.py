"""Checkpoints: an exact round trip; pickles, corrupt files and mismatched configs are refused."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from libs.connect4.board import Position, encode, legal_mask
from services.neural.checkpoint import (
    CONFIG_FILE,
    WEIGHTS_FILE,
    CheckpointError,
    load_checkpoint,
    replace_checkpoint,
    save_checkpoint,
)
from services.neural.models.connect4_pv import ARCHITECTURE, Connect4PVConfig, predict


@pytest.fixture
def saved(tmp_path, tiny_model):
    directory = tmp_path / "connect4-pv"
    version = save_checkpoint(directory, tiny_model, ARCHITECTURE, {"games": 3, "loss": [1.5, 1.2]})
    return directory, version


def _rewrite_config(directory, change):
    path = directory / CONFIG_FILE
    document = json.loads(path.read_text())
    change(document)
    path.write_text(json.dumps(document))


def test_round_trip_is_exact(saved, tiny_model, positions):
    directory, version = saved
    checkpoint = load_checkpoint(directory)
    assert checkpoint.architecture == ARCHITECTURE
    assert checkpoint.config == {"channels": 8, "blocks": 1, "value_hidden": 16, "columns": 7,
                                 "rows": 6, "actions": 0}
    assert checkpoint.metadata == {"games": 3, "loss": [1.5, 1.2]}
    assert checkpoint.version == version
    assert version == hashlib.sha256((directory / WEIGHTS_FILE).read_bytes()).hexdigest()[:12]
    original = tiny_model.state_dict()
    loaded = checkpoint.model.state_dict()
    assert original.keys() == loaded.keys()
    for name, tensor in original.items():
        assert torch.equal(tensor, loaded[name]), name
    assert not checkpoint.model.training
    parsed = [Position.from_moves(m) for m in positions]
    planes = np.stack([encode(p) for p in parsed])
    legal = np.stack([legal_mask(p) for p in parsed])
    for a, b in zip(predict(tiny_model, planes, legal), predict(checkpoint.model, planes, legal),
                    strict=True):
        np.testing.assert_array_equal(a, b)


def test_saving_again_keeps_the_version_of_equal_weights(saved, tiny_model, tmp_path):
    _, version = saved
    assert save_checkpoint(tmp_path / "again", tiny_model, ARCHITECTURE, {}) == version


def test_refuses_a_pickle_without_unpickling_it(saved, tiny_model, monkeypatch):
    directory, _ = saved
    torch.save(tiny_model.state_dict(), directory / WEIGHTS_FILE)
    digest = hashlib.sha256((directory / WEIGHTS_FILE).read_bytes()).hexdigest()
    _rewrite_config(directory, lambda d: d["weights"].update(sha256=digest))

    def no_unpickling(*args, **kwargs):
        raise AssertionError("torch.load must never be called")

    monkeypatch.setattr(torch, "load", no_unpickling)
    with pytest.raises(CheckpointError, match="pickle"):
        load_checkpoint(directory)


def test_refuses_a_plain_pickle(saved, tiny_model):
    import pickle

    directory, _ = saved
    (directory / WEIGHTS_FILE).write_bytes(pickle.dumps({"weight": [1.0, 2.0]}))
    with pytest.raises(CheckpointError, match="pickle"):
        load_checkpoint(directory)


def test_refuses_weights_that_differ_from_the_recorded_hash(saved):
    directory, _ = saved
    data = bytearray((directory / WEIGHTS_FILE).read_bytes())
    data[-1] ^= 0xFF
    (directory / WEIGHTS_FILE).write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="SHA-256"):
        load_checkpoint(directory)


def test_refuses_a_truncated_safetensors_file(saved):
    directory, _ = saved
    data = (directory / WEIGHTS_FILE).read_bytes()[:200]
    (directory / WEIGHTS_FILE).write_bytes(data)
    digest = hashlib.sha256(data).hexdigest()
    _rewrite_config(directory, lambda d: d["weights"].update(sha256=digest))
    with pytest.raises(CheckpointError, match="not a readable safetensors"):
        load_checkpoint(directory)


def test_refuses_a_config_that_does_not_match_the_weights(saved):
    directory, _ = saved
    _rewrite_config(directory, lambda d: d["config"].update(channels=16))
    with pytest.raises(CheckpointError, match="do not match"):
        load_checkpoint(directory)


def test_refuses_unknown_config_fields_and_architectures(saved):
    directory, _ = saved
    _rewrite_config(directory, lambda d: d["config"].update(heads=4))
    with pytest.raises(CheckpointError, match="config does not fit"):
        load_checkpoint(directory)
    _rewrite_config(directory, lambda d: d.update(architecture="transformer"))
    with pytest.raises(CheckpointError, match="unknown architecture"):
        load_checkpoint(directory)


def test_refuses_missing_or_invalid_config(saved):
    directory, _ = saved
    (directory / CONFIG_FILE).write_text("{not json")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        load_checkpoint(directory)
    (directory / CONFIG_FILE).unlink()
    with pytest.raises(CheckpointError, match="missing"):
        load_checkpoint(directory)


def test_save_refuses_an_unknown_architecture(tmp_path, tiny_model):
    with pytest.raises(CheckpointError, match="unknown architecture"):
        save_checkpoint(tmp_path / "x", tiny_model, "resnet50")
    assert Connect4PVConfig() == Connect4PVConfig(48, 4, 64)


def test_a_safetensors_header_size_that_looks_like_a_pickle_mark_loads(saved, tiny_model):
    # The 8-byte little-endian header size comes first: a size of 0x..80 bytes starts the file
    # with 0x80, the first byte of every pickle (protocol 2+).
    from safetensors.torch import save_file

    directory, _ = saved
    state = {k: v.contiguous() for k, v in tiny_model.state_dict().items()}
    for pad in range(300):
        save_file(state, str(directory / WEIGHTS_FILE), metadata={"format": "x", "pad": "p" * pad})
        if (directory / WEIGHTS_FILE).read_bytes()[:1] == b"\x80":
            break
    else:
        raise AssertionError("no padding gave a header size of 0x..80 bytes")
    digest = hashlib.sha256((directory / WEIGHTS_FILE).read_bytes()).hexdigest()
    _rewrite_config(directory, lambda d: d["weights"].update(sha256=digest))
    assert load_checkpoint(directory).sha256 == digest


def test_refuses_weights_with_nan(saved, tiny_model):
    from safetensors.torch import save_file

    directory, _ = saved
    state = {k: v.clone().contiguous() for k, v in tiny_model.state_dict().items()}
    name = next(k for k, v in state.items() if v.is_floating_point())
    state[name].view(-1)[0] = float("nan")
    save_file(state, str(directory / WEIGHTS_FILE))
    digest = hashlib.sha256((directory / WEIGHTS_FILE).read_bytes()).hexdigest()
    _rewrite_config(directory, lambda d: d["weights"].update(sha256=digest))
    with pytest.raises(CheckpointError, match=f"{name}.*NaN"):
        load_checkpoint(directory)


@pytest.mark.parametrize("interrupt_after", [0, 1])
def test_an_interrupted_replacement_leaves_the_previous_checkpoint(saved, tiny_model,
                                                                   monkeypatch, interrupt_after):
    """Ctrl-C while the weights (0) or the config (1) of the new checkpoint is being written."""
    from services.neural import checkpoint as module

    directory, version = saved
    with torch.no_grad():
        for parameter in tiny_model.parameters():
            parameter.add_(1.0)
    real = module._write_atomically
    calls = []

    def interrupted(path, write):
        if len(calls) == interrupt_after:
            raise KeyboardInterrupt
        calls.append(path)
        real(path, write)

    monkeypatch.setattr(module, "_write_atomically", interrupted)
    with pytest.raises(KeyboardInterrupt):
        replace_checkpoint(directory, tiny_model, ARCHITECTURE, {"games": 4})
    monkeypatch.undo()
    assert load_checkpoint(directory).version == version
    assert sorted(p.name for p in directory.parent.iterdir()) == [directory.name]
    new_version = replace_checkpoint(directory, tiny_model, ARCHITECTURE, {"games": 4})
    loaded = load_checkpoint(directory)
    assert loaded.version == new_version != version and loaded.metadata == {"games": 4}
    assert sorted(p.name for p in directory.parent.iterdir()) == [directory.name]


@pytest.mark.usefixtures("default_sigint")  # SIGINT may start ignored (a background job)
def test_ctrl_c_during_the_swap_waits_for_it_to_finish(saved, tiny_model, monkeypatch):
    import os
    import signal

    from services.neural import checkpoint as module

    directory, _ = saved
    real_rename = Path.rename

    def rename_with_a_signal(self, target):
        os.kill(os.getpid(), signal.SIGINT)  # arrives between the two renames
        return real_rename(self, target)

    monkeypatch.setattr(module.Path, "rename", rename_with_a_signal)
    with pytest.raises(KeyboardInterrupt):
        replace_checkpoint(directory, tiny_model, ARCHITECTURE, {"games": 5})
    monkeypatch.undo()
    assert load_checkpoint(directory).metadata == {"games": 5}  # the swap completed first
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
