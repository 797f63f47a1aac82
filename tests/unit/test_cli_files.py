"""A file named on the command line that is missing or unreadable is one line on stderr and exit
status 2, never a traceback."""

from __future__ import annotations

import pytest

from mcts_mesh.cli import main


@pytest.mark.parametrize("command", [["eval", "connect4"], ["eval", "connect4", "--batch"],
                                     ["runs", "submit"]])
@pytest.mark.parametrize("name", ["nosuchfile", "."])
def test_a_missing_or_unreadable_file_is_one_line(command, name, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main([*command, name]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"mcts-mesh: {name}: ")
    assert "Traceback" not in err
