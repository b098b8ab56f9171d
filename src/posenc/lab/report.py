"""The lab report (``report.html``; not ``posenc report``, the encodings report), answer first:

1. Answer: per task config and evaluated length beyond training, the ranking of encodings
   (``posenc.lab.stats``: overlapping bootstrap intervals tie) with the winners;
2. Published findings, each with its rule, verdict per task, numbers and intervals;
3. per task config, the numbers (mean [95% interval] over learned seeds, winners marked, runs
   that did not learn greyed with their count) and the curves;
4. attention maps of runs that passed the gate; the configuration; the method.

The extend suite's page, ``write_extend_report``:

The extension lab's page, ``OUT/extend.html``: one self-contained HTML file (Jinja2 with
every value escaped, figures inline, no network; ``posenc.report.html``).

Sections: the findings with their rules and verdicts; loss by position per method,
training-free and fine-tuned side by side; a table per length (mean [95% interval] over
seeds); the loss at L under each method's largest scaling; streaming with and without sinks;
passkey grids; the passkey gate per model; time and configuration.
"""

from __future__ import annotations

import json
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
from .config import ExtendConfig, RunConfig
from .environment import environment, stored_environments
from .figures import (
    EXTEND_LABELS,
    METRIC_NAMES,
    curve_figure,
    loss_by_position,
    passkey_grids,
    streaming,
)
from .findings import ExtendFinding, check_extend_findings, check_findings
from .results import GATE, ExtendResults, Panel, Run, learned, load_runs, panels
from .stats import MIN_SEEDS, bootstrap_interval, paired_difference
from .store import EXTEND_STORE_NAME, ExtendStore, ResultStore
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


# --- the extend suite's page, ``OUT/extend.html`` ------------------------------------------------

EXTEND_REPORT_NAME = "extend.html"


def read_extend(
    out: str | Path, cfg: ExtendConfig
) -> tuple[ExtendResults, list[dict[str, Any]], set[int]]:
    """The stored results of ``cfg`` in ``out``, its finished units, and the seeds whose RoPE
    model passed the passkey gate."""
    with ExtendStore(Path(out) / EXTEND_STORE_NAME, cfg) as store:
        results, units = ExtendResults(store.measures()), store.units()
    infos = {u["name"]: u["info"] for u in units}
    gated = {s for s in cfg.seeds if infos.get(f"pretrain/rope/s{s}", {}).get("passed_gate")}
    return results, units, gated


def extend_findings_of(out: str | Path, cfg: ExtendConfig) -> list[ExtendFinding]:
    """The findings' verdicts on the results of ``cfg`` stored in ``out``."""
    results, _, gated = read_extend(out, cfg)
    return check_extend_findings(results, cfg, gated)


def write_extend_report(out: str | Path, cfg: ExtendConfig) -> Path:
    """Render ``out/extend.html`` from ``out/extend.sqlite`` (a store of ``cfg``)."""
    out = Path(out)
    results, units, gated = read_extend(out, cfg)
    with ExtendStore(out / EXTEND_STORE_NAME, cfg) as store:
        meta = store.meta()
    pretrained = {u["name"]: u["info"] for u in units if u["name"].startswith("pretrain/")}
    findings = check_extend_findings(results, cfg, gated)
    sections = [
        _extend_findings_section(findings),
        Section(
            "Loss by position",
            paragraphs=[
                "Mean next-token loss by position in held-out windows of each length, mean over "
                "seeds with a 95% bootstrap band; the dashed line is the training context L. "
                "Left: the method applied to the trained model as is (ALiBi, NoPE and FIRE "
                "dotted, unchanged); right: after the short fine-tune at that length."
            ],
            figures=[_extend_figure(loss_by_position(results, cfg), "loss by position", wide=True)],
        ),
        Section(
            "Loss and passkey by length",
            paragraphs=[_longrope_text(units, cfg)],
            tables=_length_tables(results, cfg, gated),
        ),
        _below_section(results, cfg),
        Section(
            "Streaming past the window",
            paragraphs=[
                f"The RoPE model reads {cfg.max_len} held-out tokens one at a time through "
                f"KVCache(window={cfg.window}, sinks=S): S = 0 is window attention, S = "
                f"{cfg.sinks} keeps the first tokens as attention sinks (Xiao et al. 2023).",
                _sink_text(units, cfg),
            ],
            figures=[_extend_figure(streaming(results, cfg), "streaming loss by position")],
        ),
        Section(
            "Passkey retrieval",
            paragraphs=[
                f"Accuracy of the {cfg.passkey_digits}-token key (posenc.eval.passkey, token "
                f"form) by needle depth and context, {cfg.trials} keys per cell and seed, mean "
                "over seeds. The 1x column is the unchanged model."
            ],
            figures=[_extend_figure(passkey_grids(results, cfg), "passkey grids", wide=True)],
        ),
        _gate_section(pretrained, cfg),
        _time_section(units, meta, cfg),
    ]
    now = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    intro = (
        f"{len(units)} units stored, {now}. Models trained at L = {cfg.context} tokens on "
        f"pydoc_data.topics, evaluated at {', '.join(f'{s}x' for s in cfg.factors)} L; "
        f"{len(cfg.seeds)} seeds; intervals are 95% percentile bootstraps over seeds."
    )
    path = out / EXTEND_REPORT_NAME
    atomic_write(path, render_page(f"posenc extension lab: {cfg.name}", sections, intro=intro))
    return path


def _extend_figure(fig: Any, caption: str, *, wide: bool = False) -> FigureBlock:
    return FigureBlock(figure_to_data_uri(fig), caption, wide=wide)


def _extend_findings_section(findings: list[ExtendFinding]) -> Section:
    table = Table(
        columns=["claim", "source", "rule", "here", "numbers (d: paired mean [95% interval])"],
        rows=[
            [f.claim, f.source, f.rule, f.verdict, "; ".join(p.text() for p in f.parts)]
            for f in findings
        ],
    )
    notes = [f"{f.key}: {f.note}" for f in findings if f.note]
    rule = (
        "Each part compares two settings paired by seed; it is true when the whole interval "
        "of the difference satisfies it, false when the whole interval violates it, else "
        "open. Reproduced: every part true; not reproduced: a part false; else inconclusive."
    )
    return Section("Published findings", paragraphs=[rule, *notes], tables=[table])


def _extend_cell(values: dict[int, float], digits: int = 3) -> str:
    return bootstrap_interval(list(values.values())).text(digits) if values else "—"


def _length_tables(results: ExtendResults, cfg: ExtendConfig, gated: set[int]) -> list[Table]:
    L = cfg.context
    tables = [
        Table(
            columns=["model", "loss", "passkey"],
            rows=[
                [
                    EXTEND_LABELS[enc] if enc != "rope" else "RoPE",
                    _extend_cell(results.loss((enc, "none", "free", 1, L))),
                    _extend_cell(results.passkey((enc, "none", "free", 1, L)), 2),
                ]
                for enc in ("rope", *cfg.baselines)
            ],
            caption=f"At the training context L = {L} (the 1x column of every comparison)",
        )
    ]
    for s in sorted(cfg.factors):
        rows = []
        for m in cfg.methods:
            free, tuned = ("rope", m, "free", s, s * L), ("rope", m, "tuned", s, s * L)
            rows.append(
                [
                    EXTEND_LABELS[m],
                    _extend_cell(results.loss(free)),
                    _extend_cell(results.loss(tuned)),
                    _extend_cell(results.passkey(free), 2),
                    _extend_cell(results.passkey(tuned), 2),
                ]
            )
        for enc in cfg.baselines:
            key = (enc, "none", "free", s, s * L)
            rows.append(
                [
                    EXTEND_LABELS[enc],
                    _extend_cell(results.loss(key)),
                    "—",
                    _extend_cell(results.passkey(key), 2),
                    "—",
                ]
            )
        tables.append(
            Table(
                columns=["method", "loss free", "loss tuned", "passkey free", "passkey tuned"],
                rows=rows,
                caption=f"{s}x L = {s * L} tokens: mean [95% interval] over seeds",
            )
        )
    return tables


def _below_section(results: ExtendResults, cfg: ExtendConfig) -> Section:
    L, smax = cfg.context, max(cfg.factors)
    base = results.loss(("rope", "none", "free", 1, L))
    rows = []
    for m in cfg.methods[1:]:
        at_l = results.loss(("rope", m, "free", smax, L))
        d = paired_difference(at_l, base) if at_l and base else None
        rows.append([EXTEND_LABELS[m], _extend_cell(at_l), "—" if d is None else d.text(3)])
    table = Table(
        columns=["method", "loss at L", "minus unchanged (paired)"],
        rows=rows,
        caption=(
            f"Each method set for {smax}x, evaluated at L = {L}; unchanged: {_extend_cell(base)}"
        ),
    )
    return Section("Below the training context", tables=[table])


def _longrope_text(units: list[dict[str, Any]], cfg: ExtendConfig) -> str:
    """How LongRoPE's factors were found (a scaled-down search), and which candidate won."""
    n = 3 + cfg.search_generations * cfg.search_children
    text = (
        f"LongRoPE's per-pair factors come from a scaled-down search: {n} candidates per seed "
        f"and factor (PI, NTK and YaRN's factors, then {cfg.search_generations} generations of "
        f"{cfg.search_children} mutations of the best; no crossover, no search of the number of "
        "initial positions left uninterpolated), each scored by its loss on "
        f"{cfg.search_windows} windows of s·L training tokens. Ding et al. 2024 run a far "
        "larger evolutionary search (populations of dozens over tens of generations, with "
        "crossover), scored on long documents."
    )
    won = [
        f"{u['name'].split('/')[-1]} {key.removeprefix('search_')}: "
        + min(scored, key=lambda t: t[1])[0]
        for u in units
        if u["name"].startswith("free/longrope/")
        for key, scored in sorted(u["info"].items())
        if key.startswith("search_")
    ]
    return text + (f" Best candidates: {'; '.join(sorted(won))}." if won else "")


def _sink_text(units: list[dict[str, Any]], cfg: ExtendConfig) -> str:
    """The first-token attention of each seed's RoPE model, per layer, against uniform."""
    found = {
        u["name"]: u["info"]["first_token_attention"]
        for u in units
        if u["name"].startswith("stream/") and "first_token_attention" in u["info"]
    }
    if not found:
        return "No first-token attention measured."
    per_seed = "; ".join(
        f"{name.split('/')[1]}: " + ", ".join(f"{x:.3f}" for x in a["layers"])
        for name, a in sorted(found.items())
    )
    uniform = next(iter(found.values()))["uniform"][0]
    return (
        f"Attention sink: mean weight on the first token from queries in the second half of "
        f"{cfg.context}-token windows, per layer (seed: layer 1, 2, ...): {per_seed}; uniform "
        f"attention would give {uniform:.3f}."
    )


def _gate_section(pretrained: dict[str, dict[str, Any]], cfg: ExtendConfig) -> Section:
    rows = []
    for name, info in sorted(pretrained.items()):
        curve = info.get("loss_curve") or [[0, float("nan")]]
        ok = "passed" if info.get("passed_gate") else "DID NOT LEARN the passkey"
        rows.append([name, f"{info.get('passkey_at_L', 0.0):.2f}", ok, f"{curve[-1][1]:.3f}"])
    return Section(
        "Passkey gate",
        paragraphs=[
            f"A model passes when its passkey accuracy at L (mean over depths) is at least "
            f"{cfg.gate}; the passkey part of a finding uses only seeds whose RoPE model passed."
        ],
        tables=[Table(["model", "passkey at L", "gate", "last training loss"], rows)],
    )


def _time_section(units: list[dict[str, Any]], meta: dict[str, str], cfg: ExtendConfig) -> Section:
    facts = {"configuration": json.dumps(cfg.to_dict(), sort_keys=True)}
    last = json.loads(meta.get("last_run", "{}"))
    if last:
        facts["last invocation"] = (
            f"{last['seconds']:.0f} s wall, {last['cpu_seconds']:.0f} s CPU (this process and "
            f"its {last['workers']} workers), {last['units_run']} units run, "
            f"{last['units_reused']} reused; {last['cpus']} CPUs ({last['cpu_model']}), load "
            f"average at the end {last['load_average']}"
        )
    facts["CPU of every stored unit"] = f"{sum(u['cpu_seconds'] for u in units):.0f} s"
    facts["wall of every stored unit"] = f"{sum(u['seconds'] for u in units):.0f} s (summed)"
    return Section("Time and configuration", facts=facts)
