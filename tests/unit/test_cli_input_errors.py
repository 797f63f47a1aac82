"""Every command that reads a file answers a missing, unreadable or non-UTF-8 one with one line on
stderr and exit status 2, never a traceback; and a command whose reader closes stdout early stops
quietly (`mcts-mesh ... | head -1`)."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from mcts_mesh.cli import main

COMMANDS = [["eval", "connect4"], ["eval", "sudoku"], ["eval", "maze"], ["runs", "submit"]]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
@pytest.mark.parametrize("kind", ["missing", "directory", "binary"])
def test_a_bad_input_file_is_one_line(command, kind, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    path = {"missing": "nosuchfile", "directory": ".", "binary": "binary.txt"}[kind]
    (tmp_path / "binary.txt").write_bytes(b"\xff\xfe\x00not text")
    status = main(["--target", "127.0.0.1:1", *command, path])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert status == 2 and err.count("\n") == 1, err
    assert err.startswith(f"mcts-mesh: {path}: "), err


def test_a_checkpoint_that_does_not_load_is_one_line(tmp_path, capsys):
    status = main(["train", "trm", "--preset", "trm-mlp-cpu-sudoku6", "--steps", "1",
                   "--init-from", str(tmp_path / "nosuch"), "--output", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert status == 2 and err == f"mcts-mesh: {tmp_path / 'nosuch' / 'config.json'}: missing\n"


def test_a_closed_stdout_stops_the_command_quietly():
    # SIGPIPE ignored, as Python starts: the write fails with EPIPE (BrokenPipeError).
    child = subprocess.Popen(
        [sys.executable, "-m", "mcts_mesh.cli", "puzzles", "heldout", "maze", "--count", "3000",
         "--format", "lines"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        restore_signals=False, preexec_fn=lambda: signal.signal(signal.SIGPIPE, signal.SIG_IGN))
    assert child.stdout.readline()
    child.stdout.close()
    err = child.stderr.read().decode()
    assert child.wait(timeout=120) == 1
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
