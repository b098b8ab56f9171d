"""The lab report from stored runs: per task config, mean [95% interval] over the seeds that
learned, winners marked, runs that did not learn greyed and counted; the answer first."""

from __future__ import annotations

import re
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import pytest

from posenc.lab.config import RunConfig, expand, parse_sweep
from posenc.lab.report import write_report
from posenc.lab.store import ResultStore
from posenc.lab.train import RunResult


def _table(html: str, caption: str) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """The table captioned ``caption``: {column: cells} and {column: cell classes}."""
    start = html.index(f"<caption>{caption}")
    table = html[start : html.index("</table>", start)]
    heads = re.findall(r"<th scope=\"col\">(.*?)</th>", table)
    trs = [
        re.findall(r"<td( class=\"[^\"]*\")?>(.*?)</td>", tr)
        for tr in re.findall(r"<tr>(.*?)</tr>", table)
    ]
    trs = [r for r in trs if r]
    cells = {h: [r[i][1] for r in trs] for i, h in enumerate(heads)}
    classes = {
        h: [r[i][0].removeprefix(' class="').rstrip('"') for r in trs] for i, h in enumerate(heads)
    }
    return cells, classes


def _store(tmp_path: Path, runs: list[RunConfig], value: Any) -> str:
    """Store ``value(run, length)`` as each run's exact match; returns the report."""
    with ResultStore(tmp_path / "results.sqlite") as store:
        for r in runs:
            lens = r.task.build().eval_lens
            em = [(n, "exact_match", value(r, n)) for n in lens]
            gate = min(v for n, _, v in em if n <= r.task.build().train_len[1])  # as the gate
            result = RunResult(r.key(), asdict(r), em, [(0, 1.0)], 2.0, 1.5)
            store.add(replace(result, gate_metric=gate, passed_gate=gate >= 0.99), sweep="s")
    return write_report(runs, tmp_path).read_text()


def _two_lengths_report(tmp_path: Path) -> str:
    """rope on copy trained to 8 and to 16, seeds 0-2: exact match 1 up to the training
    length, 0.1 x seed beyond."""
    sweep = parse_sweep(
        {
            "name": "s",
            "encodings": ["rope"],
            "tasks": [{"name": "copy", "train_len": [1, 8], "eval_lens": [8, 16, 32]}],
            "seeds": [0, 1, 2],
            "train_max_lens": [8, 16],
        }
    )

    def value(r: RunConfig, n: int) -> float:
        hi = r.task.train_len[1] if r.task.train_len else 0
        return 1.0 if n <= hi else 0.1 * r.seed

    return _store(tmp_path, expand(sweep), value)


def test_report_keeps_training_lengths_apart(tmp_path: Path) -> None:
    """A grid over train_max_lens: a cell is over the seeds of runs trained to one length."""
    html = _two_lengths_report(tmp_path)
    short, _ = _table(html, "copy (train 1-8): exact match")
    long, _ = _table(html, "copy (train 1-16): exact match")
    assert short["16 (2x)"] == ["★ 0.10 [0.00, 0.20]"]  # seeds 0, 1, 2: 0.0, 0.1, 0.2
    assert long["16 (training)"] == ["1.00 [1.00, 1.00]"]
    assert long["32 (2x)"] == ["★ 0.10 [0.00, 0.20]"]
    assert "copy (train 1-8): exact match vs length" in html  # one curve per training length
    assert "copy (train 1-16): exact match vs length" in html


def test_runs_that_did_not_learn_are_greyed_counted_and_never_ranked(tmp_path: Path) -> None:
    """Two settings of copy (4 and 16 symbols); every 16-symbol run fails at the training
    length, one alibi seed fails on 4 symbols: its numbers leave the cells."""
    sweep = parse_sweep(
        {
            "name": "s",
            "encodings": ["nope", "alibi"],
            "tasks": [
                {"name": "copy", "train_len": [1, 8], "eval_lens": [8, 16], "n_symbols": n}
                for n in (4, 16)
            ],
            "seeds": [0, 1, 2],
        }
    )

    def value(r: RunConfig, n: int) -> float:
        if r.task.n_symbols == 16 or (r.encoding == "alibi" and r.seed == 2):
            return 0.4 if n == 8 else 0.9  # failed the gate: its 0.9 beyond must not count
        return 1.0 if n == 8 else {"nope": 0.8, "alibi": 0.1}[r.encoding] + 0.01 * r.seed

    html = _store(tmp_path, expand(sweep), value)
    cells, classes = _table(html, "copy (4 symbols): exact match")
    assert cells["encoding"] == ["nope", "alibi"]
    assert cells["learned"] == ["3 of 3", "2 of 3; did not learn: seed 2: gate 0.40, 0.40 at 8"]
    assert cells["16 (2x)"] == ["★ 0.81 [0.80, 0.82]", "0.11 [0.10, 0.11]"]
    assert classes["16 (2x)"] == ["num win", "num"]
    cells, classes = _table(html, "copy (16 symbols): exact match")
    assert cells["16 (2x)"] == ["did not learn"] * 2 and classes["16 (2x)"] == ["num dnl"] * 2
    answer, answer_classes = _table(html, "Ranking beyond the longest training length")
    assert answer["task"] == ["copy (4 symbols)", "copy (16 symbols)"]
    assert answer["winners"] == ["nope", "none (too few learned seeds)"]
    assert answer["ranking (ties share a rank)"] == ["1. nope · 2. alibi", ""]
    assert answer["left out"][1] == "did not learn: nope (0 of 3), alibi (0 of 3)"
    assert answer_classes["left out"] == ["", "dnl"]
    assert "7 did not learn their task" in html  # 6 on 16 symbols, 1 on 4


def test_answer_and_findings_come_first(tmp_path: Path) -> None:
    html = _two_lengths_report(tmp_path)
    ids = re.findall(r'<section id="([^"]+)">', html)
    assert ids[:2] == ["answer", "published-findings"]
    assert ids[-2:] == ["configuration", "method"]
    assert "percentile bootstrap" in html and "never the best of each group" in html


def test_configuration_table_names_what_ran_and_where(tmp_path: Path) -> None:
    html = _two_lengths_report(tmp_path)
    cells, _ = _table(html, "What ran, and where")
    settings = dict(zip(cells["setting"], cells["value"], strict=True))
    assert settings["seeds"] == "0, 1, 2"
    assert settings["task copy (train 1-8)"].startswith(
        "decoder; train lengths 1-8; evaluated at 8, 16, 32"
    )
    assert settings["task copy (train 1-8): what it is"].startswith("Copy n random symbols")
    assert "d_model=64" in settings["model"] and "steps=600" in settings["training"]
    assert settings["pe_config overrides"] == "none"
    assert settings["run time"] == "6 runs: 9 CPU-seconds, 12 s summed over runs"
    assert settings["report written on: cpu"] and settings["report written on: torch"]
    assert "commit" in settings["report written on: posenc"]


@pytest.mark.browser
@pytest.mark.skipif(not Path("/usr/bin/chromium").exists(), reason="Debian chromium not installed")
def test_lab_report_renders_in_chromium(tmp_path: Path) -> None:
    """Answer first, winners bold, did-not-learn greyed, curves full width, every image
    decoded, no request but the page itself."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright not installed")
    _two_lengths_report(tmp_path)
    url = (tmp_path / "report.html").resolve().as_uri()
    requests, errors = [], []
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path="/usr/bin/chromium", args=["--headless", "--no-sandbox"]
        )
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.on("request", lambda r: requests.append(r.url))
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.goto(url, wait_until="load")
        first = page.eval_on_selector("main > section", "e => e.id")
        images = page.eval_on_selector_all(
            "section[id^=task-] img",
            "els => els.map(e => [e.alt, e.naturalWidth, e.getBoundingClientRect().width,"
            " e.closest('main').getBoundingClientRect().width])",
        )
        win = page.eval_on_selector("td.win", "e => getComputedStyle(e).fontWeight")
        browser.close()
    assert requests == [url] and errors == []
    assert first == "answer"
    assert [alt for alt, *_ in images] == [
        "copy (train 1-8): exact match vs length",
        "copy (train 1-16): exact match vs length",
    ]
    assert all(natural > 0 and shown > 0.75 * (main - 80) for _, natural, shown, main in images)
    assert int(win) >= 700


def test_a_file_that_is_not_a_database_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "results.sqlite"
    path.write_text("these are notes, not results\n" * 200)
    with pytest.raises(ValueError, match=r"results.sqlite: not a posenc result store"):
        ResultStore(path)
