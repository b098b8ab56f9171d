"""Findings: each verdict (reproduced / not reproduced / not measured) from hand-made rows."""

from __future__ import annotations

from typing import Any

import pytest

from posenc.lab.findings import check_findings, lm_loss_rise


def _rows(
    table: dict[tuple[str, str], tuple[float, float]], metric: str = "exact_match"
) -> list[dict[str, Any]]:
    """(encoding, task) -> (value at train length 8, value at 16)."""
    return [
        {
            "encoding": e,
            "task": t,
            "seed": 0,
            "train_max": 8,
            "length": n,
            "metric": metric,
            "value": v,
        }
        for (e, t), values in table.items()
        for n, v in zip((8, 16), values, strict=True)
    ]


def _status(rows: list[dict[str, Any]]) -> list[str]:
    return [f.status for f in check_findings(rows)]


def test_all_reproduced() -> None:
    rows = _rows(
        {
            ("learned", "sort"): (0.9, 0.0),
            ("nope", "sort"): (0.9, 0.5),
            ("rope", "sort"): (0.9, 0.1),
            ("randomized", "sort"): (0.9, 0.3),
        }
    )
    rows += _rows({("alibi", "lm"): (1.5, 1.55), ("rope", "lm"): (1.4, 3.0)}, "loss")
    assert _status(rows) == ["reproduced"] * 4
    evidence = check_findings(rows)[0].evidence
    assert "learned on sort: 0.00" in evidence and "training length: 0.90" in evidence


def test_not_reproduced() -> None:
    rows = _rows(
        {
            ("learned", "copy"): (1.0, 0.6),
            ("nope", "copy"): (1.0, 0.2),
            ("rope", "copy"): (1.0, 0.4),
            ("randomized", "copy"): (1.0, 0.3),
        }
    )
    rows += _rows({("alibi", "lm"): (1.5, 2.5), ("sinusoidal", "lm"): (1.5, 2.0)}, "loss")
    assert _status(rows) == ["not reproduced"] * 4


def test_not_measured_and_unlearned_tasks_do_not_count() -> None:
    # learned never solved sort in range: its failure beyond says nothing
    rows = _rows({("learned", "sort"): (0.1, 0.0), ("nope", "ascending"): (0.5, 0.5)})
    assert _status(rows) == ["not measured"] * 4


def test_lm_loss_rise_is_last_over_first_bucket() -> None:
    rows = _rows({("alibi", "lm"): (2.0, 3.0)}, "loss")
    assert lm_loss_rise(rows) == pytest.approx({"alibi": 1.5})
