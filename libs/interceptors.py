"""What server interceptors share: wrapping a method's handler once, not on every call."""

from __future__ import annotations

from collections.abc import Callable

import grpc

Wrap = Callable[[grpc.RpcMethodHandler, str], grpc.RpcMethodHandler]


class WrapOnce:
    """A server interceptor's wrapped handlers, one per method.

    The server finds the same handler for a method on every call, and a wrapper that keeps no
    state of a call can serve them all: `wrapped` builds it on the first call (about 5 us a call
    otherwise) and again only if the server hands over another handler for that method.

    Args:
        wrap: `(handler, method) -> wrapped handler`.
    """

    def __init__(self, wrap: Wrap) -> None:
        self._wrap = wrap
        self._wrapped: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    def wrapped(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        """The wrapper of `handler`, the handler of `method`."""
        cached = self._wrapped.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        wrapped = self._wrap(handler, method)
        self._wrapped[method] = (handler, wrapped)
        return wrapped
