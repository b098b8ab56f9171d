"""docs/seeds.md and tests/seeds agree: every row has its check, every check its row."""

from __future__ import annotations

from tests.seeds import test_seed000, test_seed001, test_seed002, test_seed003, test_seed004
from tests.seeds._docs import CHECKS, DOC, demos

MODULES = (test_seed000, test_seed001, test_seed002, test_seed003, test_seed004)


def test_every_documented_demo_has_one_check_and_every_check_a_row() -> None:
    ids = [row.id for row in demos()]
    assert len(ids) == len(set(ids)), "an id twice in docs/seeds.md"
    assert sorted(ids) == sorted(CHECKS), (
        f"rows without a check: {sorted(set(ids) - set(CHECKS))}; "
        f"checks without a row: {sorted(set(CHECKS) - set(ids))}"
    )
    assert {row.seed for row in demos()} == {"000", "001", "002", "003", "004"}
    assert all(m.__name__.startswith("tests.seeds.test_seed") for m in MODULES)


def test_the_page_states_each_convention_with_its_keyword() -> None:
    text = " ".join(DOC.read_text().split())
    for keyword in ('layout="interleaved"', "masked=0.0", "init_std=1.0", "embedded=True"):
        assert keyword in text, keyword
    assert "return_weights=True" in text and "PF.shift_matrix" in text
