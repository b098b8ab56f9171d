"""Do two result stores of one sweep agree (``posenc lab compare A B``)? The question a lab
result must answer before anyone cites it: made again on another CPU (other kernels, other
rounding, so other training trajectories), do the findings and rankings come out the same?

Compared, per task config (matched by label) and length beyond training:

- the findings' verdicts per task (``findings.check_findings``);
- which encodings learned their task (a ranked encoding in one store, not in the other);
- every pair of encodings ranked in both stores, by ``stats.compare`` of their intervals:
  *reversed* when one store puts a above b and the other b above a (a contradiction),
  *loosened* when one separates them and the other ties them (overlapping intervals).

Agreement means equal verdicts, equal learned sets and no reversed or loosened pair, i.e. the
same ranking with the same ties.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path

from .findings import check_findings
from .results import Panel, higher_is_better, load_runs, panels
from .stats import compare
from .store import ResultStore


@dataclass(frozen=True)
class Difference:
    """One place where the stores differ: ``where`` (task, length or finding), ``what``
    (``verdict``, ``learned``, ``reversed``, ``loosened``) and each store's side."""

    where: str
    what: str
    a: str
    b: str


@dataclass(frozen=True)
class Agreement:
    """What was compared (``verdicts``, ``pairs`` counted) and where the stores differ."""

    verdicts: int
    pairs: int
    differences: list[Difference] = field(default_factory=list)

    @property
    def agree(self) -> bool:
        return not self.differences

    def count(self, what: str) -> int:
        return sum(d.what == what for d in self.differences)


def compare_stores(a: str | Path, b: str | Path) -> Agreement:
    """Compare the stores at ``a`` and ``b`` (see the module doc).

    Raises: ValueError when a store holds no finished runs or the two share no task config.
    """
    pa, pb = _panels(a), _panels(b)
    shared = [label for label in pa if label in pb]
    if not shared:
        raise ValueError(f"{a} and {b} share no task config: {sorted(pa)} against {sorted(pb)}")
    diffs: list[Difference] = []
    pairs = 0
    for label in shared:
        for n in sorted(set(pa[label].beyond) & set(pb[label].beyond)):
            where = f"{label} {n} ({n / pa[label].train_max:g}x)"
            diffs += _learned(where, pa[label], pb[label], n)
            found, counted = _pairs(where, pa[label], pb[label], n)
            diffs += found
            pairs += counted
    verdicts = _verdicts([pa[k] for k in shared], [pb[k] for k in shared])
    diffs += [d for d in verdicts if d.a != d.b]
    return Agreement(len(verdicts), pairs, diffs)


def _panels(path: str | Path) -> dict[str, Panel]:
    with ResultStore(path, readonly=True) as store:
        runs = load_runs(store)
    if not runs:
        raise ValueError(f"{path}: no finished runs to compare")
    return {p.label: p for p in panels(runs)}


def _learned(where: str, a: Panel, b: Panel, n: int) -> list[Difference]:
    """Encodings ranked (enough learned seeds) at ``n`` in one store and not the other."""
    ra, rb = a.ranking(n), b.ranking(n)
    out = []
    for enc in sorted((set(ra) ^ set(rb)) & set(a.encodings) & set(b.encodings)):
        ca, cb = a.cell(enc, n), b.cell(enc, n)
        sides = [f"{c.n_learned} of {c.n_total} learned" for c in (ca, cb)]
        out.append(Difference(f"{where}: {enc}", "learned", *sides))
    return out


def _pairs(where: str, a: Panel, b: Panel, n: int) -> tuple[list[Difference], int]:
    """Pairs ranked in both stores whose order differs, and how many pairs were compared."""
    ra, rb = a.ranking(n), b.ranking(n)
    both = [e for e in a.encodings if e in ra and e in rb]
    better = higher_is_better(a.metric)
    out, counted = [], 0
    for x, y in combinations(both, 2):
        sa = _order(a, x, y, n, better)
        sb = _order(b, x, y, n, better)
        counted += 1
        if sa == sb:
            continue
        what = "reversed" if sa and sb else "loosened"
        out.append(
            Difference(f"{where}: {x} vs {y}", what, _says(a, x, y, n, sa), _says(b, x, y, n, sb))
        )
    return out, counted


def _order(p: Panel, x: str, y: str, n: int, better: bool) -> int:
    ix, iy = p.cell(x, n).interval, p.cell(y, n).interval
    assert ix is not None and iy is not None  # ranked cells have intervals
    return compare(ix, iy, higher_is_better=better)


def _says(p: Panel, x: str, y: str, n: int, order: int) -> str:
    ix, iy = p.cell(x, n).interval, p.cell(y, n).interval
    assert ix is not None and iy is not None
    rel = {1: ">", -1: "<", 0: "~"}[order]
    return f"{x} {ix.text()} {rel} {y} {iy.text()}"


def _verdicts(a: list[Panel], b: list[Panel]) -> list[Difference]:
    """Every (finding, task) verdict of either store, as a Difference (equal sides: agree)."""
    found: dict[str, list[str]] = {}
    for side, groups in enumerate((a, b)):
        for f in check_findings(groups):
            for v in f.verdicts:
                found.setdefault(f"{f.claim} ({f.source}) on {v.task}", ["-", "-"])[side] = (
                    v.verdict
                )
    return [Difference(where, "verdict", *sides) for where, sides in found.items()]


def agreement_markdown(result: Agreement, a: str, b: str) -> str:
    """``result`` as Markdown: a summary line, then one table row per difference."""
    head = (
        f"{a} against {b}: {result.verdicts} verdicts, {result.pairs} ranked pairs; "
        f"{result.count('verdict')} verdicts differ, {result.count('learned')} learned sets "
        f"differ, {result.count('reversed')} pairs reversed, {result.count('loosened')} pairs "
        "separated in one and tied in the other."
    )
    if result.agree:
        return head + " The two agree.\n"
    rows = [f"| {d.where} | {d.what} | {d.a} | {d.b} |" for d in result.differences]
    table = ["| where | differs in | " + a + " | " + b + " |", "|---|---|---|---|", *rows]
    return "\n".join([head, "", *table]) + "\n"
