"""The REST front's early key check (`libs.rest.app.Authenticator`) made of `AccessControl`: the
credential headers' metadata parsed into a `Credential`, authenticated, and a rejection turned
into the same `google.rpc.Status` the gRPC interceptor sends."""

from __future__ import annotations

from google.rpc import status_pb2

from services.orchestrator.access.control import AccessControl, credential_from_metadata
from services.orchestrator.access.interceptor import rejection_status


class KeyCheck:
    """`refuse(metadata)`: None when the key in `metadata` may call, else the refusal's Status
    (missing or invalid key); no other effect (admission and limits stay with the interceptor)."""

    def __init__(self, access: AccessControl) -> None:
        self._access = access

    def refuse(self, metadata: list[tuple[str, str | bytes]]) -> status_pb2.Status | None:
        """The Status of the rejection of `metadata`'s credential, or None."""
        rejection = self._access.authenticate(credential_from_metadata(metadata))
        return None if rejection is None else rejection_status(rejection)
