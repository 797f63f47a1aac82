"""The REST front's channel to its gRPC server: its connect timeout is the orchestrator's setting
(`ORCHESTRATOR_CONNECT_TIMEOUT_S`), not a constant of the front."""

from __future__ import annotations

import grpc

from libs.channels import DEFAULT_CONNECT_TIMEOUT_S
from services.orchestrator.rest.app import RestSettings, build_rest_app
from services.orchestrator.settings import OrchestratorSettings


def test_the_default_is_the_orchestrators():
    assert RestSettings().connect_timeout_s == DEFAULT_CONNECT_TIMEOUT_S
    assert OrchestratorSettings().connect_timeout_s == DEFAULT_CONNECT_TIMEOUT_S


async def test_the_channel_gets_the_connect_timeout_it_is_given(monkeypatch):
    opened: list[dict[str, object]] = []
    open_channel = grpc.aio.insecure_channel

    def recording(target, options=None, **kwargs):
        opened.append(dict(options or ()))
        return open_channel(target, options=options, **kwargs)

    monkeypatch.setattr(grpc.aio, "insecure_channel", recording)
    app = build_rest_app("127.0.0.1:1", RestSettings(connect_timeout_s=0.25))
    async with app.router.lifespan_context(app):
        pass
    assert len(opened) == 1
    # The connect timeout is gRPC's minimum reconnect backoff (libs.channels.channel_options).
    assert opened[0]["grpc.min_reconnect_backoff_ms"] == 250
