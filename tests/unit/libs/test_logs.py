"""libs.logs: stdlib logging calls come out as one JSON object per line with the service, logger,
level, time and the current span's ids; text mode is readable and hides nothing but empty ids."""

from __future__ import annotations

import json
import logging

import pytest
from opentelemetry.sdk.trace import TracerProvider

from libs.logs import setup_logging
from mcts_mesh.cli import build_parser


@pytest.fixture
def restore_logging():
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)
    logging.captureWarnings(False)


def test_json_lines_carry_the_fields_and_the_span_ids(restore_logging, capsys):
    setup_logging("mcts", "json")
    log = logging.getLogger("services.mcts.servicer")
    log.info("searched %d simulations", 2000)
    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("request") as span:
        log.warning("inside a request")
    try:
        raise RuntimeError("broken")
    except RuntimeError:
        log.exception("failed")
    logging.getLogger("quiet").debug("below the level")
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert len(lines) == 3
    first, second, third = lines
    assert first["message"] == "searched 2000 simulations"
    assert first["level"] == "info" and first["service"] == "mcts"
    assert first["logger"] == "services.mcts.servicer"
    assert first["time"].endswith("Z") and first["trace_id"] == "" and first["span_id"] == ""
    context = span.get_span_context()
    assert second["trace_id"] == format(context.trace_id, "032x")
    assert second["span_id"] == format(context.span_id, "016x")
    assert third["level"] == "error" and "RuntimeError: broken" in third["exception"]


def test_text_format_is_one_readable_line(restore_logging, capsys):
    setup_logging("neural", "text")
    logging.getLogger("services.neural.registry").info("loaded %s", "connect4-pv")
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1
    assert "loaded connect4-pv" in err and "service=neural" in err and "trace_id" not in err
    with pytest.raises(ValueError, match="choose json or text"):
        setup_logging("neural", "xml")


def test_serve_and_up_take_a_log_format():
    parser = build_parser()
    assert parser.parse_args(["serve", "mcts", "--log-format", "text"]).log_format == "text"
    assert parser.parse_args(["up", "--log-format", "json"]).log_format == "json"
    with pytest.raises(SystemExit):
        parser.parse_args(["serve", "mcts", "--log-format", "xml"])
