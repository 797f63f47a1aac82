"""Where data sets are found: the evaluation folder first, then the repository's data/."""

from __future__ import annotations

import pytest

from libs.data import REPO_DATA, MissingDataset, dataset, evaluation_dir


def test_the_repository_ships_the_sets_the_demo_reads():
    for name in ("connect4-pons", "scifact-demo"):
        folder = dataset(name, REPO_DATA)
        assert (folder / "README.md").is_file()
    assert len(list((REPO_DATA / "connect4-pons").glob("Test_L*_R*"))) == 6
    assert (REPO_DATA / "scifact-demo" / "corpus.jsonl").read_text().count("\n") == 306


def test_the_evaluation_folder_wins_over_the_repository_copy(tmp_path):
    (tmp_path / "connect4-pons").mkdir()
    assert dataset("connect4-pons", tmp_path) == tmp_path / "connect4-pons"


def test_a_set_in_neither_folder_is_one_line_naming_it_and_the_setting(tmp_path):
    with pytest.raises(MissingDataset) as raised:
        dataset("gsm8k", tmp_path)
    message = str(raised.value)
    assert "\n" not in message
    assert "'gsm8k'" in message and str(tmp_path) in message and "MCTS_MESH_DATA_DIR" in message


def test_the_setting_names_the_evaluation_folder(tmp_path):
    assert evaluation_dir({"MCTS_MESH_DATA_DIR": str(tmp_path)}) == tmp_path
    assert evaluation_dir({}).name == "data"
