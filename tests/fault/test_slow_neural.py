"""A slow neural service, made slow by a test-side proxy (`delay_proxy.DelayProxy`) between the
orchestrator and the real neural process, so no service carries a test-only delay setting.

Real processes on loopback: mcts and neural (`mcts-mesh serve ...`), and an orchestrator whose
neural target is the proxy and whose deadline for a neural call is 1 s. While the proxy delays
every neural call by 3 s: a Connect Four request with the default agents is still answered by the
other agents before its deadline; one that allows the network alone fails with a clear status by
its deadline. Once the delay is gone the network votes again and every request succeeds.
"""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest
from delay_proxy import DelayProxy
from faultkit import (
    DOWN_CODES,
    Load,
    assert_clear_failures,
    assert_no_hang,
    spawn_service,
    stop_process,
    wait_for_full_success,
)
from mesh.common.v1 import common_pb2
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb
from mesh.orchestrator.v1 import orchestrator_service_pb2_grpc

pytestmark = [pytest.mark.fault, pytest.mark.slow]

NEURAL_DEADLINE_S = 1.0
DELAY_S = 3.0
DEADLINE_S = 8.0
POSITION = common_pb2.ConnectFourPosition(moves="4453")


@pytest.fixture(scope="module")
def backends(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("slow-neural")
    started = []
    try:
        mcts, mcts_port = spawn_service("mcts", {"MCTS_PORT": "0"}, tmp)
        started.append(mcts)
        neural, neural_port = spawn_service("neural", {"NEURAL_PORT": "0"}, tmp)
        started.append(neural)
        yield {"mcts": mcts_port, "neural": neural_port, "tmp": tmp}
    finally:
        for process in started:
            stop_process(process)


@pytest.fixture
async def proxied(backends):
    """(stub of an orchestrator whose neural calls go through the proxy, the proxy)."""
    proxy = await DelayProxy(f"127.0.0.1:{backends['neural']}").start()
    env = {
        "ORCHESTRATOR_PORT": "0",
        "ORCHESTRATOR_REST_PORT": "-1",
        "ORCHESTRATOR_MCTS_TARGET": f"127.0.0.1:{backends['mcts']}",
        "ORCHESTRATOR_NEURAL_TARGET": proxy.target,
        # Nothing listens there: retrieval and the LLM are not needed by these requests.
        "ORCHESTRATOR_RETRIEVAL_TARGET": "127.0.0.1:1",
        "ORCHESTRATOR_LLM_TARGET": "127.0.0.1:1",
        "ORCHESTRATOR_NEURAL_DEADLINE_S": str(NEURAL_DEADLINE_S),
    }
    orchestrator, port = await asyncio.to_thread(spawn_service, "orchestrator", env,
                                                 backends["tmp"])
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    yield orchestrator_service_pb2_grpc.OrchestratorServiceStub(channel), proxy
    await channel.close()
    stop_process(orchestrator)
    await proxy.stop()


def _agents(reply: pb.SolveProblemResponse) -> set[str]:
    return {pb.Agent.Name(vote.agent) for vote in reply.votes}


async def test_a_slow_network_costs_its_vote_not_the_answer(proxied):
    stub, proxy = proxied
    request = pb.SolveProblemRequest(connect_four=POSITION, simulations=2000)
    baseline = await stub.SolveProblem(request, timeout=DEADLINE_S)
    assert "AGENT_NEURAL" in _agents(baseline), baseline.votes

    proxy.delay_s = DELAY_S
    calls = proxy.calls
    started = time.monotonic()
    slow = await stub.SolveProblem(request, timeout=DEADLINE_S)
    elapsed = time.monotonic() - started
    assert proxy.calls > calls  # the network was asked
    assert 1 <= slow.connect_four.column <= 7
    assert "AGENT_NEURAL" not in _agents(slow), slow.votes
    assert elapsed < DEADLINE_S
    print(f"\nneural delayed {DELAY_S} s: answered in {elapsed:.2f} s by {sorted(_agents(slow))}")

    proxy.delay_s = 0.0
    recovered = await stub.SolveProblem(request, timeout=DEADLINE_S)
    assert "AGENT_NEURAL" in _agents(recovered)


async def test_network_only_requests_fail_clearly_by_their_deadline_then_recover(proxied):
    stub, proxy = proxied
    request = pb.SolveProblemRequest(connect_four=POSITION, agents=[pb.AGENT_NEURAL])

    async def call(deadline_s: float):
        return await stub.SolveProblem(request, timeout=deadline_s)

    await wait_for_full_success(call, DEADLINE_S, needed=3)
    proxy.delay_s = DELAY_S
    load = Load(call, DEADLINE_S, workers=2)
    load.start()
    await asyncio.sleep(2 * DELAY_S)
    proxy.delay_s = 0.0
    slow = list(load.outcomes)
    recovered_in = await wait_for_full_success(call, DEADLINE_S, needed=10)
    recovered_at = time.monotonic()
    await asyncio.sleep(1.0)
    await load.stop()

    assert_no_hang(load.outcomes)
    assert_clear_failures(load.outcomes, DOWN_CODES)
    failed = [o for o in slow if o.code is not None]
    assert failed, "no network-only request failed while neural was 3 s slow"
    after = load.since(recovered_at)
    assert after and all(o.code is None for o in after)
    print(f"\nnetwork only, neural delayed {DELAY_S} s: {len(failed)}/{len(slow)} failed "
          f"({sorted({o.code.name for o in failed})}), longest "
          f"{max(o.latency_s for o in slow):.2f} s; 100% again {recovered_in:.1f} s after")
