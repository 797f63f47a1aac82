"""Connect Four policy/value graphs in ONNX: the onnxruntime session that runs one, and the
on-disk cache of exported graphs that lets the service answer before torch is imported
(`services.neural.fast_start`). No torch here: the export is
`services.neural.models.connect4_onnx.export_graph`.

A cached graph is keyed by the SHA-256 of the checkpoint's weights (the checkpoint's version is its
prefix) and by `GRAPH_FORMAT`, which changes whenever the exported graph would change for the same
weights (the network's code, the exporter's settings): a cache written by another format is not
read. Each entry is two files, written atomically (a temporary file, then a rename), so a
concurrent or interrupted writer never leaves a half-written graph under the final name:
`<sha256>.v<GRAPH_FORMAT>.onnx` and a `.json` beside it with the facts the registry reports
(parameter count).
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime

log = logging.getLogger(__name__)

GRAPH_FORMAT = 1
"""Version of the exported graph (inputs planes float32 [B, 2, H, W] and legal bool [B, W];
outputs policy float32 [B, W] and value float32 [B]; TorchScript exporter, opset 17)."""


class OnnxGraphSession:
    """An onnxruntime CPU session over one exported policy/value graph.

    Args:
        graph: the ONNX model's bytes.
        threads: onnxruntime intra-op threads; 0 keeps onnxruntime's default (one per core).
    Raises:
        onnxruntime's errors (RuntimeError and its subclasses) when the bytes are not a graph it
        can run.
    """

    def __init__(self, graph: bytes, threads: int = 1) -> None:
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        self.graph = graph
        self._session = onnxruntime.InferenceSession(graph, options,
                                                     providers=["CPUExecutionProvider"])

    def predict(self, planes: np.ndarray, legal: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """As `connect4_pv.predict`: planes float32 [B, 2, H, W], legal bool [B, W] (the network's
        board) -> policy float32 [B, W] (0 on illegal columns, rows sum to 1) and value float32
        [B] in [-1, 1]."""
        policy, value = self._session.run(
            None, {"planes": np.ascontiguousarray(planes, dtype=np.float32),
                   "legal": np.ascontiguousarray(legal, dtype=np.bool_)})
        return policy, value


class GraphCache:
    """Exported graphs on disk, keyed by the weights' SHA-256 (module doc).

    Args:
        directory: created on the first write.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _paths(self, sha256: str) -> tuple[Path, Path]:
        stem = self.directory / f"{sha256}.v{GRAPH_FORMAT}"
        return stem.with_suffix(stem.suffix + ".onnx"), stem.with_suffix(stem.suffix + ".json")

    def read(self, sha256: str) -> tuple[bytes, dict[str, Any]] | None:
        """The graph and facts cached for these weights; None when there is none (or it cannot
        be read: the service then exports it again)."""
        graph_path, facts_path = self._paths(sha256)
        try:
            facts = json.loads(facts_path.read_text())
            graph = graph_path.read_bytes()
        except (OSError, ValueError):
            return None
        if not isinstance(facts, dict) or facts.get("sha256") != sha256:
            return None
        return graph, facts

    def write(self, sha256: str, graph: bytes, parameter_count: int) -> None:
        """Caches `graph` for these weights; a failure (a read-only disk) is logged, not
        raised: the cache only saves time."""
        graph_path, facts_path = self._paths(sha256)
        facts = {"sha256": sha256, "graph_format": GRAPH_FORMAT,
                 "parameter_count": parameter_count}
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            _write_atomically(graph_path, graph)
            _write_atomically(facts_path, json.dumps(facts).encode())
        except OSError as error:
            log.warning("ONNX graph cache %s not written: %s", self.directory, error)


def _write_atomically(path: Path, data: bytes) -> None:
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
        # mkstemp's 0600 would hide the graphs from the service's user where another user
        # wrote them (the image's build runs as root, its containers as uid 10001).
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
