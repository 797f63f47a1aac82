"""Decoding large JSON bodies in worker processes, off the event loop that the REST front shares
with the gRPC server.

A thread is not enough: `json.loads` holds the GIL for the whole document (about 0.1 s for a 4 MB
body of small objects, on this machine), and `json_format.ParseDict` is pure Python, so either would
stall every other call of the process. A body of at least `min_bytes` is checked (nesting depth),
decoded and mapped onto its message in a worker process instead, which sends the message back
serialized; parsing that (C, about 12 ms for the 4 MB case) is all the loop does. A smaller body is
decoded on the loop, where it costs less than a round trip to a worker.

The workers are started with "spawn" (the server process runs gRPC threads, which fork would copy
in an unusable state), on the first large body, and stopped by `close()` or, however the server
process ends, by their own watch on it. A spawned worker imports the server's `__main__` module
as `__mp_main__`: the entry points guard their `main()` with `if __name__ == "__main__"`.
"""

from __future__ import annotations

import asyncio
import importlib
import multiprocessing
import os
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from google.protobuf import descriptor_pool, message_factory
from google.protobuf.message import Message

from libs.errors import InvalidArgument, Unavailable
from libs.rest.jsonl import InvalidLine, LinesUpload, TooManyItems, decode_lines
from libs.rest.limits import BodyTooDeep, check_json_depth
from libs.rest.transcoding import MalformedBody, decode_body

_DEEP, _MALFORMED, _INVALID, _DECODED = "deep", "malformed", "invalid", "decoded"
_BAD_LINE, _TOO_MANY = "bad_line", "too_many"


def exit_with_parent() -> None:
    """Worker initializer: a daemon thread ends this process as soon as the server process ends,
    however it ends (SIGKILL included); a ProcessPoolExecutor worker would otherwise wait for work
    forever, holding its memory."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch() -> None:
        parent.join()  # returns when the parent's end of the pipe closes
        os._exit(0)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def decode_in_worker(module: str, full_name: str, body_field: str, body: bytes,
                     max_depth: int) -> tuple[str, ...] | tuple[str, bytes]:
    """Runs in a worker: the body checked and decoded onto a new message `full_name` (a type of
    the generated module `module`, imported to register it).

    Returns ("decoded", serialized message), or the failure as plain values (exceptions with
    custom constructors do not cross a process boundary): ("deep", message), ("malformed",
    message) or ("invalid", field, description).
    """
    importlib.import_module(module)
    request = message_factory.GetMessageClass(
        descriptor_pool.Default().FindMessageTypeByName(full_name))()
    try:
        check_json_depth(body, max_depth)
        decode_body(request, body_field, body)
    except BodyTooDeep as error:
        return _DEEP, error.message
    except MalformedBody as error:
        return _MALFORMED, error.message
    except InvalidArgument as error:
        return _INVALID, error.field, error.description
    return _DECODED, request.SerializeToString()


def decode_lines_in_worker(module: str, full_name: str, upload: LinesUpload, body: bytes,
                           max_depth: int) -> tuple:
    """Runs in a worker: `jsonl.decode_lines` onto a new message `full_name`. Returns ("decoded",
    serialized message, line numbers), or ("too_many", field, description) or ("bad_line", line,
    field, description)."""
    importlib.import_module(module)
    request = message_factory.GetMessageClass(
        descriptor_pool.Default().FindMessageTypeByName(full_name))()
    try:
        numbers = decode_lines(request, upload, body, max_depth)
    except InvalidLine as error:
        return _BAD_LINE, error.line, error.field, error.what
    except TooManyItems as error:
        return _TOO_MANY, error.field, error.description
    return _DECODED, request.SerializeToString(), numbers


class BodyDecoder:
    """Decodes request bodies: small ones on the loop, large ones in up to `workers` processes.

    Args:
        min_bytes: bodies of at least this many bytes go to a worker.
        max_depth: deepest JSON nesting accepted (see `limits.check_json_depth`).
        workers: worker processes, started on the first large body.
    """

    def __init__(self, min_bytes: int, max_depth: int, workers: int = 2) -> None:
        self._min_bytes = min_bytes
        self._max_depth = max_depth
        self._workers = workers
        self._pool: ProcessPoolExecutor | None = None

    async def decode(self, request: Message, body_field: str, body: bytes) -> Message:
        """`request` with the JSON `body` merged in ("*": the whole message; else that field);
        a new message of the same type when a worker decoded it.

        Raises:
            BodyTooDeep: nested deeper than `max_depth`.
            MalformedBody: not JSON, or not an object for "*".
            InvalidArgument: an unknown field or a value of the wrong type, naming the field.
            Unavailable: the worker process died while decoding (it is replaced).
        """
        if len(body) < self._min_bytes:
            check_json_depth(body, self._max_depth)
            decode_body(request, body_field, body)
            return request
        message_class = type(request)
        result = await self._in_worker(decode_in_worker, message_class.__module__,
                                       request.DESCRIPTOR.full_name, body_field, body,
                                       self._max_depth)
        if result[0] == _DEEP:
            raise BodyTooDeep(result[1])
        if result[0] == _MALFORMED:
            raise MalformedBody(result[1])
        if result[0] == _INVALID:
            raise InvalidArgument(result[1], result[2])
        return message_class.FromString(result[1])

    async def decode_lines(self, request: Message, upload: LinesUpload, body: bytes
                           ) -> tuple[Message, list[int]]:
        """`request` with one `upload.field` element per line of the JSON Lines `body` (a new
        message of the same type when a worker decoded it), and each element's line number.

        Raises:
            TooManyItems, InvalidLine: see `jsonl.decode_lines`.
            Unavailable: the worker process died while decoding (it is replaced).
        """
        if len(body) < self._min_bytes:
            return request, decode_lines(request, upload, body, self._max_depth)
        message_class = type(request)
        result = await self._in_worker(decode_lines_in_worker, message_class.__module__,
                                       request.DESCRIPTOR.full_name, upload, body,
                                       self._max_depth)
        if result[0] == _TOO_MANY:
            raise TooManyItems(result[1], result[2])
        if result[0] == _BAD_LINE:
            raise InvalidLine(result[1], result[2], result[3])
        return message_class.FromString(result[1]), list(result[2])

    async def _in_worker(self, function, *arguments) -> tuple:  # noqa: ANN001
        """`function(*arguments)` in a worker process (the pool started on first use).

        Raises:
            Unavailable: the worker process died (the pool is replaced on the next call).
        """
        if self._pool is None:
            self._pool = ProcessPoolExecutor(self._workers,
                                             mp_context=multiprocessing.get_context("spawn"),
                                             initializer=exit_with_parent)
        pool = self._pool
        try:
            # submitted from a thread: a submit may spawn a worker (about 25 ms of Python)
            future = await asyncio.to_thread(pool.submit, function, *arguments)
            return await asyncio.wrap_future(future)
        except BrokenProcessPool:
            if self._pool is pool:
                self._pool = None
            pool.shutdown(wait=False, cancel_futures=True)
            raise Unavailable("the REST front's body decoder stopped; retry") from None

    def close(self) -> None:
        """Stops the worker processes (running decodes are cancelled)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
