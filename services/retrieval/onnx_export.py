"""Export of the packaged all-MiniLM-L6-v2 to an int8 ONNX graph (`mcts-mesh models
export-embedder`, run by `make setup`).

The graph takes `input_ids`, `attention_mask`, `token_type_ids` (int64 [batch, word pieces]) and
returns the sentence embedding (float32 [batch, 384]: BERT's last hidden states mean-pooled over
the attention mask, then L2-normalised, as sentence-transformers does). It is exported from the
packaged safetensors with `torch.onnx.export` (TorchScript exporter, opset 17), then quantised
with onnxruntime's `quantize_dynamic`: int8 weights, per output channel, on MatMul only (the
attention and feed-forward projections); quantising every op loses too much (cosine to the float
vectors 0.88-0.94). Nothing is downloaded. Beside the model, `<name>.json` records the digest of
the weights it came from, so a stale export is refused.
"""

from __future__ import annotations

import json
import os
import tempfile
import warnings
from pathlib import Path

QUANTIZATION = {"weight_type": "QInt8", "per_channel": True, "op_types": ["MatMul"]}
OPSET = 17


def manifest_path(onnx_path: Path) -> Path:
    return onnx_path.with_suffix(".json")


def check_manifest(onnx_path: Path) -> dict:
    """The export's manifest. Raises FileNotFoundError when the model or its manifest is
    missing, ValueError when it was exported from other weights than the packaged ones."""
    from services.retrieval.embedder import packaged_weights_digest

    manifest_file = manifest_path(onnx_path)
    if not onnx_path.is_file() or not manifest_file.is_file():
        raise FileNotFoundError(f"no ONNX export at {onnx_path}")
    manifest = json.loads(manifest_file.read_text())
    if manifest.get("weights_sha256") != packaged_weights_digest():
        raise ValueError(f"{onnx_path} was exported from other weights than the packaged ones")
    return manifest


def export_embedder(output: Path, force: bool = False) -> dict:
    """Writes the int8 ONNX encoder to `output` (and its manifest beside it) unless an export
    of the packaged weights is already there (or `force`). Returns the manifest.

    Takes about a minute on two CPU cores. Raises FileNotFoundError when the packaged weights
    are missing.
    """
    if not force:
        try:
            return check_manifest(output)
        except (FileNotFoundError, ValueError):
            pass
    import onnxruntime
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from transformers import AutoModel

    from services.retrieval.embedder import MODEL_NAME, model_path, packaged_weights_digest

    class SentenceEncoder(torch.nn.Module):
        def __init__(self, bert: torch.nn.Module) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask, token_type_ids):
            hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask,
                               token_type_ids=token_type_ids).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2, dim=1)

    bert = AutoModel.from_pretrained(str(model_path()), local_files_only=True)
    bert.eval()
    encoder = SentenceEncoder(bert)
    sample = torch.ones((2, 16), dtype=torch.int64)
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=output.parent) as work:
        float_path = Path(work) / "float.onnx"
        # The tracer warns that shapes become constants; the axes named dynamic stay dynamic (the
        # test of the encoder's vectors against torch's covers batches of mixed lengths).
        with torch.inference_mode(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                encoder, (sample, sample, torch.zeros_like(sample)), str(float_path),
                input_names=["input_ids", "attention_mask", "token_type_ids"],
                output_names=["sentence_embedding"],
                dynamic_axes={name: {0: "batch", 1: "pieces"}
                              for name in ("input_ids", "attention_mask", "token_type_ids")}
                | {"sentence_embedding": {0: "batch"}},
                opset_version=OPSET, dynamo=False,
            )
        quantized = Path(work) / "int8.onnx"
        quantize_dynamic(str(float_path), str(quantized), op_types_to_quantize=["MatMul"],
                         per_channel=True, weight_type=QuantType.QInt8)
        os.replace(quantized, output)
    manifest = {
        "model": MODEL_NAME,
        "weights_sha256": packaged_weights_digest(),
        "torch": torch.__version__,
        "onnxruntime": onnxruntime.__version__,
        "opset": OPSET,
        "quantization": QUANTIZATION,
    }
    manifest_path(output).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest
