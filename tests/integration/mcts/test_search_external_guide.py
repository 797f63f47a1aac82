"""The Python loop that docs/guides/search-external.md shows runs as printed against a real mcts
service on loopback and finds the move that wins at once."""

from __future__ import annotations

import re
from pathlib import Path

import grpc
from mesh.mcts.v1 import mcts_service_pb2 as pb

from libs.server import start_server
from services.mcts.main import build_servicers
from services.mcts.settings import MctsSettings

GUIDE = Path(__file__).resolve().parents[3] / "docs" / "guides" / "search-external.md"


def _python_loop() -> str:
    match = re.search(r"## The same loop in Python.*?```python\n(.*?)```", GUIDE.read_text(),
                      re.S)
    assert match, "the guide's Python loop is missing"
    return match.group(1)


async def test_the_guide_python_loop_finds_the_winning_action():
    settings = MctsSettings(port=0)
    servicers, ready = await build_servicers(settings, grpc.aio.insecure_channel("127.0.0.1:1"))
    server = await start_server("mcts", settings, servicers, ready)
    namespace: dict = {}
    exec(compile(_python_loop(), str(GUIDE), "exec"), namespace)

    def evaluate(path: list[int]) -> pb.LeafEvaluation:
        # Action 2 ends the problem, won by the player who took it.
        if path[:1] == [2]:
            return pb.LeafEvaluation(value=-1.0, terminal=True)
        return pb.LeafEvaluation(priors=[1 / 9] * 9, value=0.0)

    try:
        result = await namespace["search"](f"127.0.0.1:{server.port}", "no-token-here", evaluate)
    finally:
        await server.stop(0)
    assert result.best_action == 2
    assert result.statistics.simulations == 400
