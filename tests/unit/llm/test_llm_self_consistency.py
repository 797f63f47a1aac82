"""Self-consistency for text queries end to end through the real gateway: the orchestrator's
servicer and LLM agent call a grpc.aio LlmService on port 0, whose "local" provider is the scripted
OpenAI chat-completions server of `llm_wire` (every reply reports 42 prompt + 7 completion tokens).
The drafts disagree as scripted, so the vote, the confidence (the winner's vote share), the extra
iteration, and the token and cost budget stops have exact expected values. The offline provider
never votes."""

from __future__ import annotations

import math

import grpc
import pytest
from llm_wire import Reply
from mesh.llm.v1 import llm_service_pb2, llm_service_pb2_grpc
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

from libs.errors import InvalidArgument
from libs.server import start_server
from services.llm.main import build_servicers
from services.llm.providers.provider import Generation
from services.llm.servicer import generation_cost
from services.llm.settings import LlmSettings
from services.orchestrator.agents.llm import LlmAgent
from services.orchestrator.api.servicer import OrchestratorServicer
from services.orchestrator.loop.types import AgentName, Proposal, Role, Round
from services.orchestrator.routing.selection import AgentSet
from services.orchestrator.settings import OrchestratorSettings
from services.orchestrator.text.query import Passage
from services.orchestrator.text.self_consistency import (
    SampledDraft,
    Sampling,
    SamplingOptions,
    extract_answer,
)

PRICES = {"llama3.2": (1000.0, 2000.0)}
"""USD per million tokens: one scripted draft (42 + 7 tokens) costs 0.042 + 0.014 = $0.056."""
DRAFT_TOKENS = 49
DRAFT_COST = 0.056
PASSAGE = Passage("d1", "Arithmetic", "Six sevens are forty-two.", 0.7, "a.txt",
                  cosine_similarity=0.7)


class Retrieval:
    """The context agent: one passage, as the retrieval agent supplies them."""

    name = AgentName.RETRIEVAL
    role = Role.CONTEXT
    repeatable = False

    async def propose(self, round_: Round) -> Proposal:
        return Proposal(None, 0.7, "1 passage", detail=[PASSAGE])


class FakeRetrievalStub:
    pass


class FakeContext:
    def time_remaining(self) -> float:
        return 20.0


@pytest.fixture
async def gateway(wire):
    """A started gateway (the scripted server as provider "local", offline after it)."""
    running = []

    async def start(**values) -> llm_service_pb2_grpc.LlmServiceStub:
        values.setdefault("fallback_order", ["local"])
        settings = LlmSettings(port=0, local_base_url=f"{wire.url}/v1", max_retries=0,
                                      prices=PRICES, **values)
        servicers, ready = await build_servicers(settings)
        server = await start_server("llm", settings, servicers, ready)
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
        running.append((server, channel))
        return llm_service_pb2_grpc.LlmServiceStub(channel)

    yield start
    for server, channel in running:
        await channel.close()
        await server.stop(0)


def servicer_for(stub, **settings) -> tuple[OrchestratorServicer, LlmAgent]:
    settings.setdefault("text_max_iterations", 3)
    llm = LlmAgent(stub, 10.0, 64)
    servicer = OrchestratorServicer(OrchestratorSettings(**settings),
                                    AgentSet(text=[Retrieval(), llm]),
                                    retrieval=FakeRetrievalStub())
    return servicer, llm


def answers(text: str) -> list[Reply]:
    return [Reply(text=f"Working it out... the answer is {word}.") for word in text.split()]


async def ask(servicer, **fields) -> pb.AnswerQueryResponse:
    request = pb.AnswerQueryRequest(query="What is six times seven?", **fields)
    return await servicer.AnswerQuery(request, FakeContext())


def drafted(response) -> list[tuple[str, int, int]]:
    """(answer, votes, iteration) of every draft, sorted (drafts of a batch arrive in any order)."""
    return sorted((d.answer, d.votes, d.iteration) for d in response.drafts)


async def test_the_majority_answer_wins_with_its_vote_share_as_confidence(gateway, wire):
    servicer, shared = servicer_for(await gateway())
    wire.script[:] = answers("42 42 41")
    response = await ask(servicer, sample_count=3, temperature=0.8)
    assert response.confidence == pytest.approx(2 / 3)
    assert response.answer == "Working it out... the answer is 42."
    assert drafted(response) == [("41", 1, 1), ("42", 2, 1), ("42", 2, 1)]
    assert response.iterations == 1
    assert response.stop_reason == "agreement 0.67 >= 0.60"
    assert response.total_tokens == 3 * DRAFT_TOKENS
    assert response.cost_usd == pytest.approx(3 * DRAFT_COST) and response.cost_known
    assert not response.offline and response.provider == "local"
    assert [d.model for d in response.drafts] == ["llama3.2"] * 3
    assert [body["temperature"] for _, body in wire.requests] == [0.8] * 3
    assert shared.sampling is None  # the shared agent is untouched; each request has its own
    assert response.role == pb.TEXT_ROLE_DRAFT


async def test_disagreement_samples_another_batch_until_the_share_clears_the_threshold(
        gateway, wire):
    servicer, _ = servicer_for(await gateway())
    wire.script[:] = answers("1 2 3") + answers("2 2 2")
    response = await ask(servicer, sample_count=3)
    # Iteration 1: one vote each, share 1/3 < 0.6, so iteration 2: "2" has 4 of 6 votes.
    assert response.iterations == 2 and wire.count("/v1/chat/completions") == 6
    assert response.confidence == pytest.approx(4 / 6)
    assert drafted(response) == [("1", 1, 1), ("2", 4, 1), ("2", 4, 2), ("2", 4, 2),
                                 ("2", 4, 2), ("3", 1, 1)]
    assert response.stop_reason == "agreement 0.67 >= 0.60"
    assert response.answer == "Working it out... the answer is 2."
    assert [body["temperature"] for _, body in wire.requests] == [0.7] * 6  # the setting


async def test_the_iteration_limit_ends_sampling_and_says_so(gateway, wire):
    servicer, _ = servicer_for(await gateway(), text_max_iterations=2)
    wire.script[:] = answers("1 2 3") + answers("4 5 1")
    response = await ask(servicer, sample_count=3)
    assert response.iterations == 2 and len(response.drafts) == 6
    assert response.confidence == pytest.approx(2 / 6)
    assert response.answer == "Working it out... the answer is 1."
    assert response.stop_reason == "iteration limit: 2 iteration(s) run, agreement 0.33 < 0.60"


async def test_the_token_budget_shrinks_then_stops_the_sampling(gateway, wire):
    servicer, _ = servicer_for(await gateway())
    wire.script[:] = answers("1 2 3 4 5 6")
    response = await ask(servicer, sample_count=3, max_tokens=250)
    # 3 drafts use 147 tokens; 103 are left: 2 more drafts of 49 fit, then 5 are left.
    assert response.iterations == 2 and wire.count("/v1/chat/completions") == 5
    assert response.total_tokens == 5 * DRAFT_TOKENS == 245
    assert response.stop_reason == ("token budget: 245 of 250 used, another draft would need "
                                     "about 49")
    assert response.confidence == pytest.approx(1 / 5)


async def test_the_cost_budget_stops_the_sampling(gateway, wire):
    servicer, _ = servicer_for(await gateway())
    wire.script[:] = answers("1 2 3 4 5 6")
    response = await ask(servicer, sample_count=3, max_cost_usd=0.2)
    assert response.iterations == 1 and wire.count("/v1/chat/completions") == 3
    assert response.cost_usd == pytest.approx(0.168)
    assert response.stop_reason == ("cost budget: $0.168000 of $0.200000 used, another draft "
                                    "would cost about $0.056000")


async def test_a_cost_budget_without_a_price_for_the_model_stops_after_the_first_batch(
        gateway, wire):
    servicer, _ = servicer_for(await gateway(local_model="unpriced-model"))
    wire.script[:] = answers("1 2 3 4 5 6")
    response = await ask(servicer, sample_count=3, max_cost_usd=1.0)
    assert response.iterations == 1 and not response.cost_known and response.cost_usd == 0.0
    assert response.stop_reason == "cost budget: no price configured for unpriced-model " \
                                   "(LLM_PRICES)"


async def test_the_offline_provider_is_never_a_vote(gateway, wire):
    servicer, _ = servicer_for(await gateway(fallback_order=["offline"]))
    response = await ask(servicer, sample_count=5)
    assert response.offline and response.provider == "offline"
    assert "Six sevens are forty-two." in response.answer
    assert response.confidence == pytest.approx(0.7)  # its grounding, as without sampling
    assert list(response.drafts) == [] and response.iterations == 1
    assert response.stop_reason == "offline: the extractive provider answered, no language model"
    assert wire.count("/v1/chat/completions") == 0


async def test_one_sample_drafts_once_at_temperature_zero_without_a_vote(gateway, wire):
    servicer, _ = servicer_for(await gateway())
    wire.script[:] = answers("42")
    response = await ask(servicer, sample_count=1)
    assert response.confidence == pytest.approx(0.7) and list(response.drafts) == []
    assert [body["temperature"] for _, body in wire.requests] == [0.0]


async def test_the_gateway_prices_a_generation_from_its_reported_usage(gateway, wire):
    stub = await gateway()
    priced = await stub.Generate(llm_service_pb2.GenerateRequest(prompt="q"), timeout=10)
    assert priced.HasField("cost_usd") and priced.cost_usd == pytest.approx(DRAFT_COST)
    unpriced = await (await gateway(local_model="other")).Generate(
        llm_service_pb2.GenerateRequest(prompt="q"), timeout=10)
    assert not unpriced.HasField("cost_usd")
    offline = Generation("x", "offline-extractive", 10, 5, offline=True)
    assert generation_cost(offline, PRICES) == 0.0
    with pytest.raises(ValueError, match="finite"):
        LlmSettings(prices={"m": (-1.0, 1.0)})


@pytest.mark.parametrize(("fields", "field"), [
    ({"sample_count": 0}, "sample_count"),
    ({"sample_count": 21}, "sample_count"),
    ({"temperature": 2.5}, "temperature"),
    ({"temperature": math.nan}, "temperature"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_cost_usd": -0.01}, "max_cost_usd"),
    ({"max_cost_usd": math.inf}, "max_cost_usd"),
])
async def test_bad_sampling_fields_are_invalid_argument_naming_them(gateway, fields, field):
    servicer, _ = servicer_for(await gateway())
    with pytest.raises(InvalidArgument) as caught:
        await ask(servicer, **fields)
    assert caught.value.field == field


# The pure parts: answer extraction and the batch decision.

@pytest.mark.parametrize(("draft", "answer"), [
    ("Natalia sold 48 + 24 = 72 clips.\n#### 72", "72"),
    ("So the total is \\boxed{1,000.50}", "1000.5"),
    ("The answer is 42.0 dollars.", "42"),
    ("Final answer: $18", "18"),
    ("First 3, then 5, finally 8 apples", "8"),
    ("The answer is Paris.", "paris"),
    ("I think it is\n  Mitosis!  ", "mitosis"),
    ("", ""),
])
def test_final_answers_are_extracted_and_normalised(draft, answer):
    assert extract_answer(draft) == answer


def draft(answer: str, tokens: int = 10, cost: float | None = 0.01,
          offline: bool = False) -> SampledDraft:
    return SampledDraft(f"answer is {answer}", "" if offline else answer, 1, "p", "m", tokens,
                        cost, offline)


def test_the_batch_decision_follows_agreement_and_budgets():
    sampling = Sampling(SamplingOptions(4, 0.7, 0.75, max_tokens=100))
    assert sampling.next_batch() == 4
    sampling.add([draft("a"), draft("a"), draft("b"), draft("c", tokens=20)])
    assert sampling.winner() == "a" and sampling.share() == 0.5
    assert sampling.next_batch() == 2  # 50 tokens used; the largest draft is 20: 2 more fit
    sampling.add([draft("a"), draft("a")])
    assert sampling.share() == pytest.approx(4 / 6) and sampling.next_batch() == 1
    sampling.add([draft("b", tokens=20)])
    assert sampling.share() == pytest.approx(4 / 7) and sampling.next_batch() == 0
    assert sampling.stop_reason == ("token budget: 90 of 100 used, another draft would need "
                                    "about 20")
    offline = Sampling(SamplingOptions(3, 0.7, 0.6))
    offline.add([draft("", offline=True)] * 3)
    assert offline.offline and offline.winner() is None and offline.next_batch() == 0
    with pytest.raises(ValueError):
        SamplingOptions(0, 0.7, 0.6)
