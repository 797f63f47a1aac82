"""The torch-free half of the checkpoint format (`services.neural.checkpoint`): file names, the
config.json check, the weights' SHA-256 and the pickle refusal. The fast start
(`services.neural.fast_start`) reads checkpoints with it before torch is imported."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from libs.errors import FailedPrecondition

WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
FORMAT = "mcts-mesh-checkpoint"
FORMAT_VERSION = 1
VERSION_LENGTH = 12
"""Hex digits of the weights' SHA-256 used as the model version."""

_PICKLE_PROTOCOL_MARK = b"\x80"
_ZIP_MARK = b"PK\x03\x04"  # torch.save's default format: a zip archive holding a pickle
_PICKLE_SUFFIXES = {".pt", ".pth", ".pkl", ".pickle", ".bin", ".ckpt"}


class CheckpointError(FailedPrecondition):
    """A checkpoint directory that cannot be loaded: a file missing, a pickle, corrupt weights
    (unreadable, a SHA-256 mismatch, NaN or infinite values), an unknown architecture, or a
    config that does not match the weights. The message names the path."""


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_config(directory: Path) -> dict[str, Any]:
    """The checked config.json of a checkpoint directory.

    Raises:
        CheckpointError: missing (naming any pickled checkpoint beside it), not JSON, not this
            format or version, or a field missing.
    """
    path = directory / CONFIG_FILE
    if not path.is_file():
        pickles = sorted(p.name for p in directory.glob("*") if p.suffix in _PICKLE_SUFFIXES)
        hint = (f"; {', '.join(pickles)} look like pickled checkpoints, which are refused "
                f"(save as {WEIGHTS_FILE} + {CONFIG_FILE})" if pickles else "")
        raise CheckpointError(f"{path}: missing{hint}")
    try:
        document = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{path}: not valid JSON ({error})") from error
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not a {FORMAT} config (\"format\" missing or different)")
    if document.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(f"{path}: format_version {document.get('format_version')!r}, "
                              f"expected {FORMAT_VERSION}")
    for key, kind in (("architecture", str), ("config", dict), ("metadata", dict),
                      ("weights", dict)):
        if not isinstance(document.get(key), kind):
            raise CheckpointError(f"{path}: field {key!r} missing or not a {kind.__name__}")
    return document


def check_not_pickle(path: Path) -> None:
    """Raises CheckpointError when `path` is a pickle or a torch.save archive."""
    with path.open("rb") as handle:
        head = handle.read(9)
    # A safetensors file is an 8-byte little-endian header size, then the JSON header. The size's
    # low bytes may look like a pickle's (a 1,408-byte header starts 80 05, pickle protocol 5's
    # mark), so the JSON brace decides first.
    if head[8:9] == b"{":
        return
    if head.startswith(_ZIP_MARK) or head.startswith(_PICKLE_PROTOCOL_MARK):
        raise CheckpointError(f"{path}: is a pickle or torch.save archive; pickled checkpoints are "
                              "refused (they can run code on load); save as safetensors")


def read_checked(directory: Path) -> tuple[dict[str, Any], Path, str]:
    """A checkpoint directory's config.json, its weights file and their SHA-256, checked without
    reading the weights as tensors.

    Raises:
        CheckpointError: the config fails `read_config`, the weights file is missing or a
            pickle, or its SHA-256 differs from the config's.
    """
    document = read_config(directory)
    weights = directory / str(document["weights"].get("file", WEIGHTS_FILE))
    if not weights.is_file():
        raise CheckpointError(f"{weights}: missing")
    check_not_pickle(weights)
    sha256 = file_sha256(weights)
    expected = document["weights"].get("sha256")
    if expected != sha256:
        raise CheckpointError(f"{weights}: SHA-256 {sha256[:VERSION_LENGTH]}... differs from "
                              f"{CONFIG_FILE}'s {str(expected)[:VERSION_LENGTH]}...; the weights "
                              "are corrupt or belong to another config")
    return document, weights, sha256
