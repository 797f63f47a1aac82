"""Durable runs end to end through the real orchestrator process (`mcts-mesh serve orchestrator`,
gRPC and REST on port 0, keys required, the run store a SQLite file in the test's folder): the
command line submits, watches and reads a batch; REST creates a run, watches it as Server-Sent
Events across a disconnect, uploads a JSON Lines batch and downloads its results. No other service
runs: the exact checker, which lives in the orchestrator, answers `agents: [AGENT_CHECKER]`."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import time

import httpx
import pytest

from libs.data import REPO_DATA
from mcts_mesh import cli

POSITIONS = ("121212", "2252576253462244111563365343671351441",
             "7422341735647741166133573473242566")
"""Positions the exact checker solves alone: a threat in column 1, and two of Pons' End-Easy."""


@pytest.fixture
def orchestrator(tmp_path):
    """The orchestrator process and two keys for it: ({"grpc": port, "rest": port}, alice's,
    bob's)."""
    key_file = tmp_path / "api-keys.json"
    keys = (_create_key(key_file, "alice"), _create_key(key_file, "bob"))
    port_file = tmp_path / "ports.json"
    env = {**os.environ, "ORCHESTRATOR_PORT": "0", "ORCHESTRATOR_REST_PORT": "0",
           "ORCHESTRATOR_REQUIRE_API_KEY": "true", "ORCHESTRATOR_API_KEYS_FILE": str(key_file),
           "ORCHESTRATOR_RUN_STORE_URL": f"sqlite:///{tmp_path / 'runs.db'}"}
    env.pop("MCTS_MESH_API_KEY", None)
    log_path = tmp_path / "orchestrator.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "mcts_mesh.cli", "serve",
                                    "orchestrator", "--port-file", str(port_file)], env=env,
                                   stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 180
            while not (port_file.exists() and port_file.stat().st_size):
                assert process.poll() is None, log_path.read_text()[-2000:]
                assert time.monotonic() < deadline, "orchestrator not ready in 180 s"
                time.sleep(0.1)
            yield json.loads(port_file.read_text()), *keys
        finally:
            process.terminate()
            process.wait(20)
    assert "Traceback" not in log_path.read_text()


def _create_key(key_file, name: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert cli.main(["keys", "--file", str(key_file), "create", name]) == 0
    return out.getvalue().strip()


def _solve(moves: str) -> dict:
    return {"solve": {"connectFour": {"moves": moves}, "agents": ["AGENT_CHECKER"]}}


def _run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_command_line_submits_watches_and_reads_a_batch(orchestrator, tmp_path, capsys):
    ports, key, _ = orchestrator
    target = ("--target", f"127.0.0.1:{ports['grpc']}", "--api-key", key, "--deadline", "60")
    file = tmp_path / "positions.jsonl"
    file.write_text("".join(json.dumps(_solve(moves)) + "\n" for moves in POSITIONS))
    code, out, err = _run_cli(capsys, *target, "runs", "submit", str(file), "--watch")
    assert code == 0, err
    name, summary = out.splitlines()[0], out.splitlines()[-1]
    assert name.startswith("batches/")
    assert summary == f"{name}: succeeded (queued 0, running 0, succeeded 3, failed 0, " \
                      "cancelled 0)"
    code, out, err = _run_cli(capsys, *target, "runs", "results", name)
    records = [json.loads(line) for line in out.splitlines()]
    assert [record["index"] for record in records] == [0, 1, 2]
    assert all(record["state"] == "STATE_SUCCEEDED" for record in records), records
    assert all(1 <= record["response"]["connectFour"]["column"] <= 7 for record in records)
    code, out, err = _run_cli(capsys, *target, "runs", "watch", records[0]["name"])
    assert code == 0, err
    lines = out.splitlines()
    assert "queued -> running (attempt 1)" in lines[0]
    assert lines[-1] == f"{records[0]['name']}: succeeded after 1 attempt(s)"
    code, out, err = _run_cli(capsys, *target, "runs", "list", "--batch", name)
    assert sorted(line.split()[0] for line in out.splitlines()) == \
        sorted(record["name"] for record in records)
    code, out, err = _run_cli(capsys, *target, "eval", "connect4",
                              str(REPO_DATA / "connect4-pons" / "Test_L3_R1"), "--limit", "3",
                              "--agents", "checker", "--batch", "--json")
    assert code == 0, err
    summary = json.loads(out.splitlines()[-1])
    assert summary["positions"] == 3 and summary["kept"] == 3  # the exact checker's moves


def _events(text: str) -> list[dict[str, str]]:
    events = []
    for block in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines()
                      if line and not line.startswith(":"))
        if fields:
            events.append(fields)
    return events


def test_rest_watch_resumes_and_batches_upload_and_download(orchestrator):
    ports, key, other_key = orchestrator
    headers = {"X-Api-Key": key}
    with httpx.Client(base_url=f"http://127.0.0.1:{ports['rest']}", timeout=60,
                      headers=headers) as client:
        run = client.post("/v1/runs", json=_solve(POSITIONS[1])).json()
        name = run["name"]
        with client.stream("GET", f"/v1/{name}:watch") as response:
            assert response.status_code == 200
            first = next(line for line in response.iter_lines() if line.startswith("id: "))
        resumed = client.get(f"/v1/{name}:watch", headers={"Last-Event-ID": first[4:]})
        replay = client.get(f"/v1/{name}:watch")  # the run has ended: its whole history
        ids = [first[4:]] + [event["id"] for event in _events(resumed.text) if "id" in event]
        assert ids == [event["id"] for event in _events(replay.text) if "id" in event]
        assert ids == [str(number) for number in range(1, len(ids) + 1)]
        assert _events(resumed.text)[-1] == {"event": "end", "data": "{}"}
        assert client.get(f"/v1/{name}").json()["state"] == "STATE_SUCCEEDED"

        upload = "".join(json.dumps(_solve(moves)) + "\n" for moves in POSITIONS)
        bad = client.post("/v1/batches", content=upload + '{"solve": {"connectFour": 4}}\n',
                          headers={"Content-Type": "application/x-ndjson"})
        assert bad.status_code == 400 and bad.json()["message"].startswith(
            "line 4: items[3].solve.connect_four")
        full = client.post("/v1/batches", content=upload + json.dumps(_solve("4444444")),
                           headers={"Content-Type": "application/jsonl"})
        assert full.status_code == 400  # column 4 is full: the orchestrator's own check
        assert full.json()["message"].startswith("line 4: items[3].solve.connect_four.moves")
        batch = client.post("/v1/batches?batch.displayName=rest", content=upload,
                            headers={"Content-Type": "application/x-ndjson"}).json()
        watched = client.get(f"/v1/{batch['name']}:watch")
        assert _events(watched.text)[-1]["event"] == "end"
        lines = client.get(f"/v1/{batch['name']}/results").text.splitlines()
        assert [json.loads(line)["state"] for line in lines] == ["STATE_SUCCEEDED"] * 3
        other = client.get(f"/v1/{batch['name']}/results", headers={"X-Api-Key": other_key})
        assert other.status_code == 404  # another key's batch does not exist for it
        keyless = client.get(f"/v1/{batch['name']}/results", headers={"X-Api-Key": ""})
        assert keyless.status_code == 401
