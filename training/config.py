"""One rule every trainer keeps: it takes one frozen config dataclass, and writes that config whole
into the checkpoint's config.json, under the metadata key `CONFIG_KEY`, so a checkpoint says
exactly how it was trained. (The AlphaZero loop's config is its pydantic `AZSettings`, stored
whole under "settings" in each of its checkpoints.)"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

CONFIG_KEY = "trainer_config"
"""The metadata key of config.json that holds the trainer's config."""


def config_json(config: Any) -> dict[str, Any]:
    """The frozen dataclass `config` as a JSON-ready dict: nested dataclasses as dicts, paths as
    strings, tuples as lists.

    Raises:
        TypeError: `config` is not a dataclass instance.
    """
    if not dataclasses.is_dataclass(config) or isinstance(config, type):
        raise TypeError(f"{type(config).__name__} is not a dataclass instance")
    return json.loads(json.dumps(dataclasses.asdict(config), default=str))
