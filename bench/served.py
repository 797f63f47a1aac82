"""One mesh service started on its own for a bench: `mcts-mesh serve NAME` on free ports, as the
launcher starts it, with the environment a bench gives it.

    from served import start_service
    process, ports = start_service("neural", {"NEURAL_PORT": "0", ...}, work_dir)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

START_TIMEOUT_S = 300.0
"""Seconds a service may take to become SERVING (the mcts service compiles its kernels first)."""


def start_service(name: str, env: dict[str, str], work: Path, cwd: Path | None = None,
                  label: str | None = None) -> tuple[subprocess.Popen, dict[str, int]]:
    """Starts `mcts-mesh serve NAME` with `env` added to this process's environment, from `cwd`
    (another source tree may be served that way), its log in `work/<label>.log`.

    Returns the process and its ports by name ({"grpc": ..., "metrics": ...}) once it is SERVING.
    Raises RuntimeError with the end of its log when it exits or is not up within
    `START_TIMEOUT_S`, or when it reports a start-up error.
    """
    label = label or name
    port_file, log_path = work / f"{label}.json", work / f"{label}.log"
    port_file.unlink(missing_ok=True)
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "mcts_mesh.cli", "serve", name, "--port-file", str(port_file)],
            cwd=cwd, env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + START_TIMEOUT_S
    while not port_file.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"{name} did not start:\n{log_path.read_text()[-3000:]}")
        time.sleep(0.2)
    ports = json.loads(port_file.read_text())
    if "grpc" not in ports:
        process.kill()
        raise RuntimeError(f"{name} did not start: {ports}")
    return process, ports
