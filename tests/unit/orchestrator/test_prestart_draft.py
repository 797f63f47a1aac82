"""`answer_stream.prestart_draft`: a streamed request that names no collection, while the
retrieval agent last found the default collection missing, starts the single draft's gateway
stream before the search, with the very request the LLM agent makes over no passages; in every
other case nothing is started."""

from __future__ import annotations

import time

from mesh.llm.v1 import llm_service_pb2

from services.orchestrator.agents.llm import LlmAgent
from services.orchestrator.agents.retrieval import RetrievalAgent
from services.orchestrator.api.answer_stream import AnswerEvents, prestart_draft
from services.orchestrator.text.query import TextProblem
from services.orchestrator.text.streaming import ANSWER_STREAM


class _Call:
    cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class _Stub:
    def __init__(self) -> None:
        self.calls: list[tuple[llm_service_pb2.StreamGenerateRequest, float]] = []

    def StreamGenerate(self, request, timeout):  # noqa: N802 - the stub's name
        self.calls.append((request, timeout))
        return _Call()


def _prestarted(named: bool, missing: bool, streamed: bool = True):
    stub = _Stub()
    llm = LlmAgent(stub, deadline_s=7.0, max_tokens=64)
    retrieval = RetrievalAgent(stub=None, deadline_s=1.0)
    retrieval.default_missing = missing
    problem = TextProblem(query="Why?", collection="default", top_k=3, collection_named=named,
                          answer_tokens=32)
    events = AnswerEvents(time.perf_counter(), loop_events=False)
    token = ANSWER_STREAM.set(events if streamed else None)
    try:
        prestart_draft([retrieval, llm], problem, time.monotonic() + 30)
    finally:
        ANSWER_STREAM.reset(token)
    return stub, events, llm, problem


def test_the_ungrounded_draft_starts_with_the_agents_own_request():
    stub, events, llm, problem = _prestarted(named=False, missing=True)
    [(request, timeout)] = stub.calls
    assert request.SerializeToString() == llm.draft_request(problem, ()).SerializeToString()
    assert request.max_tokens == 32 and list(request.context) == []
    assert 0 < timeout <= 7.0
    prestarted = events.take_prestarted()
    assert prestarted is not None and events.take_prestarted() is None  # taken once


def test_nothing_starts_otherwise():
    for named, missing, streamed in ((True, True, True), (False, False, True),
                                     (False, True, False)):
        stub, events, _, _ = _prestarted(named, missing, streamed)
        assert stub.calls == [] and events.take_prestarted() is None
