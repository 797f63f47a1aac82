"""`mcts-mesh keys` and the client commands' `--api-key` / `MCTS_MESH_API_KEY` against the real
orchestrator process (`mcts-mesh serve orchestrator`, gRPC and REST on port 0) with
ORCHESTRATOR_REQUIRE_API_KEY=true. No other service runs: the exact checker, which lives in the
orchestrator, answers `--agents checker`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import httpx
import pytest

from mcts_mesh import cli


@pytest.fixture
def key_file(tmp_path):
    return tmp_path / "api-keys.json"


@pytest.fixture
def orchestrator(tmp_path, key_file):
    """The orchestrator process; yields its ports {"grpc": ..., "rest": ...}."""
    port_file = tmp_path / "ports.json"
    env = {**os.environ, "ORCHESTRATOR_PORT": "0", "ORCHESTRATOR_REST_PORT": "0",
           "ORCHESTRATOR_REQUIRE_API_KEY": "true", "ORCHESTRATOR_API_KEYS_FILE": str(key_file),
           "ORCHESTRATOR_API_KEYS_RELOAD_S": "0.1", "ORCHESTRATOR_RATE_LIMIT_PER_MINUTE": "4"}
    env.pop("MCTS_MESH_API_KEY", None)
    log = (tmp_path / "orchestrator.log").open("wb")
    process = subprocess.Popen([sys.executable, "-m", "mcts_mesh.cli", "serve", "orchestrator",
                                "--port-file", str(port_file)], env=env, stdout=log,
                               stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 180
        while not (port_file.exists() and port_file.stat().st_size):
            assert process.poll() is None, (tmp_path / "orchestrator.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "orchestrator not ready in 180 s"
            time.sleep(0.1)
        yield json.loads(port_file.read_text())
    finally:
        process.terminate()
        process.wait(20)
        log.close()
    text = (tmp_path / "orchestrator.log").read_text()
    assert "Traceback" not in text


def _cli(capsys, *argv) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_keys_and_api_key_option_against_the_real_orchestrator(
        orchestrator, key_file, capsys, monkeypatch, tmp_path):
    target = f"127.0.0.1:{orchestrator['grpc']}"
    solve = ("solve", "connect4", "121212", "--agents", "checker", "--json")

    code, _, err = _cli(capsys, "--target", target, *solve)
    assert code == 2 and "UNAUTHENTICATED" in err

    code, out, err = _cli(capsys, "keys", "--file", str(key_file), "create", "alice")
    assert code == 0
    key = out.strip()
    assert key.startswith("mmk_") and "cannot be shown again" in err
    assert key not in key_file.read_text()
    code, out, _ = _cli(capsys, "keys", "--file", str(key_file), "create", "bob",
                        "--per-second", "2")
    bob = out.strip()
    code, out, _ = _cli(capsys, "keys", "--file", str(key_file), "list", "--json")
    rows = [json.loads(line) for line in out.splitlines()]
    assert [row["name"] for row in rows] == ["alice", "bob"]
    assert rows[1]["limits"] == {"per_second": 2, "per_minute": 0, "per_hour": 0}
    assert all("sha256" not in row for row in rows) and key not in out
    code, _, err = _cli(capsys, "keys", "--file", str(key_file), "create", "alice")
    assert code == 2 and "exists" in err
    time.sleep(0.5)  # the orchestrator re-reads the file within 0.1 s of a change

    code, out, err = _cli(capsys, "--target", target, "--api-key", key, *solve)
    assert code == 0, err
    assert json.loads(out)["agents"] == ["checker"]
    monkeypatch.setenv("MCTS_MESH_API_KEY", key)
    code, out, _ = _cli(capsys, "--target", target, *solve)
    assert code == 0

    rest = f"http://127.0.0.1:{orchestrator['rest']}"
    body = {"connectFour": {"moves": "121212"}, "agents": ["AGENT_CHECKER"]}
    with httpx.Client(base_url=rest, timeout=30) as http:
        assert http.post("/v1/problems:solve", json=body).status_code == 401
        assert http.get("/ready").status_code == 200
        reply = http.post("/v1/problems:solve", json=body, headers={"x-api-key": key})
        assert reply.status_code == 200, reply.text
        # alice has used 3 of the 4 calls a minute (ORCHESTRATOR_RATE_LIMIT_PER_MINUTE=4)
        assert http.post("/v1/problems:solve", json=body,
                         headers={"Authorization": f"Bearer {key}"}).status_code == 200
        refused = http.post("/v1/problems:solve", json=body, headers={"x-api-key": key})
        assert refused.status_code == 429
        assert 1 <= int(refused.headers["retry-after"]) <= 60
        # bob has his own limits (2/s, no minute limit)
        assert http.post("/v1/problems:solve", json=body,
                         headers={"x-api-key": bob}).status_code == 200
        # a key made without --scope may solve and query, not ingest (403 naming the scope)
        refused = http.post("/v1/collections/docs/documents:ingest", headers={"x-api-key": bob},
                            json={"documents": [{"id": "a", "text": "x"}]})
        assert refused.status_code == 403, refused.text
        assert refused.json()["details"][0]["metadata"]["scope"] == "ingest"

    code, _, err = _cli(capsys, "keys", "--file", str(key_file), "revoke", "alice")
    assert code == 0
    time.sleep(0.5)
    code, _, err = _cli(capsys, "--target", target, "--api-key", key, *solve)
    assert code == 2 and "UNAUTHENTICATED" in err and "invalid API key" in err
    code, _, err = _cli(capsys, "keys", "--file", str(key_file), "revoke", "alice")
    assert code == 2 and "no key named 'alice'" in err
