"""Child spans of the consensus loop and what one run of it reports to traces and metrics.

Each step the loop takes becomes a span under the request's SERVER span ("consensus route",
"consensus agents", "consensus verify", "consensus aggregate"), and each agent's call a span
"agent <name>" under its step, so the agents' own gRPC CLIENT spans (and the downstream services'
SERVER spans) nest under the agent that made them. The decorators wrap the loop's methods, so the
loop's code stays as it is. Under a request that is not recorded (tracing off, or not sampled:
the sampler is parent-based, so its children would not be recorded either) they make no span at
all, which saves the context switching of about ten non-recording spans per iteration.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable

from opentelemetry import trace

from libs.errors import MeshError
from libs.telemetry import set_work_attributes
from services.orchestrator import metrics

_tracer = trace.get_tracer("mcts_mesh.orchestrator.consensus")


def step_span(step: str) -> Callable:
    """Runs the decorated loop method (sync or async; its last argument is the loop's
    `RunState`) in a span "consensus <step>" with the iteration as `mesh.consensus.iteration`."""

    def decorate(method):
        name = f"consensus {step}"
        if inspect.iscoroutinefunction(method):
            @functools.wraps(method)
            async def traced(self, *args):
                if not trace.get_current_span().is_recording():
                    return await method(self, *args)
                with _tracer.start_as_current_span(
                        name, attributes={"mesh.consensus.iteration": args[-1].iteration}):
                    return await method(self, *args)
        else:
            @functools.wraps(method)
            def traced(self, *args):
                if not trace.get_current_span().is_recording():
                    return method(self, *args)
                with _tracer.start_as_current_span(
                        name, attributes={"mesh.consensus.iteration": args[-1].iteration}):
                    return method(self, *args)
        return traced

    return decorate


def agent_span(method):
    """Runs `_timed(agent, round_)` in a span "agent <name>" and counts its outcome in
    `mesh_orchestrator_agent_outcomes_total`: proposed, abstained (no answer), failed (a
    `MeshError`, e.g. its service is down) or cancelled/error."""

    async def counted(self, agent, round_):
        name = str(agent.name)
        try:
            proposal, latency_ms = await method(self, agent, round_)
        except MeshError:
            metrics.AGENT_OUTCOMES.labels(name, "failed").inc()
            raise
        except BaseException:
            metrics.AGENT_OUTCOMES.labels(name, "error").inc()
            raise
        outcome = "proposed" if proposal.answer is not None else "abstained"
        metrics.AGENT_OUTCOMES.labels(name, outcome).inc()
        return proposal, latency_ms, outcome

    @functools.wraps(method)
    async def traced(self, agent, round_):
        if not trace.get_current_span().is_recording():
            proposal, latency_ms, _ = await counted(self, agent, round_)
            return proposal, latency_ms
        name = str(agent.name)
        with _tracer.start_as_current_span(
                f"agent {name}", attributes={"mesh.agent": name,
                                             "mesh.consensus.iteration": round_.iteration}) as span:
            proposal, latency_ms, outcome = await counted(self, agent, round_)
            span.set_attributes({"mesh.agent.outcome": outcome,
                                 "mesh.agent.confidence": float(proposal.confidence)})
            return proposal, latency_ms

    return traced


def observe_result(kind: str, result) -> None:
    """Records a finished loop (`LoopResult`) of a problem of `kind` ("connect_four", "sudoku",
    "maze", "text_query") on the SERVER span and in the iterations histogram."""
    metrics.CONSENSUS_ITERATIONS.labels(kind).observe(result.iterations)
    set_work_attributes({
        "mesh.agents": [str(agent) for agent in result.agents],
        "mesh.consensus.iterations": result.iterations,
        "mesh.consensus.reached": result.consensus_reached,
        "mesh.consensus.confidence": float(result.tally.confidence),
    })



def observe_role(role: str, ledger) -> None:
    """Records a text role's language-model calls (`text_roles.Ledger`) in the role metrics and
    on the SERVER span."""
    for call in ledger.calls:
        metrics.TEXT_ROLE_CALLS.labels(role, call.purpose).inc()
    metrics.TEXT_ROLE_TOKENS.labels(role).inc(ledger.total_tokens)
    set_work_attributes({"mesh.text.role": role, "mesh.text.calls": len(ledger.calls),
                         "mesh.text.tokens": ledger.total_tokens})
