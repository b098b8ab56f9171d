"""Report and findings aggregate per run: seeds of one training length, never across lengths."""

from __future__ import annotations

import re
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from posenc.lab.config import expand, parse_sweep
from posenc.lab.findings import lm_loss_rise
from posenc.lab.report import write_report
from posenc.lab.store import ResultStore
from posenc.lab.train import RunResult


def _table_cells(html: str) -> dict[str, list[str]]:
    """Results table as {column header: cells} (first column: encodings)."""
    start = html.index("<caption>exact match")
    table = html[start : html.index("</table>", start)]
    heads = re.findall(r"<th scope=\"col\">(.*?)</th>", table)
    rows = [re.findall(r"<td>(.*?)</td>", tr) for tr in re.findall(r"<tr>(.*?)</tr>", table)]
    rows = [r for r in rows if r]
    return {h: [r[i] for r in rows] for i, h in enumerate(heads)}


def _two_lengths_report(tmp_path: Path) -> str:
    """rope on copy trained to 8 and to 16, seeds 0 and 1: exact match 1 up to the training
    length, 0 beyond, plus 0.1 x seed."""
    sweep = parse_sweep(
        {
            "name": "s",
            "encodings": ["rope"],
            "tasks": [{"name": "copy", "train_len": [1, 8], "eval_lens": [8, 16, 32]}],
            "seeds": [0, 1],
            "train_max_lens": [8, 16],
        }
    )
    runs = expand(sweep)
    with ResultStore(tmp_path / "results.sqlite") as store:
        for r in runs:
            hi = r.task.train_len[1] if r.task.train_len else 0
            em = [(n, "exact_match", (1.0 if n <= hi else 0.0) + 0.1 * r.seed) for n in (8, 16, 32)]
            store.add(RunResult(r.key(), asdict(r), em, [(0, 1.0)]), sweep="s")
    return write_report(runs, tmp_path).read_text()


def test_report_keeps_training_lengths_apart(tmp_path: Path) -> None:
    """A grid over train_max_lens: a cell is the mean over seeds of runs trained to one length,
    not a blend of runs trained to 8 and to 16 (which read "0.55 ± 0.50" at length 16)."""
    html = _two_lengths_report(tmp_path)
    cells = _table_cells(html)
    assert cells["copy (train 1-8) 16"] == ["0.05 ± 0.05"]  # seeds 0 and 1: 0.0 and 0.1
    assert cells["copy (train 1-16) 16"] == ["1.05 ± 0.05"]
    assert cells["copy (train 1-16) 32"] == ["0.05 ± 0.05"]
    assert "copy (train 1-8): exact_match vs length" in html  # one curve per training length
    assert "copy (train 1-16): exact_match vs length" in html


def test_report_keeps_two_settings_of_one_task_apart(tmp_path: Path) -> None:
    """Two entries of one task (4 and 16 symbols): two panels, each named by its setting."""
    sweep = parse_sweep(
        {
            "name": "s",
            "encodings": ["nope"],
            "tasks": [
                {"name": "copy", "train_len": [1, 8], "eval_lens": [8, 16], "n_symbols": n}
                for n in (4, 16)
            ],
            "seeds": [0],
        }
    )
    runs = expand(sweep)
    with ResultStore(tmp_path / "results.sqlite") as store:
        for r in runs:
            em = [(n, "exact_match", 1.0 if r.task.n_symbols == 4 else 0.0) for n in (8, 16)]
            store.add(RunResult(r.key(), asdict(r), em, [(0, 1.0)]), sweep="s")
    cells = _table_cells(write_report(runs, tmp_path).read_text())
    assert cells["copy (4 symbols) 16"] == ["1.00 ± 0.00"]
    assert cells["copy (16 symbols) 16"] == ["0.00 ± 0.00"]


def test_report_table_is_the_database_mean_over_seeds(tmp_path: Path) -> None:
    """One training length: the label stays the task's name, cells are mean ± std over seeds."""
    sweep = parse_sweep(
        {
            "name": "s",
            "encodings": ["alibi", "nope"],
            "tasks": [{"name": "sort", "train_len": [1, 8], "eval_lens": [8, 16]}],
            "seeds": [0, 1, 2],
        }
    )
    runs = expand(sweep)
    with ResultStore(tmp_path / "results.sqlite") as store:
        for r in runs[:-1]:  # the last run (nope, seed 2) never finished
            em = [(n, "exact_match", 0.2 * r.seed + n / 100) for n in (8, 16)]
            store.add(RunResult(r.key(), asdict(r), em, [(0, 1.0)]), sweep="s")
    html = write_report(runs, tmp_path).read_text()
    cells = _table_cells(html)
    assert cells["encoding"] == ["alibi", "nope"]
    assert cells["sort 8"] == ["0.28 ± 0.16", "0.18 ± 0.10"]  # nope: seeds 0 and 1 only
    assert cells["sort 16"] == ["0.36 ± 0.16", "0.26 ± 0.10"]
    assert "5 of 6 runs finished" in html


def _lm_rows(enc: str, train_max: int, losses: list[float], key: str) -> list[dict[str, Any]]:
    return [
        {
            "run_key": key,
            "encoding": enc,
            "task": "lm",
            "seed": 0,
            "train_min": train_max,
            "train_max": train_max,
            "length": train_max * (i + 1),
            "metric": "loss",
            "value": v,
        }
        for i, v in enumerate(losses)
    ]


def test_lm_loss_rise_is_per_run_not_across_training_lengths() -> None:
    """Two lm runs (same seed) trained to 32 and 64: each rises x1.1; their buckets must not
    merge into (last bucket of one) / (first bucket of the other) = 1.1 / 2.0."""
    rows = _lm_rows("alibi", 32, [2.0, 2.1, 2.15, 2.2], "a")
    rows += _lm_rows("alibi", 64, [1.0, 1.05, 1.08, 1.1], "b")
    assert lm_loss_rise(rows) == pytest.approx({"alibi": 1.1})


@pytest.mark.browser
@pytest.mark.skipif(not Path("/usr/bin/chromium").exists(), reason="Debian chromium not installed")
def test_lab_report_curves_render_in_chromium(tmp_path: Path) -> None:
    """One curve per training length, every image decoded, no request but the page itself."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright not installed")
    _two_lengths_report(tmp_path)
    url = (tmp_path / "report.html").resolve().as_uri()
    requests, errors = [], []
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path="/usr/bin/chromium", args=["--headless", "--no-sandbox"]
        )
        page = browser.new_page()
        page.on("request", lambda r: requests.append(r.url))
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.goto(url, wait_until="load")
        images = page.eval_on_selector_all(
            "#accuracy-vs-length img", "els => els.map(e => [e.alt, e.naturalWidth])"
        )
        browser.close()
    assert requests == [url] and errors == []
    assert [alt for alt, _ in images] == [
        "copy (train 1-8): exact_match vs length",
        "copy (train 1-16): exact_match vs length",
    ]
    assert all(width > 0 for _, width in images)


def test_a_file_that_is_not_a_database_is_a_clear_error(tmp_path: Path) -> None:
    from posenc.lab.store import ResultStore

    path = tmp_path / "results.sqlite"
    path.write_text("these are notes, not results\n" * 200)
    with pytest.raises(ValueError, match=r"results.sqlite: not a posenc result store"):
        ResultStore(path)
