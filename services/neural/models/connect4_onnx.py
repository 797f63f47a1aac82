"""The Connect Four policy/value network run by onnxruntime on the CPU.

At batch 1, a forward pass of the shipped network (4 residual blocks, 48 channels) costs torch's
eager mode about 1.0 ms of CPU on this 2-core machine and onnxruntime about 0.15 ms; at batch 64,
14.8 ms against 7.5 ms (`bench/neural_runtime.py`). Every Connect Four request of the mesh makes
one such call, and PUCT searches make many, so on the CPU the neural service runs the network
through onnxruntime by default (`NeuralSettings.pv_runtime`). The graph is exported from the loaded
module in memory (`torch.onnx.export`, TorchScript exporter, opset 17), with the softmax over legal
columns inside it, so it returns exactly what `connect4_pv.predict` returns (within float32
rounding; `tests/unit/neural/test_connect4_onnx.py`). Nothing is downloaded; the service caches
the exported graphs on disk (`services.neural.onnx_graphs.GraphCache`) to start without torch.
"""

from __future__ import annotations

import io
import warnings

import torch

from services.neural.models.connect4_pv import PLANES, Connect4PV, PolicyValueProbabilities
from services.neural.onnx_graphs import OnnxGraphSession


def export_graph(network: Connect4PV) -> bytes:
    """`network` (on the CPU, in eval mode; not changed) exported to ONNX, with the softmax over
    legal columns inside (`services.neural.onnx_graphs.GRAPH_FORMAT` describes the graph).

    Raises:
        RuntimeError (or the exporter's errors): the installed torch cannot export it.
    """
    config = network.config
    planes = torch.zeros((1, PLANES, config.rows, config.columns), dtype=torch.float32)
    legal = torch.ones((1, config.policy_size), dtype=torch.bool)
    graph = io.BytesIO()
    batch = {0: "batch"}
    with torch.inference_mode(False), torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notices
        torch.onnx.export(PolicyValueProbabilities(network).eval(), (planes, legal), graph,
                          input_names=["planes", "legal"], output_names=["policy", "value"],
                          dynamic_axes={"planes": batch, "legal": batch, "policy": batch,
                                        "value": batch},
                          opset_version=17, dynamo=False)
    return graph.getvalue()


class OnnxPolicyValue(OnnxGraphSession):
    """A `Connect4PV` exported to ONNX (`export_graph`) and run by an onnxruntime CPU session;
    `graph` holds the exported bytes (what `onnx_graphs.GraphCache` stores).

    Args:
        network: the loaded network (on the CPU, in eval mode); it is not changed.
        threads: onnxruntime intra-op threads; 0 keeps onnxruntime's default (one per core).
    Raises:
        RuntimeError: the export or the session creation failed (the caller falls back to torch).
    """

    def __init__(self, network: Connect4PV, threads: int = 1) -> None:
        super().__init__(export_graph(network), threads)
