"""Sweep progress: rich bars with ETA on a terminal, one plain line per event otherwise."""

from __future__ import annotations

import sys
import time
from typing import Any

from .config import stored_label
from .executors import RunFailure
from .train import RunResult


def plural(count: int, noun: str) -> str:
    """``plural(1, "run")`` is "1 run", ``plural(54, "run")`` is "54 runs"."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def progress_bar() -> Any:
    """A rich progress bar on stderr (description, bar, n of N, elapsed, eta): the plain log
    lines go there too and stdout stays clean."""
    from rich import progress as rp
    from rich.console import Console

    return rp.Progress(
        rp.TextColumn("{task.description}"),
        rp.BarColumn(),
        rp.MofNCompleteColumn(),
        rp.TimeElapsedColumn(),
        rp.TextColumn("eta"),
        rp.TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=False,
    )


class SweepProgress:
    """Context manager with ``steps(key, done, loss)``, ``run_done`` and ``run_failed``."""

    def __init__(
        self,
        total: int,
        skipped: int,
        *,
        steps: int,
        budgets: dict[str, int] | None = None,
        live: bool | None = None,
    ) -> None:
        """``steps``: each run's step budget, or ``budgets[key]`` where a run has its own."""
        self.total, self.skipped, self.steps_per_run = total, skipped, steps
        self.budgets = budgets or {}
        self.live = sys.stderr.isatty() if live is None else live
        self.done, self.start = 0, time.perf_counter()
        self._done_steps: dict[str, int] = {}
        self._bar: Any = None

    def __enter__(self) -> SweepProgress:
        self.log(f"{plural(self.total, 'run')} to do, {self.skipped} already in the store")
        if self.live and self.total:
            self._bar = progress_bar()
            self._bar.start()
            self._runs = self._bar.add_task("runs", total=self.total)
            budgets = [*self.budgets.values()]
            total = sum(budgets) + (self.total - len(budgets)) * self.steps_per_run
            self._steps = self._bar.add_task("steps", total=total)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()

    def log(self, line: str) -> None:
        if self._bar is not None:  # above the bars; one line, no source path, no markup
            self._bar.console.print(line, soft_wrap=True, markup=False)
        else:
            print(line, file=sys.stderr, flush=True)

    def steps(self, key: str, done: int, loss: float, *, describe: bool = True) -> None:
        """Run ``key`` has trained ``done`` steps (its latest loss ``loss``)."""
        delta = done - self._done_steps.get(key, 0)
        if delta <= 0:
            return
        self._done_steps[key] = done
        if self._bar is not None:
            text = {"description": f"steps (loss {loss:.3f})"} if describe else {}
            self._bar.update(self._steps, advance=delta, **text)

    def _run_ended(self, key: str, line: str) -> None:
        """Count the steps a run never reported (it failed, stopped at the gate, or its
        executor reports none), the run, and log ``line`` after its ``[done/total]``."""
        self.steps(key, self.budgets.get(key, self.steps_per_run), 0.0, describe=False)
        self.done += 1
        self.log(f"[{self.done}/{self.total}] {line}")
        if self._bar is not None:
            self._bar.update(self._runs, advance=1)

    def run_failed(self, failure: RunFailure) -> None:
        c = failure.config
        self._run_ended(c.key(), f"FAILED {c.label} {c.task.name} seed {c.seed}: {failure.error}")

    def run_done(self, result: RunResult) -> None:
        cfg = result.config
        metric = "loss" if cfg["task"]["name"] == "lm" else "exact_match"
        by_len = {n: v for n, name, v in result.metrics if name == metric}
        values = " ".join(f"{n}:{v:.2f}" for n, v in sorted(by_len.items()))
        done = self.done + 1  # this run included
        eta = (time.perf_counter() - self.start) / done * (self.total - done)
        self._run_ended(
            result.key,
            f"{stored_label(cfg):<12} "
            f"{cfg['task']['name']:<10} seed {cfg['seed']}  "
            f"{result.seconds:5.1f}s ({result.cpu_seconds:.1f}s cpu)  {gate_text(result)}  "
            f"{metric.replace('_', ' ')} by length {values}  (eta {eta:.0f}s)",
        )


def gate_text(result: RunResult) -> str:
    """``gate 0.996 in 1300 steps``, or ``DID NOT LEARN: gate 0.830 after 3000 steps``."""
    text = f"gate {result.gate_metric:.3f} {{}} {result.steps_trained} steps"
    if result.passed_gate:
        return text.format("in")
    return "DID NOT LEARN: " + text.format("after")
