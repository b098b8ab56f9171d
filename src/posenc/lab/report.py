"""The lab report (``report.html``; not ``posenc report``, the encodings report), answer first:

1. Answer: per task config and evaluated length beyond training, the ranking of encodings
   (``posenc.lab.stats``: overlapping bootstrap intervals tie) with the winners;
2. Published findings, each with its rule, verdict per task, numbers and intervals;
3. per task config, the numbers (mean [95% interval] over learned seeds, winners marked, runs
   that did not learn greyed with their count) and the curves;
4. attention maps of runs that passed the gate; the configuration; the method.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from .._files import atomic_write
from ..report.html import (
    FigureBlock,
    Section,
    Table,
    figure_to_data_uri,
    inline_code,
    render_page,
)
from .attention_maps import attention_sections
from .config import RunConfig
from .environment import environment, stored_environments
from .figures import METRIC_NAMES, curve_figure
from .findings import check_findings
from .results import GATE, Panel, Run, learned, load_runs, panels
from .stats import MIN_SEEDS
from .store import ResultStore
from .sweep import STORE_NAME

REPORT_NAME = "report.html"
#: Why an encoding cannot learn a task, where that is known in advance.
CANNOT = {
    ("nope", "classify"): "an encoder without positions sees a set: it cannot tell orders apart",
    ("nope (encoder-decoder)", "decoder"): "its encoder without positions sees the source as a "
    "set (cross-attention has no position term): an answer that depends on the source's order "
    "is out of its reach",
}


def write_report(runs: list[RunConfig], out_dir: str | Path, *, title: str = "posenc lab") -> Path:
    """Render ``out_dir/report.html`` for ``runs`` from ``out_dir/results.sqlite``."""
    out = Path(out_dir)
    keys = {r.key() for r in runs}
    with ResultStore(out / STORE_NAME) as store:
        stored, envs = load_runs(store, keys), stored_environments(store)
    groups = sweep_panels(runs, stored)
    order = list(dict.fromkeys(r.label for r in runs))  # as the store names them
    sections = [answer_section(groups), findings_section(groups)]
    sections += [_panel_section(p) for p in groups]
    sections += attention_sections(runs, stored, order)
    sections += [config_section(groups, runs, stored, envs), method_section()]
    failed = sum(not learned(r) for r in stored)
    now = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    intro = (
        f"{len(stored)} of {len(keys)} runs finished, {now}; {failed} did not learn their task "
        f"(below {GATE} at a training length) and are left out of every comparison. "
        "Answer first; how the numbers are made is at the end."
    )
    path = out / REPORT_NAME
    atomic_write(path, render_page(title, sections, intro=intro))
    return path


def sweep_panels(runs: list[RunConfig], stored: list[Run]) -> list[Panel]:
    """The panels of ``stored`` (the stored runs of ``runs``; sorted in place) in the sweep's
    order: tasks, then encodings as the store names them."""
    position = {r.key(): i for i, r in enumerate(runs)}
    stored.sort(key=lambda r: position[r.key])
    return panels(stored, list(dict.fromkeys(r.label for r in runs)))


def answer_section(groups: list[Panel]) -> Section:
    """Per task config and length beyond training: winners and the ranking with ties."""
    rows, classes = [], []
    for p in groups:
        for n in p.beyond:
            ranks = p.ranking(n)
            by_rank: dict[int, list[str]] = {}
            for enc in p.encodings:
                if enc in ranks:
                    by_rank.setdefault(ranks[enc], []).append(enc)
            ranking = " · ".join(f"{k}. {', '.join(v)}" for k, v in sorted(by_rank.items()))
            winners = ", ".join(by_rank.get(1, [])) or "none (too few learned seeds)"
            out = _left_out(p, n, ranks)
            rows.append([p.label, f"{n} ({n / p.train_max:g}x)", winners, ranking, out])
            classes.append(["", "num", "win" if 1 in by_rank else "dnl", "", "dnl" if out else ""])
    note = (
        "Higher is better (loss: lower). Rank = 1 + the number of encodings whose 95% interval "
        "lies entirely on the better side; overlapping intervals tie, so several can share "
        "rank 1. Runs that did not learn are not ranked."
    )
    table = Table(
        ["task", "length", "winners", "ranking (ties share a rank)", "left out"],
        rows,
        "Ranking beyond the longest training length",
        classes,
    )
    return Section("Answer", paragraphs=[note], tables=[table])


def _left_out(panel: Panel, length: int, ranks: dict[str, int]) -> str:
    """The encodings not ranked at ``length``: no run learned, or too few seeds did."""
    none, few = [], []
    for enc in panel.encodings:
        cell = panel.cell(enc, length)
        if enc in ranks or cell.n_total == 0:
            continue
        if cell.n_learned == 0:
            none.append(f"{enc} (0 of {cell.n_total})")
        else:
            few.append(f"{enc} ({cell.n_learned} of {cell.n_total})")
    parts = [f"did not learn: {', '.join(none)}"] if none else []
    parts += [f"fewer than {MIN_SEEDS} learned seeds: {', '.join(few)}"] if few else []
    return "; ".join(parts)


def findings_section(groups: list[Panel]) -> Section:
    rows, classes = [], []
    for f in check_findings(groups):
        head = [f"{f.claim} ({f.source})", f.rule]
        if not f.verdicts:
            rows.append([*head, "–", "not measured", f.missing, ""])
            classes.append(["", "", "", "dnl", "", ""])
        for i, v in enumerate(f.verdicts):
            rows.append([*(head if i == 0 else ["", ""]), v.task, v.verdict, v.numbers, v.reason])
            classes.append(["", "", "", v.verdict.replace(" ", "-"), "", ""])
    note = (
        "Each finding is judged per task by the rule shown, fixed before the numbers were seen: "
        "every member of one group against every member of the other, or the same seeds paired; "
        "never the best of each group. Numbers: mean [95% bootstrap interval] over learned seeds."
    )
    columns = ["finding", "rule", "task", "verdict", "numbers", "why"]
    return Section(
        "Published findings", paragraphs=[note], tables=[Table(columns, rows, "", classes)]
    )


def _panel_section(p: Panel) -> Section:
    """The numbers and curves of one task config."""
    figure = FigureBlock(
        figure_to_data_uri(curve_figure(p, p.encodings)),
        f"{p.label}: {METRIC_NAMES.get(p.metric, p.metric)} vs length",
        wide=True,
    )
    why = f"Chance: {p.chance:.2f}. " if p.chance is not None and p.metric != "loss" else ""
    note = (
        f"{why}Mean [95% bootstrap interval] over the seeds that learned; ★ and bold: the "
        "winners at that length; grey: did not learn."
    )
    return Section(
        f"Task: {p.label}", paragraphs=[note], tables=[results_table(p)], figures=[figure]
    )


def results_table(p: Panel) -> Table:
    """A row per encoding (``encoding_order``), a column per length."""
    ranks = {n: p.ranking(n) for n in p.beyond}
    rows, classes = [], []
    for enc in encoding_order(p):
        cells, styles = [enc, _learned_text(p, enc)], ["", ""]
        if all(p.cell(enc, n).n_learned == 0 for n in p.lengths):
            styles[1] = "dnl"
        for n in p.lengths:
            text, style = _cell_text(p, enc, n, ranks.get(n, {}))
            cells.append(text)
            styles.append(style)
        rows.append(cells)
        classes.append(styles)
    heads = [_length_head(p, n) for n in p.lengths]
    caption = f"{p.label}: {METRIC_NAMES.get(p.metric, p.metric)} by evaluation length"
    return Table(["encoding", "learned", *heads], rows, caption, classes)


def encoding_order(p: Panel) -> list[str]:
    """``p``'s encodings best first at the first length beyond training: by rank, then by
    mean; those without a learned run (or with no length beyond training) last."""
    first = p.beyond[0] if p.beyond else None
    ranks = p.ranking(first) if first is not None else {}

    def order(enc: str) -> tuple[float, float]:
        if first is None or (iv := p.cell(enc, first).interval) is None:
            return (1e9, 0.0)
        sign = 1.0 if p.metric != "loss" else -1.0
        return (ranks.get(enc, 1e6), -sign * iv.mean)

    return sorted(p.encodings, key=order)


def _length_head(p: Panel, n: int) -> str:
    if n == p.train_max:
        return f"{n} (training)"
    return f"{n} ({n / p.train_max:g}x)" if n > p.train_max else f"{n} (in training range)"


def _cell_text(p: Panel, enc: str, n: int, ranks: dict[str, int]) -> tuple[str, str]:
    cell = p.cell(enc, n)
    if cell.n_total == 0:
        return "–", ""
    if cell.interval is None:
        return "did not learn", "num dnl"
    text = cell.interval.text()
    if not cell.interval.comparable:
        return f"{text} (1 seed)", "num"
    if ranks.get(enc) == 1:
        return f"★ {text}", "num win"
    return text, "num"


def _learned_text(p: Panel, enc: str) -> str:
    """ "3 of 3", or which seeds did not learn with their gate score (the worst training
    length's) and their metric at the longest training length."""
    runs = p.of(enc)
    failed = [r for r in runs if not learned(r)]
    text = f"{len(runs) - len(failed)} of {len(runs)}"
    if failed:
        at = ", ".join(f"seed {r.seed}: {_at_train(p, r)}" for r in failed)
        text += f"; did not learn: {at}"
        reason = CANNOT.get((enc, _kind(p.task)))
        text += f" ({reason})" if reason else ""
    return text


def _at_train(p: Panel, run: Run) -> str:
    value = run.metrics.get((p.metric, p.train_max))
    at = "–" if value is None else f"{value:.2f} at {p.train_max}"
    gate = run.gate_metric
    return at if gate is None or math.isnan(gate) else f"gate {gate:.2f}, {at}"


def _task_doc(task: str) -> str:
    """The first paragraph of the task's docstring (what it asks, the paper and split)."""
    from .tasks import TASKS

    doc = (TASKS[task].__doc__ or "") if task in TASKS else ""
    return " ".join(doc.split("\n\n")[0].split()) or "–"


def _kind(task: str) -> str:
    from .tasks import TASKS

    return TASKS[task].kind if task in TASKS else ""


def config_section(
    groups: list[Panel], runs: list[RunConfig], stored: list[Run], envs: list[dict[str, str]]
) -> Section:
    """What was trained and where, as a table."""
    rows = [["encodings", ", ".join(dict.fromkeys(r.label for r in runs))]]
    rows.append(["seeds", ", ".join(map(str, sorted({r.seed for r in runs})))])
    for p in groups:
        lens = ", ".join(map(str, p.eval_lens))
        chance = "" if p.chance is None else f"; chance {p.chance:.2f}"
        what = f"{_kind(p.task)}; train lengths {p.train_min}-{p.train_max}; evaluated at {lens}"
        rows.append([f"task {p.label}", f"{what}; {p.n_symbols} symbols{chance}"])
        rows.append([f"task {p.label}: what it is", _task_doc(p.task)])
    rows += [["model", _distinct(runs, lambda r: _kv(asdict(r.model)))]]
    rows += [["training", _distinct(runs, lambda r: _kv(asdict(r.train)))]]
    overrides = {r.label: r.pe_config for r in runs if r.pe_config}
    rows.append(
        ["pe_config overrides", "; ".join(f"{e}: {_kv(c)}" for e, c in overrides.items()) or "none"]
    )
    rows.append(["device, backend", _distinct(runs, lambda r: f"{r.device}, {r.backend}")])
    rows.append(["run time", _run_time(stored)])
    if envs:
        for i, env in enumerate(envs):
            where = "runs made on" if len(envs) == 1 else f"runs made on machine {i + 1}"
            rows += [[f"{where}: {k}", v] for k, v in env.items()]
    else:
        rows.append(["runs made on", "not recorded (a store written before posenc recorded it)"])
        rows += [[f"report written on: {k}", v] for k, v in environment().items()]
    return Section(
        "Configuration", tables=[Table(["setting", "value"], rows, "What ran, and where")]
    )


def _kv(d: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in d.items())


def _distinct(runs: list[RunConfig], fn: Any) -> str:
    return " | ".join(dict.fromkeys(fn(r) for r in runs)) or "–"


def _run_time(stored: list[Run]) -> str:
    cpu = sum(r.cpu_seconds for r in stored)
    wall = sum(r.seconds for r in stored)
    return f"{len(stored)} runs: {cpu:.0f} CPU-seconds, {wall:.0f} s summed over runs"


def method_section() -> Section:
    """The rules of ``results``, ``stats`` and ``findings``, from their docstrings."""
    from . import findings, results, stats

    paragraphs: list[str] = []
    for doc in (results.__doc__, stats.__doc__, findings.__doc__):
        # a paragraph per blank-line block and per numbered item
        for block in re.split(r"\n\s*\n|\n(?=\d\. )", doc or ""):
            paragraphs.append(inline_code(" ".join(block.split())))
    return Section("Method", paragraphs=paragraphs)
