"""A sweep's stored runs, read for comparison: which runs learned their task, the task configs
they are grouped by, and per (encoding, length) the statistics of the runs that learned.

``learned(run)``: a run counts as having learned its task when it passed the competence gate
(``passed_gate`` in the store). Stores written before the gate existed carry none; there a run
learned when its primary metric is >= ``GATE`` (0.99) at every evaluated length up to its
longest training length (an LM run, whose metric is a loss with no such threshold, counts as
learned). A run that did not learn is left out of every statistic beyond the training length,
every ranking and every finding, and shown as "did not learn" with a count.

The extend suite's rows, ``ExtendResults``:

Stored rows read back per seed: the numbers the findings, tables and figures compare.

Every reader returns ``{seed: value}`` so that comparisons pair seeds (the same seed's model,
data and evaluation text on both sides). ``base`` is the unchanged RoPE model at L.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .stats import Interval, bootstrap_interval, rank
from .store import ExtendRow, ResultStore

GATE = 0.99


@dataclass(frozen=True)
class Run:
    """One stored run and its metrics ``(metric, length) -> value``."""

    key: str
    encoding: str
    task: str
    seed: int
    train_max: int
    metrics: Mapping[tuple[str, int], float]
    config: Mapping[str, Any]
    passed_gate: bool | None = None
    gate_metric: float | None = None
    checkpoint: str | None = None
    seconds: float = 0.0
    cpu_seconds: float = 0.0


def primary_metric(task: str) -> str:
    """What a task is judged by: loss for the LM, exact match for every other task."""
    from .tasks import TASKS

    return "loss" if task in TASKS and TASKS[task].kind == "lm" else "exact_match"


def higher_is_better(metric: str) -> bool:
    return metric != "loss"


def learned(run: Run | Mapping[str, Any]) -> bool:
    """Whether ``run`` learned its task (see the module doc): its ``passed_gate`` when stored,
    else the primary metric at the training lengths. A store row (mapping) must carry
    ``passed_gate``; without it only a ``Run`` (with its metrics) can tell.

    Raises: ValueError for a mapping without ``passed_gate``.
    """
    gate = run.passed_gate if isinstance(run, Run) else run.get("passed_gate")
    if gate is not None:
        return bool(gate)
    if not isinstance(run, Run):
        raise ValueError(
            f"learned() needs a row with 'passed_gate' or a Run with its metrics, got keys "
            f"{sorted(run)}"
        )
    metric = primary_metric(run.task)
    if metric == "loss":
        return True
    at_train = [v for (m, n), v in run.metrics.items() if m == metric and n <= run.train_max]
    return bool(at_train) and min(at_train) >= GATE


def load_runs(store: ResultStore, keys: Iterable[str] | None = None) -> list[Run]:
    """The stored runs (only ``keys`` if given) with their metrics."""
    keys = None if keys is None else set(keys)
    return collect_runs(store.runs(keys), store.rows(keys))


def collect_runs(run_rows: list[dict[str, Any]], rows: list[dict[str, Any]]) -> list[Run]:
    """``Run``s from ``ResultStore.runs()`` and ``ResultStore.rows()`` output."""
    metrics: dict[str, dict[tuple[str, int], float]] = defaultdict(dict)
    for r in rows:
        metrics[r["run_key"]][r["metric"], r["length"]] = r["value"]
    return [
        Run(
            key=r["key"],
            encoding=r["encoding"],
            task=r["task"],
            seed=r["seed"],
            train_max=r["train_max"],
            metrics=metrics[r["key"]],
            config=r["config"],
            passed_gate=None if r.get("passed_gate") is None else bool(r["passed_gate"]),
            gate_metric=r.get("gate_metric"),
            checkpoint=r.get("checkpoint"),
            seconds=r.get("seconds", 0.0),
            cpu_seconds=r.get("cpu_seconds", 0.0),
        )
        for r in run_rows
    ]


@dataclass(frozen=True)
class Cell:
    """Statistics of one (encoding, length) over the runs that learned; ``dnl_seeds``: the
    seeds of the runs that did not learn."""

    interval: Interval | None
    n_total: int
    dnl_seeds: tuple[int, ...]

    @property
    def n_learned(self) -> int:
        return self.n_total - len(self.dnl_seeds)


@dataclass(frozen=True)
class Panel:
    """The runs of one task config: one task with one set of resolved settings (training
    lengths, evaluation lengths, vocabulary). Only these runs are compared with each other."""

    task: str
    label: str  # the task's name, with the settings that tell its configs apart if several
    train_min: int
    train_max: int
    eval_lens: tuple[int, ...]
    n_symbols: int
    chance: float | None
    runs: tuple[Run, ...]

    @property
    def metric(self) -> str:
        return primary_metric(self.task)

    @property
    def encodings(self) -> list[str]:
        return list(dict.fromkeys(r.encoding for r in self.runs))

    @property
    def lengths(self) -> list[int]:
        """Evaluated lengths with a value of the panel's metric, ascending."""
        return sorted({n for r in self.runs for (m, n) in r.metrics if m == self.metric})

    @property
    def beyond(self) -> list[int]:
        """Evaluated lengths past the longest training length."""
        return [n for n in self.lengths if n > self.train_max]

    def of(self, encoding: str) -> list[Run]:
        return [r for r in self.runs if r.encoding == encoding]

    def cell(self, encoding: str, length: int) -> Cell:
        """Mean and interval over the learned runs of ``encoding`` at ``length``."""
        mine = [r for r in self.of(encoding) if (self.metric, length) in r.metrics]
        values = [r.metrics[self.metric, length] for r in mine if learned(r)]
        dnl = tuple(sorted(r.seed for r in mine if not learned(r)))
        return Cell(bootstrap_interval(values) if values else None, len(mine), dnl)

    def ranking(self, length: int) -> dict[str, int]:
        """encoding -> rank at ``length`` (comparable cells only; ``stats.rank``'s rule)."""
        cells = {e: self.cell(e, length).interval for e in self.encodings}
        comparable = {e: c for e, c in cells.items() if c is not None}
        return rank(comparable, higher_is_better=higher_is_better(self.metric))

    def seed_scores(self, encoding: str, score: Callable[[Run], float | None]) -> dict[int, float]:
        """seed -> ``score(run)`` for the learned runs of ``encoding`` (None scores dropped)."""
        scores = {r.seed: score(r) for r in self.of(encoding) if learned(r)}
        return {s: v for s, v in scores.items() if v is not None}


def beyond_score(run: Run, metric: str) -> float | None:
    """Mean of ``metric`` over the run's evaluated lengths past its longest training length."""
    past = [v for (m, n), v in run.metrics.items() if m == metric and n > run.train_max]
    return sum(past) / len(past) if past else None


def panels(runs: list[Run], order: list[str] | None = None) -> list[Panel]:
    """A panel per task and resolved settings (equal settings spelled differently share one),
    in order of first appearance in ``runs``; encodings in ``order`` (default: as in ``runs``)."""
    from .config import TaskConfig

    rank_of = {e: i for i, e in enumerate(order or [])}
    runs = sorted(runs, key=lambda r: rank_of.get(r.encoding, len(rank_of)))  # stable
    groups: dict[tuple[Any, ...], list[Run]] = {}
    built: dict[tuple[Any, ...], Any] = {}
    for r in runs:
        task = TaskConfig(**_tuples(r.config["task"])).build()
        key = (task.name, task.train_len, task.eval_lens, task.n_symbols)
        built.setdefault(key, task)
        groups.setdefault(key, []).append(r)
    out = []
    for key, members in groups.items():
        task, mine = built[key], _describe(built[key])
        others = [_describe(built[k]) for k in groups if k[0] == task.name]
        differ = [x for i, x in enumerate(mine) if len({o[i] for o in others}) > 1]
        label = f"{task.name} ({', '.join(differ)})" if differ else task.name
        lo, hi = task.train_len
        chance = chance_level(task)
        out.append(
            Panel(task.name, label, lo, hi, task.eval_lens, task.n_symbols, chance, tuple(members))
        )
    return out


def _describe(task: Any) -> tuple[str, str, str]:
    """The settings that can tell two configs of one task apart, as label parts."""
    lo, hi = task.train_len
    lens = ", ".join(map(str, task.eval_lens))
    return (f"train {lo}-{hi}", f"eval {lens}", f"{task.n_symbols} symbols")


def _tuples(task: Mapping[str, Any]) -> dict[str, Any]:
    """A stored task config (JSON lists) with tuples, as ``TaskConfig`` holds them."""
    return {k: tuple(v) if isinstance(v, list) else v for k, v in task.items()}


def chance_level(task: Any) -> float | None:
    """The primary metric of guessing, where it has one: the task's own ``chance`` (exact
    match of a guess), else ln(vocabulary) (a uniform guess) for the LM's loss; None for
    free-form answers (~0)."""
    own = getattr(task, "chance", None)
    if own is not None:
        return float(own)
    if task.kind == "lm":
        return math.log(task.vocab_size)
    return None


# --- the extend suite's rows, read back per seed -------------------------------------------------

ExtendKey = tuple[str, str, str, int, int]  # encoding, method, variant, factor, length


class ExtendResults:
    """Index of stored rows by (encoding, method, variant, factor, length)."""

    def __init__(self, rows: list[ExtendRow]) -> None:
        self._rows: dict[tuple[ExtendKey, str], dict[int, list[ExtendRow]]] = defaultdict(
            lambda: defaultdict(list)
        )
        for r in rows:
            key = (r.encoding, r.method, r.variant, r.factor, r.length)
            self._rows[key, r.metric][r.seed].append(r)

    def loss(self, key: ExtendKey) -> dict[int, float]:
        """Mean next-token loss over the whole window, per seed."""
        return {s: rows[0].value for s, rows in self._rows.get((key, "loss"), {}).items()}

    def passkey(self, key: ExtendKey, seeds: set[int] | None = None) -> dict[int, float]:
        """Passkey accuracy averaged over depths, per seed (only ``seeds`` if given)."""
        found = self._rows.get((key, "passkey"), {})
        return {
            s: float(np.mean([r.value for r in rows]))
            for s, rows in found.items()
            if seeds is None or s in seeds
        }

    def passkey_grid(self, key: ExtendKey) -> dict[float, dict[int, float]]:
        """Accuracy by depth, per seed."""
        grid: dict[float, dict[int, float]] = defaultdict(dict)
        for s, rows in self._rows.get((key, "passkey"), {}).items():
            for r in rows:
                assert r.depth is not None
                grid[r.depth][s] = r.value
        return dict(grid)

    def buckets(self, key: ExtendKey) -> dict[tuple[int, int], dict[int, float]]:
        """Loss by bucket (start, stop), per seed."""
        out: dict[tuple[int, int], dict[int, float]] = defaultdict(dict)
        for s, rows in self._rows.get((key, "bucket"), {}).items():
            for r in rows:
                assert r.start is not None and r.stop is not None
                out[r.start, r.stop][s] = r.value
        return dict(sorted(out.items()))

    def span(self, key: ExtendKey, start: int, stop: int) -> dict[int, float]:
        """Loss over prediction positions start..stop-1 per seed: the mean of the buckets
        inside the span, weighted by their widths (empty when no bucket lies inside)."""
        inside = {b: v for b, v in self.buckets(key).items() if start <= b[0] and b[1] <= stop}
        seeds = set.intersection(*(set(v) for v in inside.values())) if inside else set()
        return {
            s: float(
                sum((b[1] - b[0]) * v[s] for b, v in inside.items())
                / sum(b[1] - b[0] for b in inside)
            )
            for s in seeds
        }
