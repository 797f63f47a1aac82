"""The int8 ONNX encoder (the default) against the torch model it was exported from, on real
SciFact abstracts: the vectors must stay close, so quality cannot drop silently."""

from __future__ import annotations

import json

import numpy as np
import pytest

from services.retrieval.embedder import Embedder, OnnxEmbedder
from services.retrieval.onnx_export import check_manifest, export_embedder
from services.retrieval.settings import RetrievalSettings

ABSTRACTS = 64


@pytest.fixture(scope="module")
def onnx_path(tmp_path_factory):
    """`make setup`'s export when it is there and current, else a fresh one (about a minute)."""
    path = RetrievalSettings().onnx_path
    try:
        check_manifest(path)
        return path
    except (FileNotFoundError, ValueError):
        path = tmp_path_factory.mktemp("onnx") / "encoder.onnx"
        export_embedder(path)
        return path


@pytest.fixture(scope="module")
def texts(data_dir) -> list[str]:
    texts = []
    with (data_dir / "scifact-demo" / "corpus.jsonl").open() as lines:
        for line in lines:
            record = json.loads(line)
            # Title + abstract as ingest embeds them; lengths vary, so batches pad.
            texts.append(f"{record['title']} {record['text']}".strip())
            if len(texts) == ABSTRACTS:
                break
    texts.append("Short claim.")
    return texts


def test_int8_vectors_match_torch_on_scifact(onnx_path, texts):
    onnx = OnnxEmbedder(onnx_path, batch_size=16, threads=2).embed(texts)
    reference = Embedder.load(batch_size=16, torch_threads=2).embed(texts)
    assert onnx.shape == reference.shape == (len(texts), 384) and onnx.dtype == np.float32
    assert np.allclose(np.linalg.norm(onnx, axis=1), 1.0, atol=1e-4)
    cosine = (onnx * reference).sum(axis=1)
    assert cosine.mean() >= 0.99, cosine.mean()
    assert cosine.min() >= 0.97, cosine.min()
    # Order and batching barely change a text's vector (dynamic quantisation scales activations
    # per batch, so not bit for bit), and the right vector comes back in the right row.
    alone = OnnxEmbedder(onnx_path, batch_size=1, threads=1).embed(texts[:3][::-1])[::-1]
    assert ((alone * onnx[:3]).sum(axis=1) >= 0.99).all()


def test_a_stale_or_missing_export_is_refused(onnx_path, tmp_path):
    with pytest.raises(FileNotFoundError):
        OnnxEmbedder(tmp_path / "absent.onnx")
    copy = tmp_path / "stale.onnx"
    copy.write_bytes(onnx_path.read_bytes())
    manifest = json.loads(onnx_path.with_suffix(".json").read_text())
    copy.with_suffix(".json").write_text(json.dumps({**manifest, "weights_sha256": "0" * 64}))
    with pytest.raises(ValueError, match="other weights"):
        OnnxEmbedder(copy)
    # An export made by the unfused recipe (no "recipe" field) is refused too: make setup redoes it.
    copy.with_suffix(".json").write_text(json.dumps(
        {key: value for key, value in manifest.items() if key != "recipe"}))
    with pytest.raises(ValueError, match="recipe 1"):
        OnnxEmbedder(copy)


def test_the_export_fuses_every_attention_layer(onnx_path):
    manifest = check_manifest(onnx_path)
    assert manifest["recipe"] == 2
    assert manifest["fused"]["Attention"] == 6 and manifest["fused"]["SkipLayerNormalization"] == 12


def test_a_query_spreads_over_the_cores_only_when_nothing_else_embeds(onnx_path, texts):
    encoder = OnnxEmbedder(onnx_path, batch_size=8, threads=2)
    used, pending_query = [], [texts[-1]]

    class Recording:
        def __init__(self, name, session):
            self.name, self.session = name, session

        def run(self, outputs, feeds):
            used.append(self.name)
            if self.name == "wide" and pending_query:
                # A query arrives while the batch's pass runs.
                used.append(("query", encoder.embed_query(pending_query.pop())))
            return self.session.run(outputs, feeds)

    alone = encoder.embed_query(texts[-1])
    encoder._wide, encoder._narrow = (Recording("wide", encoder._wide),
                                      Recording("narrow", encoder._narrow))
    encoder.embed(texts[:2])  # one batch: runs on the spreading session
    assert used[0] == "wide" and used[1] == "narrow", used  # the query beside it: one thread
    assert float(used[2][1] @ alone) >= 0.9999
    used.clear()
    encoder.embed_query(texts[-1])
    assert used == ["wide"]  # alone: spread
