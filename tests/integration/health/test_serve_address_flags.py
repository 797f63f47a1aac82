"""`mcts-mesh serve --host/--port` set the address a service binds (over <SERVICE>_HOST and
<SERVICE>_PORT), and `serve --help` says how a service's address is set."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest


@pytest.fixture
def held_port():
    """A port some other process listens on."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


def test_the_port_flag_overrides_the_environment(held_port):
    # LLM_PORT points at a free port; --port at the held one: the bind error names the flag's.
    done = subprocess.run(
        [sys.executable, "-m", "mcts_mesh.cli", "serve", "llm", "--host", "127.0.0.1",
         "--port", str(held_port)],
        env={**os.environ, "LLM_PORT": "0", "LLM_HOST": "192.0.2.1"}, capture_output=True,
        text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        f"llm: cannot bind 127.0.0.1:{held_port}: address already in use")


def test_serve_help_says_how_to_set_host_and_port():
    done = subprocess.run([sys.executable, "-m", "mcts_mesh.cli", "serve", "--help"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    for words in ("--host", "--port", "MCTS_HOST", "MCTS_PORT", "ORCHESTRATOR_REST_PORT"):
        assert words in done.stdout
