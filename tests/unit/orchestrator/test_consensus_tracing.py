"""The consensus loop's child spans and agent-outcome counts (services/orchestrator/tracing.py),
with fake agents: each step and each agent is a span under the request's span, a failing agent's
span is an error, and every agent run is counted by outcome."""

from __future__ import annotations

import time

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from prometheus_client import REGISTRY

from libs.errors import Unavailable
from services.orchestrator.loop import tracing
from services.orchestrator.loop.consensus import ConsensusLoop
from services.orchestrator.loop.types import AgentName, Budget, Proposal, Role
from services.orchestrator.routing.rules import RuleRouter


class _Agent:
    def __init__(self, name: AgentName, outcome: Proposal | Exception) -> None:
        self.name, self.role, self.repeatable = name, Role.PROPOSER, False
        self._outcome = outcome

    async def propose(self, round_) -> Proposal:
        if isinstance(self._outcome, Exception):
            raise self._outcome
        return self._outcome


def _outcomes(agent: str, outcome: str) -> float:
    return REGISTRY.get_sample_value("mesh_orchestrator_agent_outcomes_total",
                                     {"agent": agent, "outcome": outcome}) or 0.0


async def test_steps_and_agents_are_child_spans_and_outcomes_are_counted(monkeypatch):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    monkeypatch.setattr(tracing, "_tracer", tracer)
    failed_before = _outcomes("mcts", "failed")
    proposed_before = _outcomes("neural", "proposed")
    loop = ConsensusLoop([_Agent(AgentName.MCTS, Unavailable("mcts is down")),
                          _Agent(AgentName.NEURAL, Proposal("4", 0.7, "policy"))],
                         RuleRouter(), lambda tally, proposals, context: tally.answer, 0.25)
    with tracer.start_as_current_span("request") as request:
        result = await loop.run("position", Budget(max_iterations=1,
                                                   deadline=time.monotonic() + 10))
    assert result.answer == "4"
    spans = {span.name: span for span in exporter.get_finished_spans()}
    assert {"consensus route", "consensus agents", "agent mcts", "agent neural",
            "consensus aggregate"} <= set(spans)
    request_id = request.get_span_context().span_id
    for step in ("consensus route", "consensus agents", "consensus aggregate"):
        assert spans[step].parent.span_id == request_id
        assert spans[step].attributes["mesh.consensus.iteration"] == 1
    agents_id = spans["consensus agents"].context.span_id
    assert spans["agent mcts"].parent.span_id == agents_id
    assert spans["agent neural"].parent.span_id == agents_id
    assert spans["agent mcts"].status.status_code is StatusCode.ERROR
    assert spans["agent neural"].status.status_code is StatusCode.UNSET
    assert spans["agent neural"].attributes["mesh.agent.outcome"] == "proposed"
    assert _outcomes("mcts", "failed") == failed_before + 1
    assert _outcomes("neural", "proposed") == proposed_before + 1
