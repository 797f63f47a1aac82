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
    max_wait_ms: float = 2.0
    """How long the first queued request waits for others to join its batch, in milliseconds."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """"auto" runs on CUDA when torch sees a GPU, else on the CPU."""
    torch_threads: int = 0
    """Intra-op CPU threads for torch; 0 keeps torch's default."""

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
