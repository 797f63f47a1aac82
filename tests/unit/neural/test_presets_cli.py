"""`mcts-mesh models presets [--json]`: every preset with the parameter count of
`preset_parameter_counts()` (the papers' way of counting), its sizes and description."""

from __future__ import annotations

import json

from mcts_mesh.cli import main
from services.neural.models.presets import PRESETS, preset_parameter_counts


def test_presets_json_lists_every_preset_with_its_parameter_count(capsys):
    assert main(["models", "presets", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    counts = preset_parameter_counts()
    assert [row["name"] for row in rows] == list(PRESETS)
    for row in rows:
        preset = PRESETS[row["name"]]
        assert row["parameters"] == counts[row["name"]]
        assert row["architecture"] == preset.architecture
        assert (row["vocab_size"], row["seq_len"]) == (preset.config.vocab_size,
                                                       preset.config.seq_len)
        assert row["description"] == preset.description
    by_name = {row["name"]: row["parameters"] for row in rows}
    # The papers' sizes, within 1%: HRM 27.27M, TRM-MLP Sudoku 5.03M, TRM-Att 6.83M.
    for name, paper in (("hrm-paper-sudoku", 27.27e6), ("trm-mlp-paper-sudoku", 5.03e6),
                        ("trm-att-paper-maze", 6.83e6), ("trm-att-paper-arc", 6.83e6)):
        assert abs(by_name[name] - paper) / paper < 0.01


def test_presets_table_has_a_row_per_preset(capsys):
    assert main(["models", "presets"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["preset", "arch", "parameters"]
    assert len(lines) == 1 + len(PRESETS)
    assert any(line.startswith("hrm-paper-sudoku") and "27,275,266" in line for line in lines)
