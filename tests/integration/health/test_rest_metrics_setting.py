"""ORCHESTRATOR_REST_METRICS (issue 29, point 8): with it off, as deploy/k8s sets it, the public
REST port answers /metrics 404 while the metrics port serves them; on (the default), both do.
The real orchestrator (`mcts-mesh serve orchestrator`, a child process; its dependencies are not
running, which the orchestrator tolerates)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest


@pytest.mark.parametrize("rest_metrics", [False, True])
def test_rest_port_serves_metrics_only_when_asked(tmp_path, rest_metrics):
    port_file = tmp_path / "ports.json"
    log = tmp_path / "orchestrator.log"
    env = {**os.environ, "ORCHESTRATOR_PORT": "0", "ORCHESTRATOR_REST_PORT": "0",
           "ORCHESTRATOR_METRICS_PORT": "0", "ORCHESTRATOR_REST_METRICS": str(rest_metrics),
           "ORCHESTRATOR_API_KEYS_FILE": str(tmp_path / "keys.json")}
    for name in ("MCTS", "NEURAL", "RETRIEVAL", "LLM"):
        env[f"ORCHESTRATOR_{name}_TARGET"] = "127.0.0.1:1"  # nothing there
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "mcts_mesh.cli", "serve", "orchestrator", "--port-file",
             str(port_file)], env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 300
        while not (port_file.exists() and port_file.stat().st_size):
            assert process.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "the orchestrator did not start"
            time.sleep(0.1)
        ports = json.loads(port_file.read_text())
        rest = httpx.get(f"http://127.0.0.1:{ports['rest']}/metrics", timeout=10)
        metrics = httpx.get(f"http://127.0.0.1:{ports['metrics']}/metrics", timeout=10)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)
    assert metrics.status_code == 200 and "grpc_server_handled_total" in metrics.text
    assert rest.status_code == (200 if rest_metrics else 404), rest.text[:300]
