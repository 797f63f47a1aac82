"""Supervisor: a service that exits is restarted with the same settings (port) after an exponential
backoff while the others keep running; one that keeps exiting makes it give up with the reason
(its own start-up error, e.g. a port it cannot bind). Real child processes (a small script stands in
for `mcts-mesh serve`, so that each start takes milliseconds)."""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import time

import pytest

from mcts_mesh.cli import build_parser
from mcts_mesh.cli.serve import supervise
from mcts_mesh.launcher import GaveUp, Mesh, RestartPolicy, Supervisor

SERVICE = '''
import json, os, sys, time
name, port_file = sys.argv[1], sys.argv[3]
with open(os.environ["STARTS"], "a") as starts:
    starts.write(json.dumps({"name": name, "at": time.monotonic(), "pid": os.getpid(),
                             "port": os.environ["PORT"]}) + "\\n")
mode = os.environ.get("MODE", "serve")
if mode == "crash":
    sys.exit(3)
if mode == "bind":
    message = f"{name}: cannot bind 127.0.0.1:{os.environ['PORT']}: address already in use"
    with open(port_file, "w") as out:
        out.write(json.dumps({"error": message}))
    sys.exit(1)
with open(port_file, "w") as out:
    out.write(json.dumps({"grpc": int(os.environ["PORT"])}))
time.sleep(600)
'''


@pytest.fixture
def mesh(tmp_path):
    script = tmp_path / "service.py"
    script.write_text(SERVICE)
    mesh = Mesh(run_dir=tmp_path, command=[sys.executable, str(script)])

    def start(name: str, port: int, mode: str = "serve") -> None:
        mesh.envs[name] = {**os.environ, "PORT": str(port), "MODE": mode,
                           "STARTS": str(tmp_path / "starts.jsonl")}
        mesh.logs[name] = tmp_path / f"{name}.log"
        mesh.ports[name] = port
        mesh.launch(name)

    mesh.start = start
    yield mesh
    mesh.stop(timeout_s=2)


def starts(mesh: Mesh, name: str) -> list[dict]:
    path = mesh.run_dir / "starts.jsonl"
    if not path.exists():
        return []
    records = [json.loads(line) for line in path.read_text().splitlines()]
    return [r for r in records if r["name"] == name]


def run(supervisor: Supervisor, until, within_s: float = 10.0) -> None:
    deadline = time.monotonic() + within_s
    while not until():
        assert time.monotonic() < deadline, "condition not reached"
        supervisor.step()
        time.sleep(0.01)


def test_a_killed_service_comes_back_on_its_port_and_the_others_keep_running(mesh, caplog):
    mesh.start("mcts", 50052)
    mesh.start("neural", 50053)
    supervisor = Supervisor(mesh, RestartPolicy(backoff_initial_s=0.05))
    run(supervisor, lambda: len(starts(mesh, "mcts")) == 1 and len(starts(mesh, "neural")) == 1)
    run(supervisor, lambda: (mesh.run_dir / "mcts.json").exists())
    neural_pid = mesh.processes["neural"].pid

    caplog.set_level(logging.WARNING, logger="mcts_mesh.launcher")
    os.kill(mesh.processes["mcts"].pid, signal.SIGKILL)
    run(supervisor, lambda: len(starts(mesh, "mcts")) == 2)
    run(supervisor, lambda: "mcts is back: SERVING on port 50052" in caplog.text)
    first, second = starts(mesh, "mcts")
    assert second["port"] == first["port"] == "50052"
    assert second["pid"] != first["pid"] and mesh.processes["mcts"].poll() is None
    assert second["at"] - first["at"] >= 0.05
    assert mesh.processes["neural"].pid == neural_pid and mesh.processes["neural"].poll() is None
    assert supervisor.restarts == {"mcts": 1, "neural": 0}
    assert "mcts exited with signal SIGKILL" in caplog.text
    assert "restarting mcts (restart 1 in a row, 1 in all) on port 50052" in caplog.text


def test_a_service_that_keeps_exiting_backs_off_then_the_supervisor_gives_up(mesh):
    mesh.start("retrieval", 50054, mode="crash")
    supervisor = Supervisor(mesh, RestartPolicy(max_restarts=3, backoff_initial_s=0.05,
                                                backoff_max_s=0.15))
    with pytest.raises(GaveUp) as caught:
        run(supervisor, lambda: False)
    assert str(caught.value).startswith(
        "retrieval exited 4 times in a row; giving up after 3 restarts. Last: retrieval exited "
        "with code 3")
    times = [record["at"] for record in starts(mesh, "retrieval")]
    assert len(times) == 4
    gaps = [later - earlier for earlier, later in zip(times, times[1:], strict=False)]
    for gap, backoff in zip(gaps, (0.05, 0.1, 0.15), strict=True):  # doubled, then capped
        assert gap >= backoff


def test_a_restart_that_cannot_bind_its_port_gives_up_with_that_reason(mesh):
    mesh.start("mcts", 50052)
    supervisor = Supervisor(mesh, RestartPolicy(max_restarts=2, backoff_initial_s=0.02))
    run(supervisor, lambda: (mesh.run_dir / "mcts.json").exists())
    mesh.envs["mcts"]["MODE"] = "bind"  # something else took the port meanwhile
    mesh.processes["mcts"].kill()
    with pytest.raises(GaveUp) as caught:
        run(supervisor, lambda: False)
    assert str(caught.value).endswith(
        "Last: mcts: cannot bind 127.0.0.1:50052: address already in use")


def test_a_service_that_stayed_up_starts_a_fresh_count(mesh):
    mesh.start("neural", 50053)
    supervisor = Supervisor(mesh, RestartPolicy(max_restarts=1, backoff_initial_s=0.02,
                                                stable_s=0.3))
    for round_ in range(1, 4):  # three kills, each after the service stayed up past stable_s
        run(supervisor, lambda round_=round_: len(starts(mesh, "neural")) == round_)
        run(supervisor, lambda: (mesh.run_dir / "neural.json").exists())
        time.sleep(0.35)
        supervisor.step()
        mesh.processes["neural"].kill()
    run(supervisor, lambda: len(starts(mesh, "neural")) == 4)
    assert supervisor.restarts["neural"] == 3


def test_fail_fast_stops_at_the_first_exit_and_supervision_reports_giving_up(mesh, capsys):
    mesh.start("mcts", 50052)
    mesh.start("retrieval", 50054, mode="crash")
    args = build_parser().parse_args(["up", "--fail-fast"])
    assert supervise(mesh, args) == 1
    assert "service exited: retrieval; stopping the mesh (--fail-fast)" in capsys.readouterr().err
    assert len(starts(mesh, "retrieval")) == 1, "--fail-fast restarts nothing"

    args = build_parser().parse_args(["up", "--max-restarts", "1", "--restart-backoff", "0.01"])
    assert supervise(mesh, args) == 1
    assert capsys.readouterr().err.startswith(
        "retrieval exited 2 times in a row; giving up after 1 restarts. Last: retrieval exited "
        "with code 3")
    assert len(starts(mesh, "retrieval")) == 2
    assert mesh.processes["mcts"].poll() is None, "the others kept running"
