"""Findings: each verdict (reproduced / not reproduced / inconclusive) on hand-made runs, the
runs that did not learn left out, never a best-of-group comparison."""

from __future__ import annotations

from typing import Any

import pytest

from posenc.lab.findings import check_findings, loss_rise
from posenc.lab.results import Run, learned, panels

SEEDS = (0, 1, 2)


def _run(
    enc: str,
    task: str,
    seed: int,
    values: dict[int, float],
    *,
    gate: bool | None = None,
    metric: str = "exact_match",
    train_len: tuple[int, int] = (1, 8),
    pe_config: dict[str, Any] | None = None,
) -> Run:
    """A stored run of ``enc`` on ``task`` with ``metric`` at each length of ``values``."""
    cfg = {
        "encoding": enc,
        "seed": seed,
        "pe_config": pe_config or {},
        "task": {"name": task, "train_len": list(train_len), "eval_lens": sorted(values)},
    }
    metrics = {(metric, n): v for n, v in values.items()}
    return Run(f"{enc}-{task}-{seed}", enc, task, seed, train_len[1], metrics, cfg, gate)


def _copy(enc: str, beyond: list[float], task: str = "copy_rep", **kw: Any) -> list[Run]:
    """One run per seed: 1.0 at the training length 8, ``beyond[seed]`` at 16."""
    return [_run(enc, task, s, {8: 1.0, 16: b}, **kw) for s, b in zip(SEEDS, beyond, strict=True)]


def _finding(runs: list[Run], index: int) -> list[tuple[str, str]]:
    return [(v.task, v.verdict) for v in check_findings(panels(runs))[index].verdicts]


def test_learned_prefers_the_stored_gate_and_falls_back_to_the_training_length() -> None:
    assert learned({"passed_gate": 0}) is False and learned({"passed_gate": 1}) is True
    low = _run("rope", "copy_rep", 0, {8: 0.5, 16: 0.0})
    assert not learned(low)
    assert learned(_run("rope", "copy_rep", 0, {8: 0.5, 16: 0.0}, gate=True))  # the gate wins
    assert learned(_run("rope", "copy_rep", 0, {4: 1.0, 8: 0.995, 16: 0.0}))
    assert not learned(_run("rope", "copy_rep", 0, {4: 0.9, 8: 1.0, 16: 1.0}))  # every length
    assert learned(_run("alibi", "lm", 0, {64: 2.0, 128: 9.0}, metric="loss", train_len=(64, 64)))
    with pytest.raises(ValueError, match="passed_gate"):
        learned({"encoding": "rope", "value": 1.0})


def test_cells_leave_out_runs_that_did_not_learn_and_count_them() -> None:
    runs = _copy("rope", [0.8, 0.4, 0.6])
    runs[1] = _run("rope", "copy_rep", 1, {8: 0.3, 16: 0.9})  # failed the gate
    (panel,) = panels(runs)
    cell = panel.cell("rope", 16)
    assert (cell.n_learned, cell.n_total, cell.dnl_seeds) == (2, 3, (1,))
    assert cell.interval is not None and cell.interval.mean == pytest.approx(0.7)


def test_kazemnejad_every_pair_separated_is_reproduced() -> None:
    runs = _copy("nope", [0.9, 0.95, 0.92]) + _copy("t5", [0.8, 0.85, 0.82])
    runs += _copy("rope", [0.1, 0.2, 0.15]) + _copy("alibi", [0.0, 0.05, 0.0])
    assert _finding(runs, 1) == [("copy_rep", "reproduced")]


def test_kazemnejad_one_pair_the_other_way_is_not_reproduced() -> None:
    """nope far ahead of everything (the best of each group would agree), t5 below alibi."""
    runs = _copy("nope", [0.9, 0.95, 0.92]) + _copy("t5", [0.0, 0.05, 0.02])
    runs += _copy("rope", [0.1, 0.2, 0.15]) + _copy("alibi", [0.3, 0.35, 0.4])
    (verdict,) = check_findings(panels(runs))[1].verdicts
    assert verdict.verdict == "not reproduced"
    assert "alibi ahead of t5" in verdict.reason
    assert "nope 0.92 [0.90, 0.95] (3 of 3 learned)" in verdict.numbers


def test_kazemnejad_overlapping_intervals_are_inconclusive() -> None:
    runs = _copy("nope", [0.9, 0.5, 0.7]) + _copy("rope", [0.6, 0.2, 0.4])
    (verdict,) = check_findings(panels(runs))[1].verdicts
    assert verdict.verdict == "inconclusive" and "nope ~ rope" in verdict.reason


def test_runs_that_did_not_learn_never_decide_a_finding() -> None:
    """rope never learned copy_rep; its high beyond-training numbers must not count against
    the claim: it is left out and named."""
    runs = _copy("nope", [0.9, 0.95, 0.92]) + _copy("alibi", [0.0, 0.1, 0.05])
    runs += [_run("rope", "copy_rep", s, {8: 0.5, 16: 1.0}) for s in SEEDS]
    (verdict,) = check_findings(panels(runs))[1].verdicts
    assert verdict.verdict == "reproduced"
    assert "left out" in verdict.reason and "rope" in verdict.reason
    assert "rope did not learn (0 of 3 learned)" in verdict.numbers


def test_learned_absolute_verdicts() -> None:
    flat = _copy("learned", [0.0, 0.05, 0.0])
    high = _copy("learned", [0.4, 0.5, 0.6], task="copy")
    mixed = _copy("learned", [0.0, 0.3, 0.1], task="sort")
    assert sorted(_finding(flat + high + mixed, 0)) == [
        ("copy", "not reproduced"),
        ("copy_rep", "reproduced"),
        ("sort", "inconclusive"),
    ]


def test_randomized_is_paired_per_task_against_its_base() -> None:
    better = _copy("randomized", [0.6, 0.7, 0.65]) + _copy("rope", [0.3, 0.4, 0.35])
    worse = _copy("randomized", [0.1, 0.2, 0.1], task="sort") + _copy(
        "rope", [0.4, 0.5, 0.45], task="sort"
    )
    noisy = _copy("randomized", [0.1, 0.9, 0.5], task="copy") + _copy(
        "rope", [0.5, 0.5, 0.5], task="copy"
    )
    base = {"base_encoding": "learned"}  # pairs with learned, not rope
    other = _copy("randomized", [0.6, 0.7, 0.8], task="reverse", pe_config=base)
    other += _copy("learned", [0.0, 0.0, 0.1], task="reverse")
    assert sorted(_finding(better + worse + noisy + other, 2)) == [
        ("copy: randomized vs rope", "inconclusive"),
        ("copy_rep: randomized vs rope", "reproduced"),
        ("reverse: randomized vs learned", "reproduced"),
        ("sort: randomized vs rope", "not reproduced"),
    ]


def _lm(enc: str, rises: list[float]) -> list[Run]:
    return [
        _run(enc, "lm", s, {64: 2.0, 512: 2.0 * r}, metric="loss", train_len=(64, 64))
        for s, r in zip(SEEDS, rises, strict=True)
    ]


@pytest.mark.parametrize(
    ("alibi", "rope", "verdict"),
    [
        ([1.0, 1.02, 1.05], [1.5, 1.8, 2.0], "reproduced"),
        ([1.3, 1.4, 1.5], [1.8, 2.0, 2.2], "not reproduced"),  # rises itself
        ([1.0, 1.02, 1.05], [0.9, 0.95, 0.97], "not reproduced"),  # rope flatter
        ([1.0, 1.05, 1.2], [1.5, 1.8, 2.0], "inconclusive"),  # reaches above x1.10
        ([1.0, 1.1, 1.3], [1.2, 1.25, 1.6], "inconclusive"),
    ],
)
def test_press_alibi_flat_lm_loss(alibi: list[float], rope: list[float], verdict: str) -> None:
    assert _finding(_lm("alibi", alibi) + _lm("rope", rope), 3) == [("lm", verdict)]


def test_findings_without_their_encodings_have_no_verdicts() -> None:
    findings = check_findings(panels(_copy("fire", [0.5, 0.6, 0.7])))
    assert [f.verdicts for f in findings] == [()] * 9
    assert all(f.missing and f.rule for f in findings)


def test_loss_rise_is_last_over_first_bucket() -> None:
    run = _run("alibi", "lm", 0, {64: 2.0, 128: 2.5, 512: 3.0}, metric="loss", train_len=(64, 64))
    assert loss_rise(run) == pytest.approx(1.5)


def _grid(enc: str, beyond: list[float], gate: bool | None = None) -> list[Run]:
    """grid_cross runs trained on 8x8: 1.0 at 8, ``beyond[seed]`` at 12 and at 16."""
    return [
        _run(enc, "grid_cross", s, {8: 1.0, 12: b, 16: b}, train_len=(8, 8), gate=gate)
        for s, b in zip(SEEDS, beyond, strict=True)
    ]


@pytest.mark.parametrize(
    ("mixed", "verdict", "why"),
    [
        ([0.9, 0.92, 0.95], "reproduced", "all 3 pairs separated"),
        ([0.5, 0.52, 0.55], "not reproduced", "rope_2d ahead of rope_mixed"),
        ([0.6, 0.7, 0.95], "inconclusive", "rope_mixed ~ rope_2d"),
    ],
)
def test_heo_rope_mixed_against_axial_and_tables(
    mixed: list[float], verdict: str, why: str
) -> None:
    runs = _grid("rope_mixed", mixed) + _grid("rope_2d", [0.7, 0.75, 0.8])
    runs += _grid("sincos_2d", [0.6, 0.62, 0.65]) + _grid("learned_2d", [0.5, 0.55, 0.52])
    runs += _grid("nope", [0.5, 0.5, 0.5])  # the control is in no group
    (v,) = check_findings(panels(runs))[4].verdicts
    assert (v.task, v.verdict) == ("grid_cross", verdict) and why in v.reason
    assert "nope" not in v.numbers and "learned_2d 0.52 [0.50, 0.55] (3 of 3 learned)" in v.numbers


def test_heo_leaves_out_runs_that_did_not_learn_and_needs_a_grid_task() -> None:
    runs = _grid("rope_mixed", [0.9, 0.92, 0.95]) + _grid("rope_2d", [0.95, 1.0, 1.0], gate=False)
    runs += _grid("sincos_2d", [0.6, 0.62, 0.65])
    (v,) = check_findings(panels(runs))[4].verdicts
    assert v.verdict == "reproduced" and "left out" in v.reason and "rope_2d" in v.reason
    assert _finding(_copy("rope_mixed", [0.9, 0.9, 0.9]) + _copy("rope_2d", [0.1] * 3), 4) == []
