"""How `train connect4-az` and `selfplay-actor` take SIGINT and SIGTERM (mcts_mesh.cli.az.
StopSignals): the first one interrupts, later ones do not break into the stop, SIGTERM waits like
Ctrl-C for a checkpoint's renames, and the previous handlers come back."""

from __future__ import annotations

import signal

import pytest

from mcts_mesh.cli.az import StopSignals
from training.az import learner

NETWORK = {"channels": 8, "blocks": 1, "value_hidden": 8}

# Each test starts from SIGINT's default disposition, whatever the shell that ran pytest left.
pytestmark = pytest.mark.usefixtures("default_sigint")


def test_the_first_signal_interrupts_and_later_ones_are_ignored():
    before = signal.getsignal(signal.SIGTERM)
    with StopSignals(signal.SIGINT, signal.SIGTERM) as stop:
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGTERM)
        signal.raise_signal(signal.SIGINT)  # while stopping: nothing is raised
        signal.raise_signal(signal.SIGTERM)
    assert (stop.received, stop.name, stop.exit_status()) == (signal.SIGTERM, "SIGTERM", 143)
    assert signal.getsignal(signal.SIGTERM) is before
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_sigint_ignored_at_start_still_interrupts():
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a background job's disposition
    try:
        with StopSignals(signal.SIGINT) as stop, pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
        assert stop.exit_status() == 130
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


def test_sigterm_waits_for_a_checkpoints_renames(tmp_path, monkeypatch):
    model = learner.new_model(NETWORK, 0, "cpu")
    renames = []
    original = type(tmp_path).rename

    def rename(self, target):  # SIGTERM arrives between the two renames of the swap
        result = original(self, target)
        renames.append(target)
        if len(renames) == 1:
            signal.raise_signal(signal.SIGTERM)
        return result

    learner.save_generation(tmp_path, 1, model, {"n": 1})
    monkeypatch.setattr(type(tmp_path), "rename", rename)
    with StopSignals(signal.SIGINT, signal.SIGTERM), pytest.raises(KeyboardInterrupt):
        learner.save_generation(tmp_path, 1, model, {"n": 2})
    monkeypatch.undo()
    assert len(renames) == 2  # both renames were done before the interrupt
    _, metadata = learner.load_generation(learner.generation_dir(tmp_path, 1), NETWORK, "cpu")
    assert metadata == {"n": 2}
