"""HTTP/2 keepalive between mesh services (libs.channels.Keepalive, libs.server): the channels ping
every connection and close it when a ping goes unanswered, and every server accepts those pings,
so a long call on a healthy connection keeps its connection (no GOAWAY "too_many_pings" and a
retry on a new one). A frozen peer is the fault tests' part (tests/fault/test_mesh_faults.py)."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from mesh.llm.v1 import llm_service_pb2, llm_service_pb2_grpc
from pydantic import ValidationError

from libs.channels import (
    MIN_KEEPALIVE_TIME_S,
    SERVER_MIN_PING_INTERVAL_MS,
    Keepalive,
    channel_options,
    keepalive_server_options,
    open_channel,
)
from libs.server import Servicer, start_server
from libs.settings import ChannelSettings, ServiceSettings


class _Peers(llm_service_pb2_grpc.LlmServiceServicer):
    """Answers after `prompt` seconds and records the peer (client address and port) of every
    attempt: a call retried on a new connection shows up twice, with two ports."""

    def __init__(self) -> None:
        self.peers: list[str] = []

    async def Generate(self, request, context):
        self.peers.append(context.peer())
        await asyncio.sleep(float(request.prompt))
        return llm_service_pb2.GenerateResponse(text=request.prompt)


def test_every_mesh_channel_pings_and_gives_up_after_the_timeout():
    options = dict(channel_options(keepalive=Keepalive(time_s=1.5, timeout_s=2.5)))
    assert options["grpc.keepalive_time_ms"] == 1500
    assert options["grpc.keepalive_timeout_ms"] == 2500
    assert options["grpc.http2.ping_timeout_ms"] == 2500
    assert options["grpc.keepalive_permit_without_calls"] == 1
    assert options["grpc.http2.max_pings_without_data"] == 0
    assert dict(channel_options())["grpc.keepalive_time_ms"] == 1000


def test_servers_accept_pings_as_often_as_a_channel_may_send_them():
    options = dict(keepalive_server_options())
    assert options["grpc.keepalive_permit_without_calls"] == 1
    interval_ms = options["grpc.http2.min_ping_interval_without_data_ms"]
    assert interval_ms == SERVER_MIN_PING_INTERVAL_MS <= MIN_KEEPALIVE_TIME_S * 1e3 / 2
    assert options["grpc.http2.max_ping_strikes"] > 0  # abuse is still cut off


def test_keepalive_below_grpcs_floor_is_refused():
    with pytest.raises(ValueError):
        Keepalive(time_s=MIN_KEEPALIVE_TIME_S / 2)
    with pytest.raises(ValueError):
        Keepalive(timeout_s=0)
    with pytest.raises(ValidationError):
        ChannelSettings(keepalive_time_s=0.5)
    settings = ChannelSettings(keepalive_time_s=2, keepalive_timeout_s=3)
    assert Keepalive.of(settings) == Keepalive(time_s=2.0, timeout_s=3.0)


@pytest.mark.slow
async def test_a_long_call_keeps_its_connection_through_the_pings():
    # Six pings without a data frame: gRPC's default server policy answers the third one with
    # GOAWAY "too_many_pings", and the call is retried on a new connection.
    servicer = _Peers()
    server = await start_server("llm", ServiceSettings(port=0), [Servicer(
        llm_service_pb2_grpc.add_LlmServiceServicer_to_server, servicer,
        "mesh.llm.v1.LlmService")])
    channel = open_channel(f"127.0.0.1:{server.port}")
    try:
        stub = llm_service_pb2_grpc.LlmServiceStub(channel)
        await stub.Generate(llm_service_pb2.GenerateRequest(prompt="0"), timeout=10)
        await stub.Generate(llm_service_pb2.GenerateRequest(prompt="6"), timeout=30)
        await stub.Generate(llm_service_pb2.GenerateRequest(prompt="0"), timeout=10)
        assert channel.get_state() == grpc.ChannelConnectivity.READY
    finally:
        await channel.close()
        await server.stop(0)
    assert len(servicer.peers) == 3, servicer.peers  # no attempt was retried
    assert len(set(servicer.peers)) == 1, servicer.peers  # on one connection
