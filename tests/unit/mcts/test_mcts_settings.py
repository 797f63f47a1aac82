from __future__ import annotations

import pytest
from pydantic import ValidationError

from services.mcts.settings import MctsSettings


def test_defaults_and_env_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    assert MctsSettings().port == 50052
    assert MctsSettings().exploration == 2.0
    monkeypatch.setenv("MCTS_PORT", "6000")
    monkeypatch.setenv("MCTS_DEFAULT_SIMULATIONS", "1234")
    settings = MctsSettings()
    assert (settings.port, settings.default_simulations) == (6000, 1234)


@pytest.mark.parametrize("field", [{"default_simulations": 0}, {"max_threads": 65},
                                   {"exploration": -0.5}, {"max_tree_nodes": 7},
                                   {"c_puct": -1.0}, {"c_puct": float("inf")},
                                   {"widening_alpha": 1.5}, {"dirichlet_epsilon": -0.1},
                                   {"neural_batch_size": 1025}])
def test_out_of_range_settings_are_refused(field: dict) -> None:
    with pytest.raises(ValidationError):
        MctsSettings(**field)
