"""What ``posenc lab extend`` prints before the paths: the answer, as plain text.

Two measures beyond the training context L, each a table of every setting (RoPE under each
method, training-free and fine-tuned; ALiBi, NoPE and FIRE unchanged) against each length
factor·L: the loss over the window (lower is better) and the passkey accuracy (higher is
better), each cell the rank (``posenc.lab.stats.rank``: overlapping intervals tie), the mean
[95% bootstrap interval] over seeds and ★ on the winners; then the findings' verdicts
(``posenc.extlab.findings``) and how many pre-trained models did not learn the passkey (below
the gate at L). Plain text in aligned columns, as ``posenc.lab.summary``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..lab.stats import Interval, rank
from ..lab.summary import WIN, text_table, wrapped
from .config import ExtendConfig
from .figures import LABELS
from .findings import check_findings
from .report import read
from .results import Key
from .stats import bootstrap_interval


def settings(cfg: ExtendConfig) -> dict[str, Callable[[int], Key]]:
    """Each compared setting's name -> its result key at factor s."""
    found = {
        f"RoPE {LABELS[m]}, {variant}": _key(cfg, "rope", m, variant)
        for variant in ("free", "tuned")
        for m in cfg.methods
    }
    return found | {LABELS[enc]: _key(cfg, enc, "none", "free") for enc in cfg.baselines}


def _key(cfg: ExtendConfig, encoding: str, method: str, variant: str) -> Callable[[int], Key]:
    return lambda s: (encoding, method, variant, s, s * cfg.context)


def measure_text(
    title: str,
    cfg: ExtendConfig,
    values: Callable[[Key], dict[int, float]],
    *,
    higher_is_better: bool,
    digits: int,
) -> str:
    """One measure's table (settings x factors) and its winners per factor."""
    keys = settings(cfg)
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


def answer_text(out: str | Path, cfg: ExtendConfig) -> str:
    """The extension lab's answer for the results of ``cfg`` stored in ``out``."""
    results, units, gated = read(out, cfg)
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
    findings = ["Published findings (rules fixed in advance: posenc.extlab.findings):"]
    for f in check_findings(results, cfg, gated):
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
