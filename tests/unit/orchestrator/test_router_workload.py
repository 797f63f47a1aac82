"""The router's labelled workload: the train and test splits of Pons' files never share a position,
`max_plies` keeps only the sampled positions with fewer moves played, and the private mesh serves
on the ports it is given."""

from __future__ import annotations

import random

import pytest

from training.router.workload import PONS_FILES, Mesh, mixed_positions, split_of


@pytest.fixture
def pons(tmp_path):
    """Six files in Pons' format ("<moves> <score>"), 60 distinct positions each, 2-29 plies."""
    rng = random.Random(7)
    for index, name in enumerate(PONS_FILES):
        lines = set()
        while len(lines) < 60:
            plies = rng.randint(2, 29)
            # Only the move strings' hash and length matter here, not that they are legal.
            lines.add(f"{index + 1}{''.join(str(rng.randint(1, 7)) for _ in range(plies - 1))}")
        (tmp_path / name).write_text("".join(f"{moves} 0\n" for moves in sorted(lines)))
    return tmp_path


def test_the_splits_are_disjoint_and_follow_the_hash(pons):
    train = mixed_positions("train", 100, 0, pons)
    test = mixed_positions("test", 100, 0, pons)
    assert train and test
    assert not {p.moves for p in train} & {p.moves for p in test}
    assert all(split_of(p.moves) == "train" for p in train)
    assert all(split_of(p.moves) == "test" for p in test)
    assert len(train) + len(test) == 6 * 60


def test_max_plies_keeps_the_sampled_positions_below_it(pons):
    sample = mixed_positions("train", 10, 3, pons)
    early = mixed_positions("train", 10, 3, pons, max_plies=12)
    assert sorted(early, key=str) == sorted((p for p in sample if len(p.moves) < 12), key=str)
    assert len(early) < len(sample)


def test_a_bad_split_is_refused(pons):
    with pytest.raises(ValueError):
        mixed_positions("validation", 10, 0, pons)


def test_the_mesh_takes_consecutive_ports_from_its_base_or_free_ones(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.mkdtemp", lambda prefix: str(tmp_path))  # its log folder
    mesh = Mesh({"rules": {}, "learned": {}}, port_base=21400)
    assert [mesh._port(offset) for offset in range(4)] == ["21400", "21401", "21402", "21403"]
    assert Mesh({"rules": {}})._port(1) == "0"
    with pytest.raises(ValueError, match="port_base"):
        Mesh({"rules": {}}, port_base=65534)
