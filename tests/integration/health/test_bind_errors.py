"""A service that cannot bind its port says which port and why, in one line and without a
traceback, both run alone (`mcts-mesh serve`) and under `mcts-mesh up`, which then stops."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest


@pytest.fixture
def held_port():
    """A port some other process listens on (bound on port 0, then listening)."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


def _free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def test_serve_names_the_port_it_cannot_bind(held_port, tmp_path):
    port_file = tmp_path / "llm.json"
    done = subprocess.run(
        [sys.executable, "-m", "mcts_mesh.cli", "serve", "llm", "--port-file",
         str(port_file)],
        env={**os.environ, "LLM_PORT": str(held_port)}, capture_output=True, text=True,
        timeout=120)
    expected = f"llm: cannot bind 127.0.0.1:{held_port}: address already in use"
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == expected
    assert "Traceback" not in done.stderr
    assert json.loads(port_file.read_text()) == {"error": expected}


@pytest.fixture
def held_mcts_port():
    """A held port (as `held_port`) whose neighbours are free: with `--port-base PORT - 1` it is
    mcts's and only mcts's port (the orchestrator is the base, mcts base + 1, ... llm base + 4)."""
    for _ in range(50):
        with socket.socket() as holder:
            holder.bind(("127.0.0.1", 0))
            holder.listen()
            port = holder.getsockname()[1]
            if all(_free(other) for other in (port - 1, port + 1, port + 2, port + 3)):
                yield port
                return
    pytest.skip("found no free run of five loopback ports in 50 tries")


def test_up_stops_with_the_bind_error_instead_of_a_traceback(held_mcts_port, tmp_path):
    held_port, base = held_mcts_port, held_mcts_port - 1
    done = subprocess.run(
        [sys.executable, "-m", "mcts_mesh.cli", "up", "--port-base", str(base), "--rest-port",
         "0", "--log-dir", str(tmp_path / "logs")],
        env={**os.environ, "RETRIEVAL_DATA_DIR": str(tmp_path / "retrieval")},
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        f"mcts: cannot bind 127.0.0.1:{held_port}: address already in use; the mesh did not start")
    assert "Traceback" not in done.stderr + done.stdout
