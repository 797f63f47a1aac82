"""Every search option through the `Search` contract, on a real server on port 0: each option
reaches the core (the search with it differs from the search without it, or does what it says),
each out-of-range value or option the rule would ignore is INVALID_ARGUMENT naming the field, and
the defaults come from the service's settings."""

from __future__ import annotations

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from mesh.common.v1 import common_pb2
from mesh.mcts.v1 import mcts_service_pb2, mcts_service_pb2_grpc

from libs.server import start_server
from services.mcts.main import build_servicers
from services.mcts.settings import MctsSettings

PUCT = mcts_service_pb2.SELECTION_RULE_PUCT
GUMBEL = mcts_service_pb2.SELECTION_RULE_GUMBEL


def request(moves: str = "", **fields) -> mcts_service_pb2.SearchRequest:
    return mcts_service_pb2.SearchRequest(
        game=mcts_service_pb2.GAME_CONNECT_FOUR,
        connect_four=common_pb2.ConnectFourPosition(moves=moves), **fields)


async def _serve(settings: MctsSettings):
    servicers, ready = await build_servicers(settings)
    server = await start_server("mcts", settings, servicers, ready)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
    return server, channel, mcts_service_pb2_grpc.MctsServiceStub(channel)


@pytest.fixture
async def stub():
    server, channel, stub = await _serve(MctsSettings(port=0, default_simulations=600,
                                                      max_threads=2))
    yield stub
    await channel.close()
    await server.stop(0)


def visits(reply) -> list[int]:
    return [a.visits for a in reply.statistics.actions]


@pytest.mark.parametrize("option", [{"widening_k": 1.0}, {"widening_k": 2.0, "widening_alpha": 0.2},
                                    {"rave_k": 50.0}, {"exploration": 0.3}])
async def test_each_uct_option_reaches_the_search(stub, option):
    plain = await stub.Search(request("44", simulations=800, seed=3), timeout=60)
    tuned = await stub.Search(request("44", simulations=800, seed=3, **option), timeout=60)
    again = await stub.Search(request("44", simulations=800, seed=3, **option), timeout=60)
    assert sum(visits(tuned)) == 800
    assert visits(tuned) != visits(plain)
    assert visits(tuned) == visits(again)  # still reproducible from the seed


async def test_tree_parallelism_and_transpositions_reach_the_search(stub):
    reply = await stub.Search(request("4455", simulations=2_000, threads=2, transpositions=True,
                                      parallelism=mcts_service_pb2.PARALLELISM_TREE), timeout=60)
    assert reply.statistics.threads == 2 and reply.statistics.simulations == 2_000
    assert reply.statistics.transposition_hits > 0


async def test_temperature_samples_the_move_from_the_visits(stub):
    sampled = []
    for seed in range(8):
        greedy = await stub.Search(request("", simulations=300, seed=seed), timeout=60)
        hot = await stub.Search(request("", simulations=300, seed=seed, temperature=50.0),
                                timeout=60)
        cold = await stub.Search(request("", simulations=300, seed=seed, temperature=1e-3),
                                 timeout=60)
        assert visits(hot) == visits(greedy) == visits(cold)  # the same tree; only the move
        assert cold.best_action == greedy.best_action
        sampled.append(hot.best_action != greedy.best_action)
    assert any(sampled)


async def test_puct_takes_dirichlet_noise_and_temperature(stub):
    plain = await stub.Search(request("44", simulations=400, seed=5, rule=PUCT), timeout=60)
    noisy = await stub.Search(request("44", simulations=400, seed=5, rule=PUCT,
                                      dirichlet_alpha=0.3, dirichlet_epsilon=0.9), timeout=60)
    assert visits(noisy) != visits(plain)
    priors = [a.prior for a in plain.statistics.actions]
    assert [a.prior for a in noisy.statistics.actions] != priors
    sampled = []
    for seed in range(8):
        hot = await stub.Search(request("", simulations=200, seed=seed, rule=PUCT,
                                        temperature=50.0), timeout=60)
        greedy = await stub.Search(request("", simulations=200, seed=seed, rule=PUCT),
                                   timeout=60)
        assert visits(hot) == visits(greedy)  # the temperature picks the move, not the tree
        sampled.append(hot.best_action != greedy.best_action)
    assert any(sampled)


@pytest.mark.parametrize(
    ("fields", "field"),
    [({"widening_k": 0.0}, "widening_k"),
     ({"widening_k": float("inf")}, "widening_k"),
     ({"widening_k": 1.0, "widening_alpha": 1.5}, "widening_alpha"),
     ({"widening_alpha": 0.5}, "widening_alpha"),
     ({"rave_k": -1.0}, "rave_k"),
     ({"rave_k": float("nan")}, "rave_k"),
     ({"temperature": -0.1}, "temperature"),
     ({"temperature": float("inf")}, "temperature"),
     ({"dirichlet_alpha": 0.3}, "dirichlet_alpha"),
     ({"rule": PUCT, "dirichlet_alpha": 0.0}, "dirichlet_alpha"),
     ({"rule": PUCT, "dirichlet_alpha": 0.3, "dirichlet_epsilon": 1.5}, "dirichlet_epsilon"),
     ({"rule": PUCT, "dirichlet_epsilon": 0.5}, "dirichlet_epsilon"),
     ({"rule": PUCT, "widening_k": 1.0}, "widening_k"),
     ({"rule": PUCT, "rave_k": 1.0}, "rave_k"),
     ({"rule": PUCT, "temperature": -1.0}, "temperature"),
     ({"rule": PUCT, "exploration": -1.0}, "exploration"),
     ({"rule": GUMBEL, "dirichlet_alpha": 0.3}, "dirichlet_alpha"),
     ({"rule": GUMBEL, "temperature": 1.0}, "temperature"),
     ({"rule": GUMBEL, "rave_k": 1.0}, "rave_k"),
     ({"rule": PUCT, "transpositions": True}, "transpositions"),
     ({"rule": GUMBEL, "parallelism": mcts_service_pb2.PARALLELISM_TREE}, "parallelism")],
)
async def test_bad_options_are_invalid_argument_naming_the_field(stub, fields, field):
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Search(request("", simulations=100, **fields), timeout=30)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    bad = error_details_pb2.BadRequest()
    assert rpc_status.from_call(caught.value).details[0].Unpack(bad)
    assert bad.field_violations[0].field == field


async def test_defaults_come_from_the_settings():
    """A service whose settings default to c = 0 and c_puct = 0 searches as a request asking for
    them explicitly does, and unlike the stock defaults."""
    server, channel, stub = await _serve(MctsSettings(port=0, exploration=0.0, c_puct=0.0))
    try:
        for rule in (mcts_service_pb2.SELECTION_RULE_UCT, PUCT):
            implicit = await stub.Search(request("44", simulations=500, seed=2, rule=rule),
                                         timeout=60)
            explicit = await stub.Search(request("44", simulations=500, seed=2, rule=rule,
                                                 exploration=0.0), timeout=60)
            stock = await stub.Search(request("44", simulations=500, seed=2, rule=rule,
                                              exploration=2.0 if rule != PUCT else 1.25),
                                      timeout=60)
            assert visits(implicit) == visits(explicit) != visits(stock)
    finally:
        await channel.close()
        await server.stop(0)
