"""One mesh for the client tests (Node, grpcurl, reflection, MCP, the protos' examples): the five
services on free loopback ports, started once for this folder and stopped after it."""

from __future__ import annotations

import pytest

from mcts_mesh.launcher import start_mesh


@pytest.fixture(scope="package")
def mesh(tmp_path_factory):
    data = tmp_path_factory.mktemp("clients-mesh")
    running = start_mesh(
        port_base=0, rest_port=0,
        env={"RETRIEVAL_DATA_DIR": str(data / "retrieval"), "LLM_FALLBACK_ORDER": '["offline"]'},
        log_dir=data / "logs", ready_timeout_s=600,
    )
    yield running
    running.stop()
