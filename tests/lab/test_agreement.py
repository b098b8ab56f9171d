"""``posenc lab compare``: two stores of one sweep, compared verdict by verdict and pair by pair."""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from posenc.cli import app
from posenc.lab.agreement import agreement_markdown, compare_stores
from posenc.lab.config import expand, parse_sweep
from posenc.lab.store import ResultStore
from posenc.lab.train import RunResult

LENS = (8, 12, 16, 32)


def _store(path: Path, scores: dict[str, list[float]], failed: tuple[str, ...] = ()) -> Path:
    """copy_rep runs: ``scores[encoding][seed]`` at every length past training (1.0 at 8);
    the encodings in ``failed`` miss the gate on every seed."""
    encodings = list(scores)
    sweep = parse_sweep(
        {"name": "quick", "encodings": encodings, "tasks": ["copy_rep"], "seeds": [0, 1, 2]}
    )
    with ResultStore(path) as store:
        for r in expand(sweep):
            value = scores[r.encoding][r.seed]
            em = [(n, "exact_match", 1.0 if n == 8 else value) for n in LENS]
            gate = 0.5 if r.encoding in failed else 1.0
            result = RunResult(r.key(), asdict(r), em, [(0, 1.0)])
            store.add(replace(result, gate_metric=gate, passed_gate=gate >= 0.99), sweep="quick")
    return path


A = {"nope": [0.80, 0.81, 0.82], "alibi": [0.10, 0.11, 0.12], "rope": [0.40, 0.41, 0.42]}


def test_a_store_agrees_with_itself(tmp_path: Path) -> None:
    a = _store(tmp_path / "a.sqlite", A)
    result = compare_stores(a, a)
    assert result.agree and result.pairs == 3 * 3  # 3 pairs at each of 3 lengths
    assert result.verdicts >= 1  # Kazemnejad's finding is judged on copy_rep
    assert agreement_markdown(result, "a", "b").endswith("The two agree.\n")


def test_reversed_loosened_and_learned_differences_are_named(tmp_path: Path) -> None:
    a = _store(tmp_path / "a.sqlite", A)
    # rope now above nope (reversed); alibi's interval reaches rope's (loosened: tied)
    b_scores = {"nope": [0.30, 0.31, 0.32], "alibi": [0.10, 0.11, 0.60], "rope": A["rope"]}
    b = _store(tmp_path / "b.sqlite", b_scores)
    result = compare_stores(a, b)
    assert not result.agree
    where = {(d.where, d.what) for d in result.differences}
    assert ("copy_rep 12 (1.5x): nope vs rope", "reversed") in where
    assert ("copy_rep 12 (1.5x): alibi vs rope", "loosened") in where
    assert result.count("reversed") == 3 and result.count("learned") == 0
    text = agreement_markdown(result, "a", "b")
    assert "| copy_rep 16 (2x): nope vs rope | reversed | nope 0.81 [0.80, 0.82] > rope" in text
    c = _store(tmp_path / "c.sqlite", A, failed=("alibi",))
    learned = compare_stores(a, c)
    assert learned.count("learned") == 3
    assert any(d.a == "3 of 3 learned" and d.b == "0 of 3 learned" for d in learned.differences)


def test_cli_exit_status_says_whether_they_agree(tmp_path: Path) -> None:
    a = _store(tmp_path / "a.sqlite", A)
    b = _store(tmp_path / "b.sqlite", {**A, "nope": [0.30, 0.31, 0.32]})
    same = CliRunner().invoke(app, ["lab", "compare", str(a), str(a)])
    assert same.exit_code == 0, same.output
    assert "0 pairs reversed" in same.output and "The two agree." in same.output
    differ = CliRunner().invoke(app, ["lab", "compare", str(a), str(b)])
    assert differ.exit_code == 1 and "| reversed |" in differ.output
    missing = CliRunner().invoke(app, ["lab", "compare", str(a), str(tmp_path / "none")])
    assert missing.exit_code == 2 and "no result store at" in missing.output


def test_stores_without_a_shared_task_config_are_refused(tmp_path: Path) -> None:
    a = _store(tmp_path / "a.sqlite", A)
    sweep = parse_sweep({"encodings": ["nope"], "tasks": ["sort"], "seeds": [0]})
    other = tmp_path / "o.sqlite"
    with ResultStore(other) as store:
        for r in expand(sweep):
            em = [(n, "exact_match", 1.0) for n in (8, 12)]
            store.add(RunResult(r.key(), asdict(r), em, [(0, 1.0)]), sweep="x")
    with pytest.raises(ValueError, match="share no task config"):
        compare_stores(a, other)
