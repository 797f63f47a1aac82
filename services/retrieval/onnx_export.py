"""Export of the packaged all-MiniLM-L6-v2 to an int8 ONNX graph (`mcts-mesh models
export-embedder`, run by `make setup`).

The graph takes `input_ids`, `attention_mask`, `token_type_ids` (int64 [batch, word pieces]) and
returns the sentence embedding (float32 [batch, 384]: BERT's last hidden states mean-pooled over
the attention mask, then L2-normalised, as sentence-transformers does). It is exported from the
packaged safetensors with `torch.onnx.export` (TorchScript exporter, opset 17), then quantised
with onnxruntime's `quantize_dynamic`: int8 weights, per output channel, on MatMul only (the
attention and feed-forward projections); quantising every op loses too much (cosine to the float
vectors 0.88-0.94). Nothing is downloaded. Beside the model, `<name>.json` records the digest of
the weights it came from and the recipe, so a stale export is refused.

Between export and quantisation, onnxruntime's transformer optimiser
(`onnxruntime.transformers.optimizer`, model type "bert") fuses each layer's attention into one
`Attention` op, the embeddings' sum and layer norm into `EmbedLayerNormalization`, residual adds
with layer norms into `SkipLayerNormalization` and bias + GELU into `BiasGelu`; the quantiser then
makes `QAttention` (int8 Q/K/V projection) and int8 MatMuls of the rest. The attention is exported
in its "eager" form (explicit softmax over masked scores), the pattern the optimiser recognises;
the SDPA form exports as a Where/IsNaN subgraph that the optimiser leaves alone and that took
about a fifth of the unfused graph's kernel time on 256-piece batches (onnxruntime's profiler).
"""

from __future__ import annotations

import json
import os
import tempfile
import warnings
from pathlib import Path

import onnx
import onnxruntime
import torch
from onnxruntime.quantization import QuantType, quantize_dynamic
from onnxruntime.transformers import optimizer
from transformers import AutoModel

from services.retrieval.packaged_model import (
    MODEL_NAME,
    OPSET,
    QUANTIZATION,
    RECIPE,
    check_manifest,
    manifest_path,
    model_path,
    packaged_weights_digest,
)

__all__ = ["check_manifest", "export_embedder"]

HEADS, HIDDEN = 12, 384
"""all-MiniLM-L6-v2's attention heads and hidden size (the optimiser's fusion needs them)."""
INPUTS = ("input_ids", "attention_mask", "token_type_ids")


class SentenceEncoder(torch.nn.Module):
    """BERT's last hidden states mean-pooled over the attention mask, then L2-normalised
    (sentence-transformers' pooling): int64 [B, P] x3 -> float32 [B, 384]."""

    def __init__(self, bert: torch.nn.Module) -> None:
        super().__init__()
        self.bert = bert

    def forward(self, input_ids, attention_mask, token_type_ids):
        hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask,
                           token_type_ids=token_type_ids).last_hidden_state
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, p=2, dim=1)


def export_embedder(output: Path, force: bool = False) -> dict:
    """Writes the int8 ONNX encoder to `output` (and its manifest beside it) unless an export
    of the packaged weights is already there (or `force`). Returns the manifest.

    Takes about a minute on two CPU cores. Raises FileNotFoundError when the packaged weights
    are missing, RuntimeError when the optimiser did not fuse every layer's attention (another
    onnxruntime or transformers version exporting another pattern).
    """
    if not force:
        try:
            return check_manifest(output)
        except (FileNotFoundError, ValueError):
            pass
    bert = AutoModel.from_pretrained(str(model_path()), local_files_only=True,
                                     attn_implementation="eager")
    bert.eval()
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=output.parent) as work:
        float_path, fused_path = Path(work) / "float.onnx", Path(work) / "fused.onnx"
        quantized = Path(work) / "int8.onnx"
        _export_float(SentenceEncoder(bert), float_path)
        fusions = _fuse(float_path, fused_path, bert.config.num_hidden_layers)
        _quantize(fused_path, quantized)
        os.replace(quantized, output)
    manifest = {
        "model": MODEL_NAME,
        "weights_sha256": packaged_weights_digest(),
        "torch": torch.__version__,
        "onnxruntime": onnxruntime.__version__,
        "opset": OPSET,
        "recipe": RECIPE,
        "fused": fusions,
        "quantization": QUANTIZATION,
    }
    manifest_path(output).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def _export_float(encoder: SentenceEncoder, path: Path) -> None:
    sample = torch.ones((2, 16), dtype=torch.int64)
    # The tracer warns that shapes become constants; the axes named dynamic stay dynamic (the
    # test of the encoder's vectors against torch's covers batches of mixed lengths).
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            encoder, (sample, sample, torch.zeros_like(sample)), str(path),
            input_names=list(INPUTS), output_names=["sentence_embedding"],
            dynamic_axes={name: {0: "batch", 1: "pieces"} for name in INPUTS}
            | {"sentence_embedding": {0: "batch"}},
            opset_version=OPSET, dynamo=False,
        )


def _fuse(float_path: Path, fused_path: Path, layers: int) -> dict[str, int]:
    """Fuses each layer's attention (and the layer norms, GELUs); returns the fused op counts.

    Raises:
        RuntimeError: not every layer's attention was fused.
    """
    fused = optimizer.optimize_model(str(float_path), model_type="bert", num_heads=HEADS,
                                     hidden_size=HIDDEN, opt_level=1)
    fusions = {op: count for op, count in fused.get_fused_operator_statistics().items()
               if count}
    if fusions.get("Attention", 0) != layers:
        raise RuntimeError(f"the optimiser fused {fusions.get('Attention', 0)} of {layers} "
                           f"attention layers ({fusions}); the export's pattern changed")
    fused.save_model_to_file(str(fused_path))
    return fusions


def _quantize(fused_path: Path, quantized: Path) -> None:
    # The fused ops come from onnxruntime's domain, where shape inference gives no types: their
    # outputs are float32.
    quantize_dynamic(str(fused_path), str(quantized),
                     op_types_to_quantize=QUANTIZATION["op_types"], per_channel=True,
                     weight_type=QuantType.QInt8,
                     extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
