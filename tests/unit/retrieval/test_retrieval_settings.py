"""Settings come from RETRIEVAL_* variables; `RETRIEVAL_QDRANT_URL` selects the server store."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from qdrant_client import QdrantClient

from services.retrieval import main as retrieval_main
from services.retrieval.edge_store import EdgeStore
from services.retrieval.main import open_store
from services.retrieval.server_store import ServerStore
from services.retrieval.settings import RetrievalSettings


def test_defaults_and_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("RETRIEVAL_QDRANT_URL", raising=False)
    defaults = RetrievalSettings()
    assert (defaults.port, str(defaults.data_dir), defaults.qdrant_url) == (
        50054, "var/retrieval", None)
    monkeypatch.setenv("RETRIEVAL_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("RETRIEVAL_CHUNK_SIZE", "500")
    monkeypatch.setenv("RETRIEVAL_QDRANT_API_KEY", "s3cret")
    settings = RetrievalSettings()
    assert settings.data_dir == tmp_path and settings.chunk_size == 500
    assert "s3cret" not in str(settings.masked())


def test_store_choice(monkeypatch, tmp_path):
    monkeypatch.delenv("RETRIEVAL_QDRANT_URL", raising=False)
    store = open_store(RetrievalSettings(data_dir=tmp_path))
    assert isinstance(store, EdgeStore)
    store.close()

    connected = []

    def client(**kwargs):
        connected.append(kwargs)
        return QdrantClient(":memory:")

    monkeypatch.setattr(retrieval_main, "QdrantClient", client)
    monkeypatch.setenv("RETRIEVAL_QDRANT_URL", "http://qdrant:6333")
    monkeypatch.setenv("RETRIEVAL_QDRANT_API_KEY", "s3cret")
    store = open_store(RetrievalSettings(data_dir=tmp_path / "unused"))
    assert isinstance(store, ServerStore)
    assert connected == [{"url": "http://qdrant:6333", "api_key": "s3cret"}]
    assert not (tmp_path / "unused").exists()
    store.close()


def test_overlap_must_stay_below_half_the_chunk():
    with pytest.raises(ValidationError):
        RetrievalSettings(chunk_size=100, chunk_overlap=60)


@pytest.mark.parametrize("name", ["max_document_chars", "max_documents_per_request",
                                  "max_request_bytes", "stream_batch_documents",
                                  "ingest_workers", "query_workers"])
def test_limits_and_pools_must_be_positive(name):
    with pytest.raises(ValidationError, match=name):
        RetrievalSettings(**{name: 0})


def test_encoder_choice(monkeypatch):
    monkeypatch.setenv("RETRIEVAL_EMBEDDER", "torch")
    assert RetrievalSettings().embedder == "torch"
    monkeypatch.setenv("RETRIEVAL_EMBEDDER", "tensorflow")
    with pytest.raises(ValidationError):
        RetrievalSettings()
