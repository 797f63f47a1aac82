"""StreamAnswerQuery's events: AnswerQuery run in its own task, what it streams (the passages and
the draft's text deltas on the single-draft path, the consensus loop's events on the others) put
on a queue as StreamAnswerQueryResponse messages and yielded as they come, then the answer."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

from services.orchestrator.agents.llm import LlmAgent
from services.orchestrator.agents.retrieval import RetrievalAgent
from services.orchestrator.api.responses import stream_event
from services.orchestrator.loop.events import EventSink, IterationStarted, LoopEvent
from services.orchestrator.loop.types import Agent
from services.orchestrator.text.query import Passage, TextProblem
from services.orchestrator.text.streaming import ANSWER_STREAM, Prestarted

Answer = Callable[[EventSink], Awaitable[pb.AnswerQueryResponse]]
"""AnswerQuery's work for one request, given the sink of its loop's events."""


class AnswerEvents:
    """The sinks of one streamed answer (`text.streaming.AnswerStream` and the loop's
    `EventSink`): each event as a StreamAnswerQueryResponse on `queue`, with the milliseconds
    since `started` (`time.perf_counter()`). `loop_events`: pass the loop's events on (the paths
    that need complete drafts); False on the single-draft path, which streams its text."""

    def __init__(self, started: float, loop_events: bool) -> None:
        self.queue: asyncio.Queue[pb.StreamAnswerQueryResponse | None] = asyncio.Queue()
        self.deltas = 0
        self._started = started
        self._loop_events = loop_events
        self._held: list[pb.StreamAnswerQueryResponse] | None = []
        self.prestarted: Prestarted | None = None

    def message(self, iteration: int = 1, **event) -> pb.StreamAnswerQueryResponse:
        return pb.StreamAnswerQueryResponse(
            iteration=iteration, elapsed_ms=(time.perf_counter() - self._started) * 1e3,
            **event)

    def sources(self, passages: tuple[Passage, ...]) -> None:
        self.queue.put_nowait(self.message(sources=pb.SourcesRetrieved(sources=[
            pb.Source(document_id=p.document_id, title=p.title, text=p.text, score=p.score,
                      source=p.source) for p in passages])))

    def delta(self, text: str) -> None:
        if text:
            self.deltas += 1
            self.queue.put_nowait(self.message(answer_delta=text))

    def take_prestarted(self) -> Prestarted | None:
        prestarted, self.prestarted = self.prestarted, None
        return prestarted

    def __call__(self, event: LoopEvent) -> None:
        """A loop event as a message. The retrieval's events (before the first iteration) are
        held until the first iteration starts, so that a retrieval failure (a missing
        collection) ends the call before any message, as the contract says."""
        if not self._loop_events:
            return
        solve_event = stream_event(event, 0.0)
        kind = solve_event.WhichOneof("event")
        message = self.message(event.iteration)
        getattr(message, kind).CopyFrom(getattr(solve_event, kind))
        if self._held is not None and not isinstance(event, IterationStarted):
            self._held.append(message)
            return
        for held in self._held or ():
            self.queue.put_nowait(held)
        self._held = None
        self.queue.put_nowait(message)


async def stream_answer(answer: Answer, started: float, single_draft: bool
                        ) -> AsyncIterator[pb.StreamAnswerQueryResponse]:
    """Runs `answer` in its own task (with `ANSWER_STREAM` set there) and yields its events as
    they come, then, when nothing streamed the text, the whole answer as one delta, then the
    AnswerQueryResponse. When the caller leaves (this generator closed or cancelled), the task is
    cancelled, and with it the gateway's stream.

    Raises:
        the errors of AnswerQuery, as `answer` raised them.
    """
    events = AnswerEvents(started, loop_events=not single_draft)

    async def run() -> pb.AnswerQueryResponse:
        ANSWER_STREAM.set(events)  # in this task's copy of the context only
        return await answer(events)

    task = asyncio.ensure_future(run())
    task.add_done_callback(lambda _: events.queue.put_nowait(None))
    try:
        while (message := await events.queue.get()) is not None:
            yield message
        response = task.result()  # raises the answer's error
        if events.deltas == 0 and response.answer:
            yield events.message(response.iterations, answer_delta=response.answer)
        yield events.message(response.iterations, response=response)
    finally:
        task.cancel()
        if (prestarted := events.take_prestarted()) is not None:
            prestarted.call.cancel()  # the loop never drafted (e.g. the deadline passed)


def prestart_draft(agents: Sequence[Agent], problem: TextProblem, deadline: float) -> None:
    """Starts the single draft's gateway stream beside the retrieval when the answer will most
    likely be ungrounded: a streamed request (`ANSWER_STREAM` set) that names no collection,
    while the retrieval agent's latest search found the default collection missing
    (`RetrievalAgent.default_missing`). The retrieval still runs and decides: the LLM agent
    reads the started call only when the request it would make is the same bytes (no passages
    came), else cancels it (the first request after the default collection appears, once per
    orchestrator). It saves the retrieval's round trip from the first token of a fresh mesh.
    `deadline`: the request's, in `time.monotonic()` seconds."""
    stream = ANSWER_STREAM.get()
    if not isinstance(stream, AnswerEvents) or problem.collection_named:
        return
    retrieval = next((a for a in agents if isinstance(a, RetrievalAgent)), None)
    llm = next((a for a in agents if isinstance(a, LlmAgent)), None)
    remaining = deadline - time.monotonic()
    if retrieval is None or llm is None or not retrieval.default_missing or remaining <= 0:
        return
    stream.prestarted = llm.prestart(problem, remaining)
