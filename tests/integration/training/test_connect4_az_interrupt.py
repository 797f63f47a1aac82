"""Ctrl-C during `mcts-mesh train connect4-az` (issue 12): the learner and the actors it started
stop within seconds, with status 130 and one line instead of a traceback, also when the shell
started the command with SIGINT ignored (a background job: the way it had gone unstopped); the
last complete generation's checkpoint loads and the run resumes from it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from training.az import learner
from training.az.loop import train_connect4_az
from training.az.settings import AZSettings

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[3]
TINY = {"channels": 8, "blocks": 1, "value_hidden": 8, "games_per_generation": 4,
        "concurrent_games": 4, "simulations": 8, "leaves_per_search": 2, "pons_positions": 0,
        "arena_games": 4, "steps_per_generation": 2, "batch_size": 16, "device": "cpu"}
STOP_BOUND_S = 20.0
"""Seconds the command may take to exit after SIGINT (a few on an idle machine; generous for a
shared 2-core one)."""


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # what `command &` does in a script


def test_sigint_stops_learner_and_actors_leaving_a_checkpoint_to_resume(tmp_path):
    run_dir = tmp_path / "run"
    command = [sys.executable, "-m", "mcts_mesh.cli", "train", "connect4-az", "--run-dir",
               str(run_dir), "--generations", "1000", "--actors", "1"]
    for field, value in TINY.items():
        command += ["--set", f"{field}={value}"]
    stderr_path = tmp_path / "stderr.txt"
    with stderr_path.open("w") as stderr:
        process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=stderr,
                                   start_new_session=True, preexec_fn=_ignore_sigint)
    try:
        deadline = time.monotonic() + 300
        while not (run_dir / "checkpoints" / "gen-0001").is_dir():
            assert process.poll() is None, stderr_path.read_text()
            assert time.monotonic() < deadline, "no generation 1 in 300 s"
            time.sleep(0.2)
        process.send_signal(signal.SIGINT)
        sent = time.monotonic()
        status = process.wait(timeout=60)
        stopped_s = time.monotonic() - sent
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    errors = stderr_path.read_text()
    assert status == 130, errors
    assert stopped_s < STOP_BOUND_S, errors
    assert "Traceback" not in errors, errors
    last = errors.strip().splitlines()[-1]
    assert last.startswith("train connect4-az: interrupted (SIGINT); generation "), last
    # The actor went with the learner: nothing of the session is left.
    time.sleep(0.5)
    with pytest.raises(ProcessLookupError):
        os.killpg(process.pid, 0)

    settings = AZSettings(run_dir=run_dir, **TINY)
    done = max(int(path.name[4:]) for path in (run_dir / "checkpoints").glob("gen-*"))
    assert f"generation {done} " in last
    _, metadata = learner.load_generation(learner.generation_dir(run_dir, done),
                                          settings.network, "cpu")
    assert metadata["generation"] == done
    resumed = train_connect4_az(settings.model_copy(update={"generations": done + 1}),
                                report=lambda line: None)
    assert resumed["resumed_from"] == done
    assert [entry["generation"] for entry in resumed["history"]] == list(range(done + 2))
