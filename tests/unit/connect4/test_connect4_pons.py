"""The Pons benchmark reader: file order, limit, and a clear error on a malformed line."""

from __future__ import annotations

import pytest

from libs.connect4.pons import read_pons


def test_reads_pairs_in_order_with_a_limit(tmp_path):
    path = tmp_path / "Test"
    path.write_text("4453 -2\n\n11 18\n7 1\n")
    assert read_pons(path) == [("4453", -2), ("11", 18), ("7", 1)]
    assert read_pons(path, 2) == [("4453", -2), ("11", 18)]


def test_a_malformed_line_names_the_line(tmp_path):
    path = tmp_path / "Test"
    path.write_text("4453 -2\n4453\n")
    with pytest.raises(ValueError, match=":2:"):
        read_pons(path)
