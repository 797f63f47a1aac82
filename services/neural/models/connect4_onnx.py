"""The Connect Four policy/value network run by onnxruntime on the CPU.

At batch 1, a forward pass of the shipped network (4 residual blocks, 48 channels) costs torch's
eager mode about 1.0 ms of CPU on this 2-core machine and onnxruntime about 0.15 ms; at batch 64,
14.8 ms against 7.5 ms (`bench/neural_runtime.py`). Every Connect Four request of the mesh makes
one such call, and PUCT searches make many, so on the CPU the neural service runs the network
through onnxruntime by default (`NeuralSettings.pv_runtime`). The graph is exported from the loaded
module in memory (`torch.onnx.export`, TorchScript exporter, opset 17), with the softmax over legal
columns inside it, so it returns exactly what `connect4_pv.predict` returns (within float32
rounding; `tests/unit/neural/test_connect4_onnx.py`). Nothing is written to disk or downloaded.
"""

from __future__ import annotations

import io
import warnings

import numpy as np
import torch

from services.neural.models.connect4_pv import PLANES, Connect4PV, PolicyValueProbabilities


class OnnxPolicyValue:
    """A `Connect4PV` exported to ONNX and run by an onnxruntime CPU session.

    Args:
        network: the loaded network (on the CPU, in eval mode); it is not changed.
        threads: onnxruntime intra-op threads; 0 keeps onnxruntime's default (one per core).
    Raises:
        RuntimeError: the export or the session creation failed (the caller falls back to torch).
    """

    def __init__(self, network: Connect4PV, threads: int = 1) -> None:
        import onnxruntime

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
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        self._session = onnxruntime.InferenceSession(graph.getvalue(), options,
                                                     providers=["CPUExecutionProvider"])

    def predict(self, planes: np.ndarray, legal: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """As `connect4_pv.predict`: planes float32 [B, 2, H, W], legal bool [B, W] (the network's
        board) -> policy float32 [B, W] (0 on illegal columns, rows sum to 1) and value float32
        [B] in [-1, 1]."""
        policy, value = self._session.run(
            None, {"planes": np.ascontiguousarray(planes, dtype=np.float32),
                   "legal": np.ascontiguousarray(legal, dtype=np.bool_)})
        return policy, value
