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

QUANTIZATION = {"weight_type": "QInt8", "per_channel": True, "op_types": ["MatMul", "Attention"]}
OPSET = 17
RECIPE = 2
"""Version of the export recipe: 1 quantised the unfused graph; 2 fuses attention first. An export
made by another recipe is refused (and `make setup` re-exports)."""
HEADS, HIDDEN = 12, 384
"""all-MiniLM-L6-v2's attention heads and hidden size (the optimiser's fusion needs them)."""


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
    if manifest.get("recipe", 1) != RECIPE:
        raise ValueError(f"{onnx_path} was made by export recipe {manifest.get('recipe', 1)}, "
                         f"not {RECIPE}; run `mcts-mesh models export-embedder` again")
    return manifest


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
    import onnx
    import onnxruntime
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.transformers import optimizer
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

    bert = AutoModel.from_pretrained(str(model_path()), local_files_only=True,
                                     attn_implementation="eager")
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
        fused_path = Path(work) / "fused.onnx"
        fused = optimizer.optimize_model(str(float_path), model_type="bert", num_heads=HEADS,
                                         hidden_size=HIDDEN, opt_level=1)
        fusions = {op: count for op, count in fused.get_fused_operator_statistics().items()
                   if count}
        layers = bert.config.num_hidden_layers
        if fusions.get("Attention", 0) != layers:
            raise RuntimeError(f"the optimiser fused {fusions.get('Attention', 0)} of {layers} "
                               f"attention layers ({fusions}); the export's pattern changed")
        fused.save_model_to_file(str(fused_path))
        quantized = Path(work) / "int8.onnx"
        # The fused ops come from onnxruntime's domain, where shape inference gives no types:
        # their outputs are float32.
        quantize_dynamic(str(fused_path), str(quantized),
                         op_types_to_quantize=QUANTIZATION["op_types"], per_channel=True,
                         weight_type=QuantType.QInt8,
                         extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
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
