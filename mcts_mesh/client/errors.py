"""The mesh's errors as Python exceptions: one class per gRPC status code, each carrying the
`google.rpc.Status` the server sent and its details unpacked (BadRequest field violations,
QuotaFailure violations, RetryInfo, ErrorInfo). `error_from_rpc` turns a failed call of either
grpc API (blocking or grpc.aio) into one."""

from __future__ import annotations

from dataclasses import dataclass

import grpc
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

_DETAIL_TYPES = (error_details_pb2.BadRequest, error_details_pb2.QuotaFailure,
                 error_details_pb2.RetryInfo, error_details_pb2.ErrorInfo,
                 error_details_pb2.PreconditionFailure, error_details_pb2.ResourceInfo,
                 error_details_pb2.Help, error_details_pb2.LocalizedMessage,
                 error_details_pb2.DebugInfo, error_details_pb2.RequestInfo)
"""The google.rpc detail messages unpacked from a status (others stay packed in `status`)."""


@dataclass(frozen=True)
class FieldViolation:
    """One bad request field: `field` is its path in the request ("connect_four.moves",
    "documents[2].text"), `description` what is wrong with it."""

    field: str
    description: str


@dataclass(frozen=True)
class QuotaViolation:
    """One quota used up: `subject` names it (a key's budget, "tokens_per_day"), `description`
    says how."""

    subject: str
    description: str


class MeshRpcError(Exception):
    """A call to the mesh failed. Subclasses name the status code (`InvalidArgumentError`, ...).

    Attributes:
        code: the gRPC status code.
        message: the server's message (the status's).
        status: the full `google.rpc.Status` (None when the server sent none, e.g. a transport
            failure).
        details: the status's detail messages, unpacked (BadRequest, ErrorInfo, ...).
        field_violations: BadRequest's violations, in order (empty without one).
        quota_violations: QuotaFailure's violations (empty without one).
        retry_delay: RetryInfo's delay in seconds (None without one).
        reason: ErrorInfo's reason ("API_KEY_INVALID", "RATE_LIMIT_EXCEEDED", ...), or None.
        metadata: ErrorInfo's metadata ({"service": "orchestrator", ...}), empty without one.
    """

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(self, code: grpc.StatusCode, message: str,
                 status: status_pb2.Status | None = None) -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message
        self.status = status
        self.details: tuple[Message, ...] = _unpack(status)
        self.field_violations = tuple(
            FieldViolation(v.field, v.description) for d in self.details
            if isinstance(d, error_details_pb2.BadRequest) for v in d.field_violations)
        self.quota_violations = tuple(
            QuotaViolation(v.subject, v.description) for d in self.details
            if isinstance(d, error_details_pb2.QuotaFailure) for v in d.violations)
        retry = next((d for d in self.details if isinstance(d, error_details_pb2.RetryInfo)),
                     None)
        self.retry_delay = None if retry is None else retry.retry_delay.ToTimedelta(
            ).total_seconds()
        info = next((d for d in self.details if isinstance(d, error_details_pb2.ErrorInfo)), None)
        self.reason = info.reason if info is not None else None
        self.metadata = dict(info.metadata) if info is not None else {}

    @property
    def field(self) -> str | None:
        """The first bad field's path (None without a BadRequest detail)."""
        return self.field_violations[0].field if self.field_violations else None


class CancelledError(MeshRpcError):
    code = grpc.StatusCode.CANCELLED


class InvalidArgumentError(MeshRpcError):
    """The request has a bad field: `field_violations` name it (HTTP 400)."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class DeadlineExceededError(MeshRpcError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class NotFoundError(MeshRpcError):
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExistsError(MeshRpcError):
    code = grpc.StatusCode.ALREADY_EXISTS


class PermissionDeniedError(MeshRpcError):
    """The key may not do this (reason SCOPE_NOT_GRANTED, COLLECTION_NOT_ALLOWED)."""

    code = grpc.StatusCode.PERMISSION_DENIED


class ResourceExhaustedError(MeshRpcError):
    """A rate limit, budget or cap (`retry_delay`, `quota_violations` say which and when)."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class FailedPreconditionError(MeshRpcError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class AbortedError(MeshRpcError):
    code = grpc.StatusCode.ABORTED


class UnimplementedError(MeshRpcError):
    code = grpc.StatusCode.UNIMPLEMENTED


class InternalError(MeshRpcError):
    code = grpc.StatusCode.INTERNAL


class UnavailableError(MeshRpcError):
    """The service (or one it needs) is down or not ready; idempotent calls are retried."""

    code = grpc.StatusCode.UNAVAILABLE


class UnauthenticatedError(MeshRpcError):
    """No API key, or an unknown one (reason API_KEY_MISSING, API_KEY_INVALID)."""

    code = grpc.StatusCode.UNAUTHENTICATED


ERRORS: dict[grpc.StatusCode, type[MeshRpcError]] = {
    cls.code: cls for cls in (CancelledError, InvalidArgumentError, DeadlineExceededError,
                              NotFoundError, AlreadyExistsError, PermissionDeniedError,
                              ResourceExhaustedError, FailedPreconditionError, AbortedError,
                              UnimplementedError, InternalError, UnavailableError,
                              UnauthenticatedError)}
"""The exception class of each status code (others: `MeshRpcError`)."""


def error_from_rpc(error: grpc.RpcError) -> MeshRpcError:
    """The `MeshRpcError` subclass of a failed call (a `grpc.RpcError` of the blocking API or a
    `grpc.aio.AioRpcError`), with the details of its `grpc-status-details-bin` trailer."""
    code = error.code()
    try:
        status = rpc_status.from_call(error)
    except ValueError:  # a status whose code or message disagree with the call's
        status = None
    return ERRORS.get(code, MeshRpcError)(code, error.details() or code.name, status)


def _unpack(status: status_pb2.Status | None) -> tuple[Message, ...]:
    if status is None:
        return ()
    unpacked = []
    for packed in status.details:
        for kind in _DETAIL_TYPES:
            if packed.Is(kind.DESCRIPTOR):
                message = kind()
                packed.Unpack(message)
                unpacked.append(message)
                break
    return tuple(unpacked)
