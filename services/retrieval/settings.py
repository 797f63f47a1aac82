"""Settings of the retrieval service, read once from `RETRIEVAL_*` environment variables in
`main()`.

The store is embedded Qdrant under `data_dir` unless `qdrant_url` names a Qdrant server.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import SecretStr, model_validator
from pydantic_settings import SettingsConfigDict

from libs.settings import ServiceSettings


class RetrievalSettings(ServiceSettings):
    """The retrieval service's one frozen settings object (env prefix `RETRIEVAL_`)."""

    model_config = SettingsConfigDict(env_prefix="RETRIEVAL_", frozen=True, extra="ignore")

    port: int = 50054
    data_dir: Path = Path("var/retrieval")
    """Directory of the embedded store (one exclusive owner at a time); unused with `qdrant_url`."""
    qdrant_url: str | None = None
    """A Qdrant server, e.g. http://qdrant:6333; unset means the embedded store under `data_dir`."""
    qdrant_api_key: SecretStr | None = None
    """API key of that server, when it checks one."""
    chunk_size: int = 1000
    """Maximum characters per chunk (about 200-250 word pieces; the embedder reads 256)."""
    chunk_overlap: int = 200
    """Characters repeated between consecutive chunks of a document."""
    default_collection: str = "default"
    """Collection used when a request leaves `collection` empty."""
    embed_batch_size: int = 8
    """Texts per forward pass of the embedder (8: the ONNX encoder's passes over 256-piece
    abstracts were no slower than at 16 or 32 and keep their activations small)."""
    torch_threads: int = 2
    """Intra-op CPU threads of the encoder (torch or onnxruntime)."""
    embedder: Literal["onnx", "torch"] = "onnx"
    """Encoder: "onnx", the int8 export at `onnx_path` (torch when it is missing), or "torch"."""
    onnx_path: Path = Path("var/embedder/all-MiniLM-L6-v2-int8.onnx")
    """Where `mcts-mesh models export-embedder` (run by `make setup`) writes the int8 encoder (not
    under `models/`: the neural service serves every directory there as a checkpoint)."""
    ingest_workers: int = 1
    """Threads that embed and write ingested documents (a bounded pool off the event loop)."""
    query_workers: int = 2
    """Threads that embed queries and search (a second pool, so queries never wait for ingest)."""
    max_document_chars: int = 100_000
    """Longest document text accepted, in characters (about 25,000 words)."""
    max_documents_per_request: int = 10_000
    """Most documents in one IngestDocuments call or one message of a stream."""
    max_request_bytes: int = 4_000_000
    """Largest IngestDocuments request or stream message, serialized bytes (keep it below the
    server's gRPC message limit, 4 MiB)."""
    stream_batch_documents: int = 64
    """Documents of a stream embedded and written together (each document of a batch replaced
    on its own: whole at its old or whole at its new version, whatever happens)."""
    max_collections: int = 100
    """Most collections in the store; creating one more is RESOURCE_EXHAUSTED (each embedded
    collection holds about 50 memory maps, and the kernel's default limit is 65,530 per
    process)."""
    max_documents_per_collection: int = 100_000
    """Most documents in one collection; an ingest that would add more is RESOURCE_EXHAUSTED."""
    metrics_max_collection_labels: int = 20
    """Collections with their own `collection` label on /metrics; the rest share "other"."""
    fault_kill_after_writes: int | None = None
    """Fault injection for the crash tests only: SIGKILL this process once this many points have
    been written (`faults.KillAfterWrites`). Unset in every deployment."""

    @model_validator(mode="after")
    def _check(self) -> RetrievalSettings:
        if self.chunk_size < 1:
            raise ValueError("chunk_size must be at least 1")
        if not 0 <= self.chunk_overlap < (self.chunk_size + 1) // 2:
            raise ValueError("chunk_overlap must be in [0, chunk_size / 2)")
        if self.embed_batch_size < 1 or self.torch_threads < 1:
            raise ValueError("embed_batch_size and torch_threads must be at least 1")
        for name in ("ingest_workers", "query_workers", "max_document_chars",
                     "max_documents_per_request", "max_request_bytes", "stream_batch_documents",
                     "max_collections", "max_documents_per_collection",
                     "metrics_max_collection_labels"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        return self
