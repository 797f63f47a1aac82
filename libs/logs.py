"""Structured logs for every service: one JSON object per line, or plain text for a terminal.

structlog renders the lines; the standard library's `logging` calls of the whole code base (and of
grpc, uvicorn, qdrant...) flow through the same renderer via `structlog.stdlib.ProcessorFormatter`
on the root handler, so `log.info("%s ready", name)` stays as it is. Every line carries

    {"time": "2026-11-24T22:30:01.123456Z", "level": "info", "service": "mcts",
     "logger": "libs.server", "message": "mcts ready: SERVING",
     "trace_id": "4bf92f35...", "span_id": "00f067aa..."}

`trace_id` and `span_id` are the current OpenTelemetry span's (empty outside a request), so a log
line can be looked up in Jaeger and the other way round; an exception adds "exception" with the
formatted traceback.
"""

from __future__ import annotations

import logging
import sys
from typing import Literal

import structlog
from opentelemetry import trace

LogFormat = Literal["json", "text"]


def _add_trace_ids(_logger, _method: str, event: dict) -> dict:
    context = trace.get_current_span().get_span_context()
    if context.is_valid:
        event["trace_id"] = format(context.trace_id, "032x")
        event["span_id"] = format(context.span_id, "016x")
    else:
        event["trace_id"] = event["span_id"] = ""
    return event


def _drop_empty_ids(_logger, _method: str, event: dict) -> dict:
    for key in ("trace_id", "span_id"):
        if not event.get(key):
            event.pop(key, None)
    return event


def _add_service(service: str):
    def add(_logger, _method: str, event: dict) -> dict:
        event["service"] = service
        return event

    return add


def setup_logging(service: str, log_format: LogFormat = "json", level: int = logging.INFO) -> None:
    """Routes every `logging` record of the process through structlog's renderer on stderr.

    Args:
        service: the service's word, the "service" field of every line.
        log_format: "json" (one object per line) or "text" (structlog's console renderer).
        level: the root logger's level.
    Raises:
        ValueError: an unknown `log_format`.
    """
    if log_format not in ("json", "text"):
        raise ValueError(f"log format {log_format!r}: choose json or text")
    shared = [
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.stdlib.ExtraAdder(),
        structlog.processors.TimeStamper(fmt="iso", utc=True, key="time"),
        _add_service(service),
        _add_trace_ids,
    ]
    if log_format == "json":
        tail = [structlog.processors.format_exc_info,
                structlog.processors.EventRenamer("message"),
                structlog.processors.JSONRenderer()]
    else:
        # Plain tracebacks: rich's formatter would print local variables, secrets included.
        tail = [_drop_empty_ids,
                structlog.dev.ConsoleRenderer(colors=False, timestamp_key="time",
                                              exception_formatter=structlog.dev.plain_traceback)]
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *tail],
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    logging.captureWarnings(True)  # warnings.warn(...) becomes a line like any other
    structlog.configure(
        processors=[structlog.stdlib.filter_by_level, *shared,
                    structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
