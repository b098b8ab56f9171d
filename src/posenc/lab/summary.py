"""What ``posenc lab`` prints before the paths: the answer, as plain text.

Per task config, a table of the encodings (in the order of the report's table) with, at each
evaluated length beyond training, the rank (1 + the number of encodings whose 95% interval lies
entirely on the better side; overlapping intervals tie), the mean [95% bootstrap interval] over
the seeds that learned and ★ on the winners (rank 1); then the winners per length, the
published findings' verdicts (``posenc.lab.findings``) and how many runs did not learn. Plain
text in aligned columns, no colour and no box drawing, so a log file or a pipe reads as the
terminal does.

The extend suite's answer, ``extend_answer_text``:

What ``posenc lab extend`` prints before the paths: the answer, as plain text.

Two measures beyond the training context L, each a table of every setting (RoPE under each
method, training-free and fine-tuned; ALiBi, NoPE and FIRE unchanged) against each length
factor·L: the loss over the window (lower is better) and the passkey accuracy (higher is
better), each cell the rank (``posenc.lab.stats.rank``: overlapping intervals tie), the mean
[95% bootstrap interval] over seeds and ★ on the winners; then the findings' verdicts
(``findings.check_extend_findings``) and how many pre-trained models did not learn the passkey
(below the gate at L), in the aligned plain-text columns of the lab's answer.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path

from .config import ExtendConfig
from .figures import EXTEND_LABELS, METRIC_NAMES
from .findings import check_extend_findings, check_findings
from .progress import plural
from .report import encoding_order, read_extend
from .results import ExtendKey, Panel, higher_is_better
from .stats import Interval, bootstrap_interval, rank

WIDTH = 100
WIN = "★"


def text_table(header: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "  ") -> str:
    """``rows`` under ``header`` in columns padded to their widest cell, two spaces apart."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = [
        indent + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]
    return "\n".join(lines)


def wrapped(text: str, indent: str, width: int = WIDTH) -> str:
    """``text`` wrapped at ``width`` columns, every line indented by ``indent``."""
    return textwrap.fill(text, width, initial_indent=indent, subsequent_indent=indent + "  ")


def panel_text(p: Panel) -> str:
    """One task config: its encodings' ranks and intervals beyond training, then the winners."""
    better = "higher" if higher_is_better(p.metric) else "lower"
    chance = "" if p.chance is None else f"; chance {p.chance:.2f}"
    title = (
        f"{p.label}: trained on lengths {p.train_min}-{p.train_max}; "
        f"{METRIC_NAMES.get(p.metric, p.metric)}, {better} is better{chance}"
    )
    if not p.beyond:
        return f"{title}\n  no length evaluated beyond training"
    ranks = {n: p.ranking(n) for n in p.beyond}
    header = ["encoding", "learned", *(f"{n} ({n / p.train_max:g}x)" for n in p.beyond)]
    rows = []
    for enc in encoding_order(p):
        runs = p.of(enc)
        learned_runs = min(p.cell(enc, n).n_learned for n in p.beyond)
        row = [enc, f"{learned_runs} of {len(runs)}"]
        for n in p.beyond:
            cell = p.cell(enc, n)
            if cell.interval is None:
                row.append("    did not learn" if cell.n_total else "    -")
                continue
            rank = ranks[n].get(enc)
            mark = f"{rank}." if rank is not None else "-"  # too few seeds: shown, not ranked
            star = f" {WIN}" if rank == 1 else ""
            row.append(f"{mark:>3} {cell.interval.text(digits(p))}{star}")
        rows.append(row)
    winners = []
    for n in p.beyond:
        best = [e for e in encoding_order(p) if ranks[n].get(e) == 1]
        names = ", ".join(best) or "none (too few learned seeds)"
        winners.append(wrapped(f"winners at {n} ({n / p.train_max:g}x): {names}", "  "))
    return "\n".join([title, text_table(header, rows), *winners])


def digits(p: Panel) -> int:
    """Decimals shown: two for exact match and accuracy, three for a loss."""
    return 3 if p.metric == "loss" else 2


def answer_text(groups: list[Panel], *, total: int, failed: int) -> str:
    """The whole answer: every task config, the findings, the runs that did not learn."""
    parts = [
        wrapped(
            "The answer beyond the training length: rank. mean [95% bootstrap interval] over "
            f"the seeds that learned; {WIN} = a winner (rank 1; overlapping intervals tie).",
            "",
        ),
        *(panel_text(p) for p in groups),
    ]
    findings = ["Published findings (rules fixed in advance: posenc.lab.findings):"]
    for f in check_findings(groups):
        findings.append(wrapped(f"{f.claim} ({f.source})", "  "))
        for v in f.verdicts:
            findings.append(wrapped(f"{v.task}: {v.verdict} ({v.reason})", "    "))
        if not f.verdicts:
            findings.append(wrapped(f"not measured: {f.missing}", "    "))
    parts.append("\n".join(findings))
    if failed:
        parts.append(
            f"{plural(failed, 'run')} of {total} did not learn its task (below the competence "
            "gate at the training lengths): left out of the comparisons"
        )
    else:
        learned_all = "all " + plural(total, "run") + " learned their task" if total > 1 else ""
        parts.append(f"{learned_all or '1 run learned its task'} (passed the competence gate)")
    return "\n\n".join(parts) + "\n"


# --- the extend suite's answer (``posenc lab extend``) -------------------------------------------


def extend_settings(cfg: ExtendConfig) -> dict[str, Callable[[int], ExtendKey]]:
    """Each compared setting's name -> its result key at factor s."""
    found = {
        f"RoPE {EXTEND_LABELS[m]}, {variant}": _extend_key(cfg, "rope", m, variant)
        for variant in ("free", "tuned")
        for m in cfg.methods
    }
    return found | {
        EXTEND_LABELS[enc]: _extend_key(cfg, enc, "none", "free") for enc in cfg.baselines
    }


def _extend_key(
    cfg: ExtendConfig, encoding: str, method: str, variant: str
) -> Callable[[int], ExtendKey]:
    return lambda s: (encoding, method, variant, s, s * cfg.context)


def measure_text(
    title: str,
    cfg: ExtendConfig,
    values: Callable[[ExtendKey], dict[int, float]],
    *,
    higher_is_better: bool,
    digits: int,
) -> str:
    """One measure's table (settings x factors) and its winners per factor."""
    keys = extend_settings(cfg)
    factors = sorted(cfg.factors)
    cells: dict[int, dict[str, Interval]] = {}
    for s in factors:
        found = {name: values(key(s)) for name, key in keys.items()}
        cells[s] = {n: bootstrap_interval(list(v.values())) for n, v in found.items() if v}
    ranks = {s: rank(cells[s], higher_is_better=higher_is_better) for s in factors}
    first = factors[0]
    sign = -1.0 if higher_is_better else 1.0

    def order(name: str) -> tuple[float, float]:
        iv = cells[first].get(name)
        return (1e9, 0.0) if iv is None else (ranks[first].get(name, 1e6), sign * iv.mean)

    names = sorted(keys, key=order)
    rows = []
    for name in names:
        row = [name]
        for s in factors:
            iv = cells[s].get(name)
            if iv is None:
                row.append("    -")
                continue
            r = ranks[s].get(name)
            mark = f"{r}." if r is not None else "-"
            row.append(f"{mark:>3} {iv.text(digits)}{f' {WIN}' if r == 1 else ''}")
        rows.append(row)
    header = ["setting", *(f"{s * cfg.context} ({s}x)" for s in factors)]
    winners = [
        wrapped(
            f"winners at {s}x: {'; '.join(n for n in names if ranks[s].get(n) == 1) or 'none'}",
            "  ",
        )
        for s in factors
    ]
    return "\n".join([title, text_table(header, rows), *winners])


def extend_answer_text(out: str | Path, cfg: ExtendConfig) -> str:
    """The extension lab's answer for the results of ``cfg`` stored in ``out``."""
    results, units, gated = read_extend(out, cfg)
    L = cfg.context
    pretrained = {u["name"]: u["info"] for u in units if u["name"].startswith("pretrain/")}
    parts = [
        wrapped(
            f"The answer beyond the training context L = {L}: rank. mean [95% bootstrap "
            f"interval] over seeds; {WIN} = a winner (rank 1; overlapping intervals tie). free: "
            "the method applied to the trained model; tuned: after the short fine-tune.",
            "",
        ),
        measure_text(
            "loss over the window (nats per token), lower is better",
            cfg,
            results.loss,
            higher_is_better=False,
            digits=3,
        ),
        measure_text(
            "passkey accuracy (mean over depths), higher is better",
            cfg,
            results.passkey,
            higher_is_better=True,
            digits=2,
        ),
    ]
    findings = ["Published findings (rules fixed in advance: posenc.lab.findings):"]
    for f in check_extend_findings(results, cfg, gated):
        findings.append(wrapped(f"{f.verdict}: {f.claim} ({f.source})", "  "))
    parts.append("\n".join(findings))
    missed = sorted(n for n, info in pretrained.items() if not info.get("passed_gate"))
    gate = f"passkey accuracy >= {cfg.gate} at L"
    if missed:
        parts.append(
            wrapped(
                f"{len(missed)} of {len(pretrained)} pre-trained models did not learn the passkey "
                f"({gate}): {', '.join(missed)}; the passkey parts of the findings use only the "
                "seeds whose RoPE model passed",
                "",
            )
        )
    else:
        parts.append(f"all {len(pretrained)} pre-trained models learned the passkey ({gate})")
    return "\n\n".join(parts) + "\n"
