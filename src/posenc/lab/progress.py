"""Sweep progress: rich bars with ETA on a terminal, one plain line per event otherwise."""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import Any

from .train import RunResult


class SweepProgress:
    """Context manager with ``run_done(result)`` and ``step(step, loss)`` callbacks."""

    def __init__(self, total: int, skipped: int, *, steps: int, live: bool | None = None) -> None:
        self.total, self.skipped, self.steps = total, skipped, steps
        self.live = sys.stderr.isatty() if live is None else live
        self.done, self.start = 0, time.perf_counter()
        self._bar: Any = None

    def __enter__(self) -> SweepProgress:
        self.log(f"{self.total} runs to do, {self.skipped} already in the store")
        if self.live and self.total:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("eta"),
                TimeRemainingColumn(),
                transient=False,
            )
            self._bar.start()
            self._runs = self._bar.add_task("runs", total=self.total)
            self._steps = self._bar.add_task("steps", total=self.steps, visible=False)
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._bar is not None:
            self._bar.stop()

    def log(self, line: str) -> None:
        if self._bar is not None:
            self._bar.console.log(line)
        else:
            print(line, file=sys.stderr, flush=True)

    def step(self, step: int, loss: float) -> None:
        """A training step of the run in this process (only the in-process executor)."""
        if self._bar is not None:
            self._bar.update(
                self._steps,
                completed=step + 1,
                visible=True,
                description=f"steps (loss {loss:.3f})",
            )

    def run_done(self, result: RunResult) -> None:
        self.done += 1
        cfg = result.config
        best = {n: v for n, name, v in result.metrics if name == "exact_match"}
        accs = " ".join(f"{n}:{v:.2f}" for n, v in sorted(best.items()))
        elapsed = time.perf_counter() - self.start
        eta = elapsed / self.done * (self.total - self.done)
        self.log(
            f"[{self.done}/{self.total}] {cfg['encoding']:<12} {cfg['task']['name']:<10} "
            f"seed {cfg['seed']}  {result.seconds:5.1f}s ({result.cpu_seconds:.1f}s cpu)  "
            f"exact match by length {accs}  (eta {eta:.0f}s)"
        )
        if self._bar is not None:
            self._bar.update(self._runs, advance=1)
