"""`stream: true` of the chat-completions route: Server-Sent Events as OpenAI sends them, one
`data: <chat.completion.chunk>` per event and `data: [DONE]` last.

Each choice is one StreamAnswerQuery call (in process, with the request's key): its
`answer_delta` messages become `delta.content` chunks as they come (the first chunk of each
choice carries `delta.role: "assistant"`), its final `response` (the AnswerQueryResponse, the
authority) ends the choice with its `finish_reason` (`openai_response.finish_reason`) and the
`mesh` extension field; text of the final answer not yet streamed (a path that answers in one
piece, or a fallback) is sent before it. The `n` choices stream concurrently, interleaved.

The mesh's progress before the text (the sources found, each iteration, agent and tally of the
consensus loop) is sent as SSE comment lines (`: agent_finished`), which clients skip: a long
self-consistency or search keeps its connection visibly alive.

With `stream_options.include_usage`, every chunk has `usage: null` and one last chunk (no
choices) has the usage. A failure before any event (a refused key, limits, a bad request) is
an ordinary error response with its HTTP status; a failure after the stream started is one last
`data: {"error": {...}}` event (OpenAI's SDKs raise it), without `[DONE]`. A client that
disconnects cancels every call (the LLM gateway's streams close with them).

Stop sequences: each choice's text is cut before the first stop sequence, even one split
across deltas (the last `len(longest stop) - 1` characters are held back until they cannot
start one); the call runs on to its final response, so usage and sources stay whole.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator

import grpc
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb
from starlette.responses import Response, StreamingResponse

from libs.in_process import CallFailed, InProcessStreamCall
from libs.rest.extras import Caller
from libs.rest.status import http_status
from services.orchestrator.api.openai_errors import failure_response, status_error
from services.orchestrator.api.openai_models import MeshModel
from services.orchestrator.api.openai_request import ChatRequest, answer_request
from services.orchestrator.api.openai_response import finish_reason, mesh_extension, usage

SERVICE = "/mesh.orchestrator.v1.OrchestratorService"
STREAM_ANSWER = f"{SERVICE}/StreamAnswerQuery"
EVENT_STREAM = "text/event-stream"
DONE = b"data: [DONE]\n\n"


def apply_stops(text: str, stops: list[str]) -> tuple[str, bool]:
    """`text` cut before the first occurrence of any stop sequence; True when one was found."""
    cut = min((i for i in (text.find(stop) for stop in stops) if i >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


class StopScanner:
    """Streamed text cut before the first stop sequence (see the module docstring)."""

    def __init__(self, stops: list[str]) -> None:
        self._stops = stops
        self._hold = max((len(stop) for stop in stops), default=1) - 1
        self._pending = ""
        self.raw = ""
        """Every character fed, stops included."""
        self.stopped = False

    def feed(self, text: str) -> str:
        """The text that may be sent now."""
        self.raw += text
        if self.stopped:
            return ""
        self._pending += text
        kept, self.stopped = apply_stops(self._pending, self._stops)
        if self.stopped:
            self._pending = ""
            return kept
        cut = len(self._pending) - self._hold
        out, self._pending = self._pending[:max(cut, 0)], self._pending[max(cut, 0):]
        return out

    def flush(self) -> str:
        """The held-back text, at the end of the answer."""
        out, self._pending = self._pending, ""
        return out


class _Source:
    """One choice's events: ("delta", text), ("progress", event name) and ("final",
    AnswerQueryResponse)."""

    def __init__(self, call: InProcessStreamCall, first: object) -> None:
        self._call = call
        self._first = first

    async def events(self) -> AsyncIterator[tuple[str, object]]:
        message = self._first
        while message is not grpc.aio.EOF:
            kind = message.WhichOneof("event")  # type: ignore[attr-defined]
            if kind == "answer_delta":
                yield "delta", message.answer_delta  # type: ignore[attr-defined]
            elif kind == "response":
                yield "final", message.response  # type: ignore[attr-defined]
            else:  # sources, the loop's progress
                yield "progress", kind
            message = await self._call.read()

    def cancel(self) -> None:
        self._call.cancel()


async def _open(caller: Caller, request: ChatRequest, model: MeshModel) -> _Source:
    """One choice's StreamAnswerQuery call, started and read up to its first message.

    Raises:
        CallFailed: the call failed before its first message.
    """
    call = await caller.stream(STREAM_ANSWER,
                               answer_request(request, model, pb.StreamAnswerQueryRequest))
    try:
        return _Source(call, await call.read())
    except BaseException:
        call.cancel()
        raise


async def chat_stream(caller: Caller, request: ChatRequest, model: MeshModel, completion_id: str
                      ) -> Response:
    """The SSE response of a streamed chat completion, or the error response of a failure
    before any event (see the module docstring)."""
    tasks = [asyncio.ensure_future(_open(caller, request, model)) for _ in range(request.n)]
    try:
        sources = await asyncio.gather(*tasks)
    except BaseException as error:
        for task in tasks:
            if not task.done():
                task.cancel()
            elif not task.cancelled() and task.exception() is None:
                task.result().cancel()
        if not isinstance(error, CallFailed):
            raise
        return failure_response(error.status)
    chunks = _Chunks(completion_id, model.id, request)
    return StreamingResponse(chunks.body(sources), media_type=EVENT_STREAM,
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


class _Chunks:
    """The chunks of one streamed completion."""

    def __init__(self, completion_id: str, model_id: str, request: ChatRequest) -> None:
        self._base = {"id": completion_id, "object": "chat.completion.chunk",
                      "created": int(time.time()), "model": model_id,
                      "system_fingerprint": None}
        self._usage = request.stream_options is not None and request.stream_options.include_usage
        self._stops = request.stops()

    def _chunk(self, choices: list[dict], usage: dict | None = None) -> bytes:
        chunk = dict(self._base, choices=choices)
        if self._usage:
            chunk["usage"] = usage
        return b"data: " + json.dumps(chunk).encode() + b"\n\n"

    def _delta(self, index: int, delta: dict, finish: str | None = None,
               extension: dict | None = None) -> bytes:
        choice: dict[str, object] = {"index": index, "delta": delta, "logprobs": None,
                                     "finish_reason": finish}
        if extension is not None:
            choice["mesh"] = extension
        return self._chunk([choice])

    async def body(self, sources: list[_Source]) -> AsyncIterator[bytes]:
        """Every chunk, the choices interleaved as their events come."""
        queue: asyncio.Queue[tuple[int, str, object]] = asyncio.Queue()
        tasks = [asyncio.ensure_future(_pump(i, s, queue)) for i, s in enumerate(sources)]
        scanners = [StopScanner(self._stops) for _ in sources]
        finals: list[pb.AnswerQueryResponse] = []
        try:
            for index in range(len(sources)):
                yield self._delta(index, {"role": "assistant", "content": ""})
            while len(finals) < len(sources):
                index, kind, value = await queue.get()
                scanner = scanners[index]
                if kind == "error":
                    code = http_status(value.code)  # type: ignore[attr-defined]
                    yield b"data: " + json.dumps(status_error(value, code)).encode() + b"\n\n"
                    return
                if kind == "progress":
                    yield f": {value}\n\n".encode()
                    continue
                if kind == "delta":
                    text = scanner.feed(value)  # type: ignore[arg-type]
                    if text:
                        yield self._delta(index, {"content": text})
                    continue
                final: pb.AnswerQueryResponse = value  # type: ignore[assignment]
                rest = final.answer[len(scanner.raw):] \
                    if final.answer.startswith(scanner.raw) else ""
                text = scanner.feed(rest) + ("" if scanner.stopped else scanner.flush())
                if text:
                    yield self._delta(index, {"content": text})
                finals.append(final)
                yield self._delta(index, {}, finish_reason(final, scanner.stopped),
                                  mesh_extension(final))
            if self._usage:
                yield self._chunk([], usage(finals))
            yield DONE
        finally:
            for task in tasks:
                task.cancel()
            for source in sources:
                source.cancel()


async def _pump(index: int, source: _Source, queue: asyncio.Queue) -> None:
    """Puts one choice's events on `queue`; a failure is its last ("error", status)."""
    try:
        async for kind, value in source.events():
            await queue.put((index, kind, value))
    except CallFailed as failure:
        await queue.put((index, "error", failure.status))
