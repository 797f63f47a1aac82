"""Mixed precision of the served and trained networks: bf16 autocast on CUDA, float32 elsewhere.
Serving (`cuda_graphs`, `reasoning_segments`) and the trainers share it, so a model runs in the
precision it was trained in."""

from __future__ import annotations

import contextlib

import torch


def autocast(device: torch.device, cache_enabled: bool = True
             ) -> contextlib.AbstractContextManager:
    """bf16 autocast on CUDA; a no-op elsewhere (CPU runs stay float32).

    `cache_enabled=False` for a CUDA graph capture: autocast's cache of cast weights lives
    outside the graph's memory pool and is freed when the context exits, so a graph captured
    with it would replay reads of freed memory (PyTorch "CUDA Graphs" notes,
    `torch.cuda.make_graphed_callables`)."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=cache_enabled)
    return contextlib.nullcontext()
