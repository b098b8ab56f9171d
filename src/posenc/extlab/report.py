"""The extension lab's page, ``OUT/extend.html``: one self-contained HTML file (Jinja2 with
every value escaped, figures inline, no network; ``posenc.report.html``).

Sections: the findings with their rules and verdicts; loss by position per method,
training-free and fine-tuned side by side; a table per length (mean [95% interval] over
seeds); the loss at L under each method's largest scaling; streaming with and without sinks;
passkey grids; the passkey gate per model; time and configuration.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from .._files import atomic_write
from ..report.html import FigureBlock, Section, Table, figure_to_data_uri, render_page
from .config import ExtendConfig
from .figures import LABELS, loss_by_position, passkey_grids, streaming
from .findings import Finding, check_findings
from .results import Results
from .stats import bootstrap_interval, paired
from .store import STORE_NAME, ExtendStore

REPORT_NAME = "extend.html"


def read(out: str | Path, cfg: ExtendConfig) -> tuple[Results, list[dict[str, Any]], set[int]]:
    """The stored results of ``cfg`` in ``out``, its finished units, and the seeds whose RoPE
    model passed the passkey gate."""
    with ExtendStore(Path(out) / STORE_NAME, cfg) as store:
        results, units = Results(store.rows()), store.units()
    infos = {u["name"]: u["info"] for u in units}
    gated = {s for s in cfg.seeds if infos.get(f"pretrain/rope/s{s}", {}).get("passed_gate")}
    return results, units, gated


def findings_of(out: str | Path, cfg: ExtendConfig) -> list[Finding]:
    """The findings' verdicts on the results of ``cfg`` stored in ``out``."""
    results, _, gated = read(out, cfg)
    return check_findings(results, cfg, gated)


def write_report(out: str | Path, cfg: ExtendConfig) -> Path:
    """Render ``out/extend.html`` from ``out/extend.sqlite`` (a store of ``cfg``)."""
    out = Path(out)
    results, units, gated = read(out, cfg)
    with ExtendStore(out / STORE_NAME, cfg) as store:
        meta = store.meta()
    pretrained = {u["name"]: u["info"] for u in units if u["name"].startswith("pretrain/")}
    findings = check_findings(results, cfg, gated)
    sections = [
        _findings_section(findings),
        Section(
            "Loss by position",
            paragraphs=[
                "Mean next-token loss by position in held-out windows of each length, mean over "
                "seeds with a 95% bootstrap band; the dashed line is the training context L. "
                "Left: the method applied to the trained model as is (ALiBi, NoPE and FIRE "
                "dotted, unchanged); right: after the short fine-tune at that length."
            ],
            figures=[_figure(loss_by_position(results, cfg), "loss by position", wide=True)],
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
            figures=[_figure(streaming(results, cfg), "streaming loss by position")],
        ),
        Section(
            "Passkey retrieval",
            paragraphs=[
                f"Accuracy of the {cfg.passkey_digits}-token key (posenc.eval.passkey, token "
                f"form) by needle depth and context, {cfg.trials} keys per cell and seed, mean "
                "over seeds. The 1x column is the unchanged model."
            ],
            figures=[_figure(passkey_grids(results, cfg), "passkey grids", wide=True)],
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
    path = out / REPORT_NAME
    atomic_write(path, render_page(f"posenc extension lab: {cfg.name}", sections, intro=intro))
    return path


def _figure(fig: Any, caption: str, *, wide: bool = False) -> FigureBlock:
    return FigureBlock(figure_to_data_uri(fig), caption, wide=wide)


def _findings_section(findings: list[Finding]) -> Section:
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


def _cell(values: dict[int, float], digits: int = 3) -> str:
    return bootstrap_interval(list(values.values())).text(digits) if values else "—"


def _length_tables(results: Results, cfg: ExtendConfig, gated: set[int]) -> list[Table]:
    L = cfg.context
    tables = [
        Table(
            columns=["model", "loss", "passkey"],
            rows=[
                [
                    LABELS[enc] if enc != "rope" else "RoPE",
                    _cell(results.loss((enc, "none", "free", 1, L))),
                    _cell(results.passkey((enc, "none", "free", 1, L)), 2),
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
                    LABELS[m],
                    _cell(results.loss(free)),
                    _cell(results.loss(tuned)),
                    _cell(results.passkey(free), 2),
                    _cell(results.passkey(tuned), 2),
                ]
            )
        for enc in cfg.baselines:
            key = (enc, "none", "free", s, s * L)
            rows.append(
                [LABELS[enc], _cell(results.loss(key)), "—", _cell(results.passkey(key), 2), "—"]
            )
        tables.append(
            Table(
                columns=["method", "loss free", "loss tuned", "passkey free", "passkey tuned"],
                rows=rows,
                caption=f"{s}x L = {s * L} tokens: mean [95% interval] over seeds",
            )
        )
    return tables


def _below_section(results: Results, cfg: ExtendConfig) -> Section:
    L, smax = cfg.context, max(cfg.factors)
    base = results.loss(("rope", "none", "free", 1, L))
    rows = []
    for m in cfg.methods[1:]:
        at_l = results.loss(("rope", m, "free", smax, L))
        d = paired(at_l, base) if at_l and base else None
        rows.append([LABELS[m], _cell(at_l), "—" if d is None else d.text(3)])
    table = Table(
        columns=["method", "loss at L", "minus unchanged (paired)"],
        rows=rows,
        caption=f"Each method set for {smax}x, evaluated at L = {L}; unchanged: {_cell(base)}",
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
