"""Check a sweep's results against published findings on length generalisation.

Each finding is tested on the measured exact match, averaged over seeds, at evaluation
lengths beyond the longest training length ("beyond" = mean over those lengths):

1. Learned absolute positions do not extrapolate on copy/sort (Kazemnejad et al. 2023,
   arXiv:2305.19466; Ruoss et al. 2023): learned stays <= 0.1 beyond training.
2. NoPE and relative/bias encodings extrapolate further than absolute ones in decoders
   (Kazemnejad et al. 2023): the best of nope/alibi/t5/kerple/fire beats the best of
   sinusoidal/learned beyond training on decoder tasks.
3. Randomized positions help extrapolation (Ruoss et al. 2023, arXiv:2305.16843): a
   ``randomized*`` encoding beats ``rope`` beyond training, on average over tasks.
4. ALiBi's language-model loss stays flat past the training length while sinusoidal and
   RoPE rise (Press et al. 2022, arXiv:2108.12409): on ``lm``, loss in the last position
   bucket / loss in the first is <= 1.1 for alibi and below that of sinusoidal and rope.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from statistics import mean
from typing import Any

from .tasks import DECODER_TASKS

ABSOLUTE = ("sinusoidal", "learned")
RELATIVE = ("nope", "alibi", "t5", "kerple", "fire")


@dataclass(frozen=True)
class Finding:
    claim: str
    source: str
    status: str  # "reproduced", "not reproduced", "not measured"
    evidence: str


def _mean_exact(rows: list[dict[str, Any]], beyond: bool) -> dict[tuple[str, str], float]:
    """(encoding, task) -> exact match averaged over seeds and lengths > train_max (``beyond``)
    or at the longest training length."""
    acc: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in rows:
        at = r["length"] > r["train_max"] if beyond else r["length"] == r["train_max"]
        if r["metric"] == "exact_match" and at:
            acc[r["encoding"], r["task"]].append(r["value"])
    return {k: mean(v) for k, v in acc.items()}


def check_findings(rows: list[dict[str, Any]]) -> list[Finding]:
    """The four findings, each with the numbers behind its verdict."""
    beyond = _mean_exact(rows, beyond=True)
    return [
        _learned(beyond, _mean_exact(rows, beyond=False)),
        _relative(beyond),
        _randomized(beyond),
        _alibi_lm(rows),
    ]


def _learned(
    beyond: dict[tuple[str, str], float], at_train: dict[tuple[str, str], float]
) -> Finding:
    """Only tasks learned at the training length (>= 0.5) count: failing everywhere says
    nothing about extrapolation."""
    claim = "Learned absolute positions do not extrapolate on copy/sort"
    src = "Kazemnejad et al. 2023; Ruoss et al. 2023"
    cells = {
        t: v
        for (e, t), v in beyond.items()
        if e == "learned" and t.startswith(("copy", "sort")) and at_train.get((e, t), 0) >= 0.5
    }
    if not cells:
        return Finding(claim, src, "not measured", "no learned run that solved copy/sort in range")
    ok = all(v <= 0.1 for v in cells.values())
    beyond_at = ", ".join(f"learned on {t}: {v:.2f}" for t, v in sorted(cells.items()))
    learned_at = ", ".join(f"{at_train['learned', t]:.2f}" for t in sorted(cells))
    return Finding(claim, src, _status(ok), f"{beyond_at} (at the training length: {learned_at})")


def _relative(beyond: dict[tuple[str, str], float]) -> Finding:
    claim = "NoPE and relative/bias encodings extrapolate further than absolute ones (decoder)"
    src = "Kazemnejad et al. 2023"
    tasks = sorted({t for _, t in beyond if t in DECODER_TASKS})
    parts, wins = [], 0
    for t in tasks:
        rel = {e: beyond[e, t] for e in RELATIVE if (e, t) in beyond}
        ab = {e: beyond[e, t] for e in ABSOLUTE if (e, t) in beyond}
        if rel and ab:
            best_rel, best_abs = max(rel, key=rel.__getitem__), max(ab, key=ab.__getitem__)
            wins += rel[best_rel] > ab[best_abs]
            parts.append(f"{t}: {best_rel} {rel[best_rel]:.2f} vs {best_abs} {ab[best_abs]:.2f}")
    if not parts:
        return Finding(
            claim, src, "not measured", "needs relative and absolute runs on a decoder task"
        )
    return Finding(claim, src, _status(wins == len(parts)), "; ".join(parts))


def _randomized(beyond: dict[tuple[str, str], float]) -> Finding:
    claim = "Randomized positions help extrapolation (vs RoPE)"
    src = "Ruoss et al. 2023"
    rand = sorted({e for e, _ in beyond if e.startswith("randomized")})
    tasks = sorted({t for e, t in beyond if e == "rope"})
    pairs = [(beyond[e, t], beyond["rope", t]) for e in rand for t in tasks if (e, t) in beyond]
    if not pairs:
        return Finding(claim, src, "not measured", "needs randomized and rope runs on one task")
    r, base = mean(p[0] for p in pairs), mean(p[1] for p in pairs)
    evidence = f"{', '.join(rand)} {r:.2f} vs rope {base:.2f} (mean beyond training)"
    return Finding(claim, src, _status(r > base), evidence)


def _alibi_lm(rows: list[dict[str, Any]]) -> Finding:
    claim = "ALiBi's LM loss stays flat past the training length; sinusoidal and RoPE rise"
    src = "Press et al. 2022"
    rise = lm_loss_rise(rows)
    others = {e: v for e, v in rise.items() if e in ("sinusoidal", "rope")}
    if "alibi" not in rise or not others:
        return Finding(claim, src, "not measured", "needs lm runs of alibi and sinusoidal/rope")
    ok = rise["alibi"] <= 1.1 and all(rise["alibi"] < v for v in others.values())
    evidence = ", ".join(f"{e} x{v:.2f}" for e, v in sorted(rise.items()))
    return Finding(claim, src, _status(ok), f"loss at the longest / first bucket: {evidence}")


def lm_loss_rise(rows: list[dict[str, Any]]) -> dict[str, float]:
    """encoding -> mean over runs (seeds, training lengths) of (lm loss in the last position
    bucket / in the first); each ratio is taken within one run."""
    loss: dict[tuple[Any, ...], dict[int, float]] = defaultdict(dict)
    for r in rows:
        if r["task"] == "lm" and r["metric"] == "loss":  # one run: its key, else these fields
            run = (r["encoding"], r["seed"], r["train_max"], r.get("run_key"))
            loss[run][r["length"]] = r["value"]
    ratios: dict[str, list[float]] = defaultdict(list)
    for (enc, *_), by_len in loss.items():
        ratios[enc].append(by_len[max(by_len)] / by_len[min(by_len)])
    return {e: mean(v) for e, v in ratios.items()}


def _status(ok: bool) -> str:
    return "reproduced" if ok else "not reproduced"
