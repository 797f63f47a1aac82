"""Nothing left behind (issue 29): the services end when their launcher dies, however it dies.

`kill -9` of `mcts-mesh up` used to leave all five services running and holding their 11 ports.
Each mechanism of `mcts_mesh.launcher.follow_launcher` is checked alone with a small stand-in
service (milliseconds per start): the lifeline pipe (a launcher that starts its services from a
thread other than its main one, where the parent-death signal cannot be used), and the
parent-death signal (the service ignores the pipe). Then the real thing: `mcts-mesh up` on ports
below 32768, SIGKILL, and every port free within 5 s.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

FREE_WITHIN_S = 5.0

SERVICE = '''
import os, socket, sys, time
from mcts_mesh import launcher
if os.environ.get("MODE") == "pdeathsig":
    launcher._watch_lifeline = lambda fd: None  # the parent-death signal alone
launcher.follow_launcher()
listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen()
with open(sys.argv[3], "w") as out:
    out.write('{"grpc": %d}' % listener.getsockname()[1])
time.sleep(600)
'''

LAUNCHER = '''
import os, sys, threading, time
from pathlib import Path
from mcts_mesh.launcher import Mesh
run = Path(sys.argv[1])
mesh = Mesh(run_dir=run, command=[sys.executable, str(run / "service.py")])
def launch():
    for name in ("a", "b", "c"):
        mesh.envs[name] = {**os.environ}
        mesh.logs[name] = run / f"{name}.log"
        mesh.launch(name)
if os.environ["MODE"] == "thread":
    thread = threading.Thread(target=launch)
    thread.start()
    thread.join()
else:
    launch()
print(" ".join(str(p.pid) for p in mesh.processes.values()), flush=True)
time.sleep(600)
'''


def _port_is_free(port: int) -> bool:
    """Whether a server could bind 127.0.0.1:`port` now (SO_REUSEADDR, as gRPC binds)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _wait_until_free(ports: list[int], within_s: float) -> list[int]:
    """The ports still taken after `within_s` seconds (polled; [] as soon as all are free)."""
    deadline = time.monotonic() + within_s
    taken = ports
    while True:
        taken = [port for port in taken if not _port_is_free(port)]
        if not taken or time.monotonic() >= deadline:
            return taken
        time.sleep(0.05)


def _kill_all(pids) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), **extra}


@pytest.mark.parametrize("mode", ["thread", "pdeathsig"])
def test_services_end_with_a_killed_launcher_by_each_mechanism_alone(tmp_path, mode):
    (tmp_path / "service.py").write_text(SERVICE)
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, str(tmp_path)],
                                env=_env(MODE=mode), stdout=subprocess.PIPE, text=True,
                                start_new_session=True)
    pids = [int(pid) for pid in launcher.stdout.readline().split()]
    try:
        assert len(pids) == 3, "the launcher did not start its services"
        ports = []
        deadline = time.monotonic() + 60
        for name in ("a", "b", "c"):
            port_file = tmp_path / f"{name}.json"
            while not (port_file.exists() and port_file.stat().st_size):
                assert time.monotonic() < deadline, f"service {name} did not start"
                time.sleep(0.02)
            ports.append(int(port_file.read_text().split(":")[1].strip(" }")))
        assert not any(_port_is_free(port) for port in ports)
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
        assert _wait_until_free(ports, FREE_WITHIN_S) == []
    finally:
        _kill_all(pids)
        with contextlib.suppress(ProcessLookupError):
            launcher.kill()


def _free_port_base(count: int = 21) -> int:
    """A port base below 32768 (outside Linux's ephemeral range) whose `count` ports are free."""
    for base in range(21000 + (os.getpid() % 50) * 200, 32000, 200):
        if all(_port_is_free(base + offset) for offset in range(count)):
            return base
    pytest.skip("no free port range below 32768")


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(child) for child in path.read_text().split()] if path.exists() else []


def test_kill_9_of_mcts_mesh_up_frees_every_port_within_5_s(tmp_path):
    base = _free_port_base()
    rest_port = base + 20
    # gRPC base..base+4, metrics base+10..base+14, REST: the 11 listeners of a mesh.
    ports = [*range(base, base + 5), *range(base + 10, base + 15), rest_port]
    out = tmp_path / "up.log"
    with out.open("w") as log:
        launcher = subprocess.Popen(
            [sys.executable, "-m", "mcts_mesh.cli", "up", "--port-base", str(base),
             "--rest-port", str(rest_port), "--log-dir", str(tmp_path / "logs")],
            env=_env(RETRIEVAL_DATA_DIR=str(tmp_path / "retrieval"),
                     LLM_FALLBACK_ORDER='["offline"]'),
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    services: list[int] = []
    try:
        deadline = time.monotonic() + 600
        while "serving; Ctrl-C stops the mesh" not in out.read_text():
            assert launcher.poll() is None, out.read_text()
            assert time.monotonic() < deadline, "the mesh did not come up in 10 minutes"
            time.sleep(0.5)
        services = _children(launcher.pid)
        assert len(services) == 5, services
        assert not any(_port_is_free(port) for port in ports), "the mesh holds its 11 ports"
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
        assert _wait_until_free(ports, FREE_WITHIN_S) == [], "ports still taken 5 s after kill -9"
    finally:
        _kill_all(services)
        with contextlib.suppress(ProcessLookupError):
            launcher.kill()
