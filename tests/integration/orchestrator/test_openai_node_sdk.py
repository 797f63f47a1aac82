"""OpenAI's official Node SDK (`openai` from npm, a devDependency of clients/node) against the
chat routes of a real orchestrator (`openai_mesh`): clients/node/openai/chat.test.js lists the
models, asks for a completion and a streamed one, and checks the error bodies (400 naming the
param, 401, 403).

Needs `node` and `npm ci` in clients/node (`.ci/run` does both), and the retrieval embedder
(`make setup`); skipped with the reason otherwise."""

from __future__ import annotations

import asyncio
import os
import shutil

import pytest
from openai_mesh import EMBEDDER, start_openai_mesh

NODE = shutil.which("node")


async def test_the_node_sdk_test_suite_passes(tmp_path, repo_root):
    folder = repo_root / "clients" / "node"
    if NODE is None:
        pytest.skip("node is not installed (.ci/run installs nodejs and npm from Debian)")
    if not (folder / "node_modules" / "openai").is_dir():
        pytest.skip("clients/node has no node_modules/openai: run `npm ci` in clients/node")
    if not EMBEDDER.exists():
        pytest.skip(f"{EMBEDDER} is absent: `make setup` exports the retrieval embedder")
    mesh = await start_openai_mesh(tmp_path)
    try:
        process = await asyncio.create_subprocess_exec(
            NODE, "--test", "openai/", cwd=folder, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env={**os.environ, "OPENAI_BASE_URL": mesh.base_url, "OPENAI_API_KEY": mesh.key,
                 "MESH_SOLVE_ONLY_KEY": mesh.solve_only})
        output, _ = await asyncio.wait_for(process.communicate(), timeout=300)
    finally:
        await mesh.close()
    text = output.decode()
    assert process.returncode == 0, text
    assert "# pass 4" in text and "# skipped 0" in text, text
