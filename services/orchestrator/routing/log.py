"""The routing log: every routing decision of a request and its outcome, one JSON line per request,
for training the learned router (`mcts-mesh train router`).

A line (a JSON object) holds:

    time          ISO 8601 UTC instant the request finished
    kind          "connect_four", "sudoku", "maze" or "text"
    query         the problem as text: the move string, the puzzle grid, or the query's text
    board         a Connect Four position's board as "WxH" when it is not the standard 7x6
                  (absent on 7x6)
    thread_id     the request's thread id ("" when none): a labelled workload joins its labels
                  (whether the answer kept the game-theoretic outcome) to the log on it
    routes        every routing decision, in order: {"iteration", "features" (the ten routing
                  features, `routing.FEATURE_NAMES` order), "agents", "reason", "decided_by"
                  ("rules" or "learned"), "confidence" (the learned router's, or null)}
    votes         every vote: {"agent", "answer", "confidence", "iteration", "latency_ms",
                  "verified"}
    answer        the final tally's answer; "verified" (a checker proved it), "consensus"
    iterations    consensus-loop iterations run
    latency_ms    wall-clock milliseconds of the loop, routing and synthesis included

A text query's line (kind "text") also holds the text router's inputs and outcome (`text_fields`):

    role          the role that answered: "draft" (self-consistent drafts, the consensus loop),
                  "decompose", "refine" or "search"
    role_decided_by  "request" (the request named it), "rules" or "learned" (the text router)
    role_confidence  the text router's probability of its choice, or null when not asked
    provider      the provider that answered ("offline": the extractive provider, never a label)
    offline       the offline provider answered
    total_tokens  prompt plus completion tokens of every call of the request
    cost_usd      their cost in US dollars (0 when no price is configured)

A role (anything but "draft") runs beside the loop, so its line has no routes, one vote (the
role's answer), iterations 1 and latency_ms the retrieval's and the role's. The labelled text
workload (`training.router.text`) joins its labels to these lines on thread_id.

Writing happens off the event loop: `RoutingLog.write` serialises the line and hands it to a
bounded queue that a `logging.handlers.QueueListener` thread drains into a
`RotatingFileHandler`, so the file never grows past `max_bytes` and `backups` older files are kept
(`routing.jsonl.1`, ...). When the queue is full (the disk is slower than the requests) the line
is dropped and counted (`dropped`), never waited for.
"""

from __future__ import annotations

import json
import logging
import logging.handlers
import queue
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from libs.connect4.geometry import STANDARD
from services.orchestrator.problems.connect_four import ConnectFourProblem

log = logging.getLogger(__name__)

QUEUE_SIZE = 10_000
"""Lines waiting to be written at most; more are dropped."""


def _round(values: Sequence[float]) -> list[float]:
    return [round(float(v), 6) for v in values]


def routing_record(kind: str, query: str, thread_id: str, result: Any,
                   latency_ms: float) -> dict[str, Any]:
    """The log line (as a dict) of a finished loop.

    Args:
        kind: the problem's kind ("connect_four", "text", ...).
        query: the problem as text (moves, grid or query).
        thread_id: the request's thread id.
        result: the `consensus.LoopResult` of the request.
        latency_ms: wall-clock milliseconds of the loop.
    """
    routes = [{"iteration": index + 1, "features": _round(decision.features.tolist()),
               "agents": [str(agent) for agent in decision.agents], "reason": decision.reason,
               "decided_by": str(decision.decided_by), "confidence": decision.confidence}
              for index, decision in enumerate(result.routes)]
    votes = [{"agent": str(vote.agent), "answer": vote.answer,
              "confidence": round(vote.confidence, 6), "iteration": vote.iteration,
              "latency_ms": round(vote.latency_ms, 3), "verified": vote.verified}
             for vote in result.votes]
    return {
        "time": datetime.now(UTC).isoformat(timespec="milliseconds"),
        "kind": kind, "query": query, "thread_id": thread_id, "routes": routes, "votes": votes,
        "answer": result.tally.answer, "verified": result.tally.verified,
        "consensus": result.consensus_reached, "iterations": result.iterations,
        "latency_ms": round(latency_ms, 3),
    }


def problem_text(problem: Any) -> str:
    """The problem as the routing log writes it: the move string of a Connect Four position, the
    grid of a Sudoku or a maze."""
    if isinstance(problem, ConnectFourProblem):
        return problem.position.moves
    for attribute in ("puzzle", "grid"):
        value = getattr(problem, attribute, None)
        if isinstance(value, str):
            return value
    return ""


def problem_fields(problem: Any) -> dict[str, Any] | None:
    """Fields of the problem beyond its text: {"board": "WxH"} for a Connect Four position on
    another board than 7x6, else None."""
    if isinstance(problem, ConnectFourProblem) and problem.position.board != STANDARD:
        return {"board": problem.position.board.name}
    return None


def log_loop(routing_log: RoutingLog | None, kind: str, query: str, thread_id: str, result: Any,
             started: float, extra: dict[str, Any] | None = None) -> None:
    """Appends a finished loop's `routing_record` (with `extra` fields; `started` is its
    `time.perf_counter()` start) to `routing_log`, when there is one."""
    if routing_log is not None:
        routing_log.write({**routing_record(
            kind, query, thread_id, result, (time.perf_counter() - started) * 1e3),
            **(extra or {})})


def text_fields(role: str, decided_by: str, confidence: float | None, provider: str,
                offline: bool, total_tokens: int, cost_usd: float) -> dict[str, Any]:
    """The text-only fields of a log line (module docstring)."""
    return {"role": role, "role_decided_by": decided_by,
            "role_confidence": None if confidence is None else round(confidence, 6),
            "provider": provider, "offline": offline, "total_tokens": int(total_tokens),
            "cost_usd": round(cost_usd, 8)}


def role_record(query: str, thread_id: str, answer: str, confidence: float, latency_ms: float,
                fields: dict[str, Any]) -> dict[str, Any]:
    """The log line (as a dict) of a text role that ran beside the loop.

    Args:
        query: the query's text.
        thread_id: the request's thread id.
        answer: the role's answer ("" when it gave none).
        confidence: the role's confidence in [0, 1].
        latency_ms: wall-clock milliseconds of the retrieval and the role.
        fields: `text_fields` of the request.
    """
    votes = [{"agent": "llm", "answer": answer, "confidence": round(confidence, 6),
              "iteration": 1, "latency_ms": round(latency_ms, 3), "verified": False}] \
        if answer else []
    return {"time": datetime.now(UTC).isoformat(timespec="milliseconds"), "kind": "text",
            "query": query, "thread_id": thread_id, "routes": [], "votes": votes,
            "answer": answer, "verified": False, "consensus": bool(answer), "iterations": 1,
            "latency_ms": round(latency_ms, 3), **fields}


class RoutingLog:
    """An append-only JSON-lines file of routing records, bounded and rotated.

    Args:
        path: the file; its folder is created.
        max_bytes: size at which the file is rotated, >= 1,024.
        backups: rotated files kept (`path.1` ... `path.N`), >= 1.
    Raises:
        ValueError: `max_bytes` or `backups` out of range.
        OSError: the folder cannot be created or the file opened.
    """

    def __init__(self, path: Path, max_bytes: int, backups: int) -> None:
        if max_bytes < 1024 or backups < 1:
            raise ValueError("routing log: need max_bytes >= 1024 and backups >= 1")
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._handler = logging.handlers.RotatingFileHandler(
            path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8")
        self._handler.setFormatter(logging.Formatter("%(message)s"))
        self._queue: queue.Queue[logging.LogRecord] = queue.Queue(QUEUE_SIZE)
        self._listener = logging.handlers.QueueListener(self._queue, self._handler)
        self._listener.start()
        self._lock = threading.Lock()
        self.dropped = 0

    def write(self, record: dict[str, Any]) -> None:
        """Queues one line; never blocks (a full queue drops the line and counts it)."""
        line = json.dumps(record, separators=(",", ":"), allow_nan=False)
        try:
            self._queue.put_nowait(logging.makeLogRecord({"msg": line, "args": None}))
        except queue.Full:
            with self._lock:
                self.dropped += 1
            if self.dropped in (1, 100, 10_000):
                log.warning("routing log %s: %d lines dropped (queue full)", self.path,
                            self.dropped)

    def close(self) -> None:
        """Writes what is queued, stops the writer thread and closes the file."""
        self._listener.stop()
        self._handler.close()
