"""Settings of the neural service (env prefix `NEURAL_`), read once in `main()` and passed down."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import model_validator
from pydantic_settings import SettingsConfigDict

from libs.settings import ServiceSettings

REPO_ROOT = Path(__file__).resolve().parents[2]


class NeuralSettings(ServiceSettings):
    """The neural service's one frozen settings object."""

    model_config = SettingsConfigDict(
        env_prefix="NEURAL_", frozen=True, extra="ignore", populate_by_name=True
    )

    port: int = 50053

    models_dir: Path = Path("models")
    """Folder of checkpoint directories (one per model, named after it); a relative path is taken
    from the working directory when it exists there, else from the repository root (where the
    committed checkpoints live)."""
    default_model: str = "connect4-pv"
    """Model used when a request leaves `model` empty."""
    max_batch: int = 256
    """Most positions in one forward pass."""
    max_wait_ms: float = 0.0
    """How long the first queued request waits for others to join its batch, in milliseconds.
    0 (the default) batches eagerly: a batch runs as soon as the worker is free, and what queued
    while it ran forms the next one. A wait made every batch of a lone caller that long: a PUCT
    search of 800 simulations through the mesh (52 leaf batches) took 351-365 ms with 2 ms
    against 206-237 ms with 0 (loaded 2-core machine), and on the idle machine 256
    single-position callers got 1,372 against 1,453 positions/s, one caller 4.54 against 1.67 ms
    (`bench/batcher.py`, 2026-11-26). A wait can still pay where many
    independent callers send one row each to a device that wants full batches (a GPU)."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """"auto" runs on CUDA when torch sees a GPU, else on the CPU."""
    pv_runtime: Literal["onnxruntime", "torch"] = "onnxruntime"
    """What runs the Connect Four policy/value networks on the CPU: onnxruntime (an export made
    in memory when a model loads; about 7x less CPU than torch at batch 1, 2x at batch 64) or
    torch. On a GPU they always run in torch."""
    fast_start: bool = True
    """On the CPU, report SERVING as soon as the Connect Four networks run from their cached ONNX
    graphs, before torch is imported, and load every checkpoint with torch in the background
    (`services/neural/fast_start.py`); requests for other models wait for them. Off: load
    everything, then serve."""
    graph_cache_dir: Path = Path("var/neural/onnx-graphs")
    """Where exported ONNX graphs of the Connect Four networks are cached, keyed by the weights'
    SHA-256 (relative to the working directory); written when a start exports them."""
    cuda_graphs: bool = True
    """On a GPU, run the Connect Four policy/value networks and the HRM/TRM segments by replaying
    CUDA graphs, one per padded batch size (`services/neural/cuda_graphs.py`), instead of
    launching their kernels one by one from Python. Ignored on the CPU."""
    torch_threads: int = 1
    """Intra-op CPU threads for torch (and onnxruntime); 0 keeps their default (one per core).
    One by default: the neural service shares the machine's cores with the other four services,
    and torch's intra-op threads then wait on each other (on the 2-core machine, a 6x6 Sudoku TRM
    forward at batch 1 took 0.1 s with one thread and 0.9-3.7 s with two while the other services
    were busy; a Connect Four request cost the neural service 1.5 ms of CPU instead of 2.6 ms).
    Give it the cores it owns where it has them to itself (a Kubernetes Pod's CPU limit, a GPU
    node)."""

    @model_validator(mode="after")
    def _ranges(self) -> NeuralSettings:
        if self.max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        if self.max_wait_ms < 0:
            raise ValueError("max_wait_ms must be >= 0")
        if self.torch_threads < 0:
            raise ValueError("torch_threads must be >= 0")
        return self

    def resolved_models_dir(self) -> Path:
        """`models_dir` as an absolute path (see the field's rule for relative paths)."""
        if self.models_dir.is_absolute() or self.models_dir.exists():
            return self.models_dir.resolve()
        return REPO_ROOT / self.models_dir
