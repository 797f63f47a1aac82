"""Resource names, page tokens and messages of the document RPCs (AIP-122, AIP-131/132/135,
AIP-158): `collections/{collection}` and `collections/{collection}/documents/{document}`.

Pure functions, no gRPC calls: the servicer parses with these, calls the `Retriever`, and builds
the response with `document_proto`.
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid

from google.protobuf.timestamp_pb2 import Timestamp
from mesh.retrieval.v1 import retrieval_service_pb2 as pb

from libs.errors import InvalidArgument
from services.retrieval.store import COLLECTION_NAME, DocumentHead

MAX_DOCUMENT_ID_CHARS = 1_024
"""Longest document id (characters): file paths as ids fit; it is stored in every chunk."""
MAX_TITLE_CHARS = 1_024
"""Longest title (characters); stored once per document, and embedded with each of its chunks."""
MAX_SOURCE_CHARS = 2_048
"""Longest source (characters); stored once per document."""
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 1_000
_COLLECTIONS = "collections/"
_DOCUMENTS = "/documents/"


def collection_of(name: str, field: str = "name") -> str:
    """The collection of `collections/{collection}`.

    Raises:
        InvalidArgument(field): another shape, or a collection outside ^[a-zA-Z0-9_-]{1,64}$.
    """
    collection = name[len(_COLLECTIONS):] if name.startswith(_COLLECTIONS) else None
    if collection is None or not COLLECTION_NAME.fullmatch(collection):
        raise InvalidArgument(field, f"{_short(name)!r} is not collections/{{collection}} with "
                              f"a collection matching {COLLECTION_NAME.pattern}")
    return collection


def document_of(name: str) -> tuple[str, str]:
    """(collection, document id) of `collections/{collection}/documents/{document}`; the id is
    everything after "/documents/".

    Raises:
        InvalidArgument("name"): another shape, a bad collection, or an id empty or longer than
            MAX_DOCUMENT_ID_CHARS.
    """
    head, separator, document_id = name.partition(_DOCUMENTS)
    if not separator or not document_id:
        raise InvalidArgument("name", f"{_short(name)!r} is not "
                              "collections/{collection}/documents/{document}")
    if len(document_id) > MAX_DOCUMENT_ID_CHARS:
        raise InvalidArgument("name", f"document id of {len(document_id)} characters; at most "
                              f"{MAX_DOCUMENT_ID_CHARS}")
    return collection_of(head), document_id


def document_name(collection: str, document_id: str) -> str:
    return f"{_COLLECTIONS}{collection}{_DOCUMENTS}{document_id}"


def page_size_of(page_size: int) -> int:
    """AIP-158: 0 means DEFAULT_PAGE_SIZE, above MAX_PAGE_SIZE means MAX_PAGE_SIZE.
    Raises InvalidArgument("page_size") when negative."""
    if page_size < 0:
        raise InvalidArgument("page_size", f"{page_size} is negative")
    return min(page_size or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)


def encode_page_token(parent: str, offset: str | None) -> str:
    """An opaque token for the page at store position `offset` of `parent`'s list ("" when
    there is no next page)."""
    if offset is None:
        return ""
    raw = json.dumps({"parent": parent, "offset": offset}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_page_token(token: str, parent: str) -> str | None:
    """The store position a token stands for (None for "": the first page).

    Raises:
        InvalidArgument("page_token"): not a token this service issued, or issued for another
            parent.
    """
    if not token:
        return None
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        fields = json.loads(raw)
        offset = str(uuid.UUID(fields["offset"]))
        issued_for = fields["parent"]
    except (binascii.Error, ValueError, TypeError, KeyError, UnicodeDecodeError):
        raise InvalidArgument("page_token", "malformed: pass the next_page_token of the "
                              "previous page unchanged") from None
    if issued_for != parent:
        raise InvalidArgument("page_token", f"was issued for {_short(str(issued_for))!r}, not "
                              f"{_short(parent)!r}")
    return offset


def document_proto(collection: str, head: DocumentHead) -> pb.Document:
    """The Document message of a document's head (update_time from its seq, microseconds)."""
    update_time = Timestamp()
    if head.seq:
        update_time.FromMicroseconds(head.seq)
    return pb.Document(name=document_name(collection, head.document_id),
                       document_id=head.document_id, title=head.title, source=head.source,
                       chunk_count=head.chunk_count, version=head.version,
                       fingerprint=head.fingerprint,
                       update_time=update_time if head.seq else None)


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
