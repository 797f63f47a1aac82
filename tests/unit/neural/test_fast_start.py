"""The fast start's parts: the ONNX graph cache, the partial registry read from it (what it
serves equals torch, what it leaves to the full load), when it applies, and that reading it
imports no torch."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from libs.connect4.board import Position, encode, legal_mask
from services.neural import fast_start, onnx_graphs
from services.neural.checkpoint import WEIGHTS_FILE, save_checkpoint
from services.neural.models.connect4_onnx import export_graph
from services.neural.models.connect4_pv import ARCHITECTURE, predict
from services.neural.models.router_gru import RouterGRU, RouterGRUConfig
from services.neural.onnx_graphs import GraphCache
from services.neural.registry import ModelRegistry
from services.neural.settings import NeuralSettings

SHA = "ab" * 32


def _models(tmp_path, tiny_model):
    """A models folder with a Connect Four network and a meta-controller."""
    root = tmp_path / "models"
    save_checkpoint(root / "connect4-pv", tiny_model, ARCHITECTURE, {"note": "tiny"})
    router = RouterGRU(RouterGRUConfig(hidden=4, bins=0, routes=("a", "b")))
    save_checkpoint(root / "router", router, "router_gru")
    return root


def _warm(root, cache: GraphCache) -> None:
    """Exports and caches every network's graph, as a start's `runners.make_runner` does."""
    for model in ModelRegistry.load(root, "cpu").list():
        if model.board is not None:
            cache.write(model.sha256, export_graph(model.module), model.parameter_count)


def test_the_cache_reads_what_it_wrote_and_nothing_else(tmp_path):
    cache = GraphCache(tmp_path / "graphs")
    assert cache.read(SHA) is None
    cache.write(SHA, b"graph bytes", 1234)
    assert cache.read(SHA) == (b"graph bytes", {"sha256": SHA, "graph_format":
                                                onnx_graphs.GRAPH_FORMAT, "parameter_count": 1234})
    assert cache.read("cd" * 32) is None
    files = list((tmp_path / "graphs").iterdir())
    assert not [p for p in files if p.name.startswith(".")]
    # Readable by every user: the image writes them as root, its services run as uid 10001.
    assert {p.stat().st_mode & 0o777 for p in files} == {0o644}


def test_a_graph_of_another_format_is_not_read(tmp_path, monkeypatch):
    cache = GraphCache(tmp_path)
    cache.write(SHA, b"old", 1)
    monkeypatch.setattr(onnx_graphs, "GRAPH_FORMAT", onnx_graphs.GRAPH_FORMAT + 1)
    assert cache.read(SHA) is None


def test_an_unwritable_cache_is_logged_not_raised(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    GraphCache(blocker / "graphs").write(SHA, b"graph", 1)
    assert "not written" in caplog.text


def test_the_partial_registry_serves_the_cached_networks_as_torch_does(tmp_path, tiny_model,
                                                                     positions):
    root = _models(tmp_path, tiny_model)
    cache = GraphCache(tmp_path / "graphs")
    assert fast_start.partial_registry(root, cache, 1) is None  # cold: the full load runs
    _warm(root, cache)
    registry, runners = fast_start.partial_registry(root, cache, 1)
    assert not registry.complete and [m.name for m in registry.list()] == ["connect4-pv"]
    model = registry.get("connect4-pv")
    full = ModelRegistry.load(root, "cpu").get("connect4-pv")
    assert (model.version, model.sha256, model.parameter_count, model.metadata, model.board) == (
        full.version, full.sha256, full.parameter_count, full.metadata, full.board)
    assert model.module is None
    boards = [Position.from_moves(moves) for moves in positions]
    planes = np.stack([encode(b) for b in boards]).astype(np.float32)
    legal = np.stack([legal_mask(b) for b in boards])
    for got, want in zip(runners[("connect4-pv", model.version)](planes, legal),
                         predict(tiny_model, planes, legal), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("damage", ["weights", "config"])
def test_a_damaged_checkpoint_leaves_the_start_to_the_full_load(tmp_path, tiny_model, damage):
    root = _models(tmp_path, tiny_model)
    cache = GraphCache(tmp_path / "graphs")
    _warm(root, cache)
    if damage == "weights":
        path = root / "router" / WEIGHTS_FILE
        path.write_bytes(path.read_bytes()[:-8] + b"\0" * 8)
    else:
        (root / "router" / "config.json").write_text("{")
    assert fast_start.partial_registry(root, cache, 1) is None


@pytest.mark.parametrize(("values", "expected"), [
    ({}, True), ({"device": "cpu"}, True), ({"device": "cuda"}, False),
    ({"pv_runtime": "torch"}, False), ({"fast_start": False}, False)])
def test_it_applies_on_the_cpu_with_onnxruntime_only(values, expected, monkeypatch, tmp_path):
    monkeypatch.setattr(fast_start, "GPU_DRIVER_PATHS", (tmp_path / "no-driver",))
    assert fast_start.applies(NeuralSettings(**values)) is expected


def test_auto_loads_everything_first_where_a_gpu_driver_is(monkeypatch, tmp_path):
    monkeypatch.setattr(fast_start, "GPU_DRIVER_PATHS", (tmp_path,))
    assert not fast_start.applies(NeuralSettings(device="auto"))
    assert fast_start.applies(NeuralSettings(device="cpu"))


def test_the_fast_start_imports_no_torch(tmp_path, tiny_model, repo_root):
    root = _models(tmp_path, tiny_model)
    cache_dir = tmp_path / "graphs"
    _warm(root, GraphCache(cache_dir))
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "import services.neural.main\n"
        "from services.neural import fast_start\n"
        "from services.neural.onnx_graphs import GraphCache\n"
        f"registry, _ = fast_start.partial_registry(Path({str(root)!r}), "
        f"GraphCache(Path({str(cache_dir)!r})), 1)\n"
        "print(len(registry), 'torch' in sys.modules)\n")
    result = subprocess.run([sys.executable, "-c", script], cwd=repo_root, capture_output=True,
                            text=True, timeout=120, check=True)
    assert result.stdout.split() == ["1", "False"], result.stderr
