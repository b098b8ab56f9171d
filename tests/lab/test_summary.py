"""``posenc lab``'s answer in the terminal, from the committed stores: per task the ranking
beyond training with intervals and winners, the findings' verdicts, the runs that did not learn."""

from __future__ import annotations

from pathlib import Path

from posenc.lab.results import learned, load_runs, panels
from posenc.lab.store import ResultStore
from posenc.lab.summary import WIDTH, answer_text, text_table

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"


def _answer(name: str) -> str:
    with ResultStore(RESULTS / name, readonly=True) as store:
        runs = load_runs(store)
    return answer_text(panels(runs), total=len(runs), failed=sum(not learned(r) for r in runs))


def test_quick_store_answer_names_rankings_winners_and_verdicts() -> None:
    text = _answer("lab-quick.sqlite")
    lines = text.splitlines()
    assert "copy_rep: trained on lengths 1-8; exact match, higher is better" in lines
    # the report's numbers: FIRE first at 1.5x with its interval, a winner; T5 behind
    assert any(
        line.split()[:2] == ["fire", "3"] and "1. 0.93 [0.88, 1.00] ★" in line for line in lines
    )
    assert "  winners at 16 (2x): fire, randomized" in lines
    assert "    copy_rep: reproduced (interval ends at or below 0.10)" in lines
    assert (
        "    not measured: needs lm runs of alibi and sinusoidal or rope (posenc lab --preset lm)"
        in lines
    )
    assert lines[-1] == "all 81 runs learned their task (passed the competence gate)"
    assert max(map(len, lines)) <= WIDTH  # fits a terminal and a log


def test_store_with_runs_that_did_not_learn_says_how_many() -> None:
    text = _answer("lab-seq2seq.sqlite")
    assert "38 runs of 60 did not learn its task" in text
    row = next(line for line in text.splitlines() if line.startswith("  nope (encoder-decoder)"))
    assert row.split("  ")[-1].strip() == "did not learn" and "0 of 3" in row


def test_text_table_pads_columns() -> None:
    assert text_table(["a", "bb"], [["ccc", "d"]]).splitlines() == ["  a    bb", "  ccc  d"]
