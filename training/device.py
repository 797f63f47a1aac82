"""`--device auto|cpu|cuda` for every trainer, resolved in one place."""

from __future__ import annotations

import torch


def resolve_device(choice: str) -> str:
    """"cpu" or "cuda" for a trainer's `--device`.

    Args:
        choice: "auto" (CUDA when torch sees a GPU, else the CPU), "cpu" or "cuda".
    Raises:
        ValueError: an unknown choice, or "cuda" when torch sees no GPU (the message says so
            instead of failing later inside a kernel).
    """
    if choice == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if choice == "cpu":
        return "cpu"
    if choice == "cuda":
        if not torch.cuda.is_available():
            raise ValueError("--device cuda: torch sees no CUDA GPU on this machine "
                             f"(torch {torch.__version__}, built for CUDA "
                             f"{torch.version.cuda or 'none'}); use --device cpu or auto")
        return "cuda"
    raise ValueError(f"--device must be auto, cpu or cuda, not {choice!r}")
