"""The architectures the neural service can rebuild from a checkpoint's config alone.

Each entry maps the `architecture` string written in a checkpoint's config.json to the config
dataclass and the module class; one file per model beside this one.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from services.neural.models import connect4_pv, hrm, router_gru, router_text, trm


@dataclass(frozen=True)
class Architecture:
    """How to rebuild a model: `config_type(**fields)`, then `model_type(config)`."""

    name: str
    config_type: type
    model_type: type[nn.Module]


ARCHITECTURES: dict[str, Architecture] = {
    connect4_pv.ARCHITECTURE: Architecture(
        connect4_pv.ARCHITECTURE, connect4_pv.Connect4PVConfig, connect4_pv.Connect4PV
    ),
    hrm.ARCHITECTURE: Architecture(hrm.ARCHITECTURE, hrm.HRMConfig, hrm.HRM),
    trm.ARCHITECTURE: Architecture(trm.ARCHITECTURE, trm.TRMConfig, trm.TRM),
    router_gru.ARCHITECTURE: Architecture(
        router_gru.ARCHITECTURE, router_gru.RouterGRUConfig, router_gru.RouterGRU
    ),
    router_text.ARCHITECTURE: Architecture(
        router_text.ARCHITECTURE, router_text.RouterTextConfig, router_text.RouterText
    ),
}
