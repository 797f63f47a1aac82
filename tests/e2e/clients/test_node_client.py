"""A Node.js client (clients/node: @grpc/grpc-js + @grpc/proto-loader, loading protos/ and the
vendored googleapis protos at run time) calls SolveProblem, IngestDocuments and AnswerQuery on the
real mesh and decodes the google.rpc.BadRequest detail of a bad field; its channel keeps an idle
connection alive with HTTP/2 pings (a Node test that needs no mesh); clients/node/search_external.js
drives MctsService.SearchExternal on the mesh's mcts service, evaluating tic-tac-toe leaves
itself (docs/guides/search-external.md).

Needs `node` and `npm ci` in clients/node (`.ci/run` does both); skipped with the reason otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

NODE = shutil.which("node")


def _node_dir(repo_root):
    folder = repo_root / "clients" / "node"
    if NODE is None:
        pytest.skip("node is not installed (.ci/run installs nodejs and npm from Debian)")
    if not (folder / "node_modules" / "@grpc" / "grpc-js").is_dir():
        pytest.skip("clients/node has no node_modules: run `npm ci` in clients/node")
    return folder


def test_node_client_test_suite_passes_against_the_mesh(mesh, repo_root):
    folder = _node_dir(repo_root)
    run = subprocess.run([NODE, "--test", "test/"], cwd=folder, capture_output=True, text=True,
                         timeout=300, env={**os.environ, "MESH_TARGET": mesh.target,
                                           "MCTS_TARGET": f"127.0.0.1:{mesh.ports['mcts']}",
                                           "MCTS_MESH_TOKEN": mesh.token or ""})
    assert run.returncode == 0, run.stdout + run.stderr
    # Every Node test ran (none skipped): 7 pass (3 against the orchestrator, the keepalive one,
    # 3 driving SearchExternal on the mcts service).
    assert "# pass 7" in run.stdout and "# skipped 0" in run.stdout, run.stdout


def test_node_command_prints_the_decoded_bad_request(mesh, repo_root):
    folder = _node_dir(repo_root)
    run = subprocess.run([NODE, "client.js", "--target", mesh.target, "solve-connect4", "4489"],
                         cwd=folder, capture_output=True, text=True, timeout=120)
    assert run.returncode == 1, run.stderr
    reply = json.loads(run.stdout)
    assert reply["error"] == "INVALID_ARGUMENT"
    violations = [v for d in reply["status"]["details"] for v in d.get("fieldViolations", [])]
    assert any(v["field"] == "connect_four.moves" for v in violations), reply
