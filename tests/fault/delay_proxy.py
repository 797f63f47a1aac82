"""A gRPC proxy that delays every unary call before forwarding it, for fault injection in tests.

It serves any method name (a generic handler on raw bytes), waits `delay_s` seconds, then sends
the same bytes with the same metadata and what is left of the caller's deadline to `upstream`,
and returns the upstream's answer or status. It runs in the test's event loop, so no service
carries a test-only delay setting.
"""

from __future__ import annotations

import asyncio

import grpc

_DROPPED_METADATA = {"grpc-timeout", "content-type", "user-agent", "te"}


class DelayProxy(grpc.GenericRpcHandler):
    """`await DelayProxy(upstream).start()`; then `target` is its address and `delay_s` the delay
    added to each call (changeable at any time)."""

    def __init__(self, upstream: str, delay_s: float = 0.0) -> None:
        self.upstream = upstream
        self.delay_s = delay_s
        self.calls = 0
        self._server: grpc.aio.Server | None = None
        self._channel: grpc.aio.Channel | None = None
        self.target = ""

    async def start(self) -> DelayProxy:
        self._channel = grpc.aio.insecure_channel(self.upstream)
        self._server = grpc.aio.server()
        self._server.add_generic_rpc_handlers((self,))
        port = self._server.add_insecure_port("127.0.0.1:0")
        await self._server.start()
        self.target = f"127.0.0.1:{port}"
        return self

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(0)
        if self._channel is not None:
            await self._channel.close()

    def service(self, handler_call_details):
        method = handler_call_details.method

        async def forward(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
            self.calls += 1
            await asyncio.sleep(self.delay_s)
            remaining = context.time_remaining()
            metadata = [(k, v) for k, v in context.invocation_metadata()
                        if k not in _DROPPED_METADATA and not k.startswith(":")]
            call = self._channel.unary_unary(method)
            try:
                return await call(request, timeout=remaining, metadata=metadata)
            except grpc.aio.AioRpcError as error:
                await context.abort(error.code(), error.details() or "")

        return grpc.unary_unary_rpc_method_handler(forward)
