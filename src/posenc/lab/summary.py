"""What ``posenc lab`` prints before the paths: the answer, as plain text.

Per task config, a table of the encodings (in the order of the report's table) with, at each
evaluated length beyond training, the rank (1 + the number of encodings whose 95% interval lies
entirely on the better side; overlapping intervals tie), the mean [95% bootstrap interval] over
the seeds that learned and ★ on the winners (rank 1); then the winners per length, the
published findings' verdicts (``posenc.lab.findings``) and how many runs did not learn. Plain
text in aligned columns, no colour and no box drawing, so a log file or a pipe reads as the
terminal does.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from .figures import METRIC_NAMES
from .findings import check_findings
from .progress import plural
from .report import encoding_order
from .results import Panel, higher_is_better

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
