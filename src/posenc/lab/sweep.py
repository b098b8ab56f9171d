"""Run a sweep: expand the grid, skip runs already in the store, store each run as it ends.

Runs are keyed by ``RunConfig.key()`` and stored whole, so re-running a sweep killed at any
moment (even ``kill -9``) loses only the runs in flight and never duplicates a finished one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .config import RunConfig, SweepConfig, expand
from .executors import Executor, LocalExecutor, RunFailure
from .progress import SweepProgress
from .store import ResultStore

STORE_NAME = "results.sqlite"


@dataclass(frozen=True)
class SweepOutcome:
    """The sweep's run configs (all of them, finished earlier or now) and where they are."""

    runs: list[RunConfig]
    store: Path
    ran: int
    skipped: int
    failed: list[RunFailure]


def run_sweep(
    sweep: SweepConfig,
    out_dir: str | Path,
    *,
    executor: Executor | None = None,
    live: bool | None = None,
) -> SweepOutcome:
    """Run every unfinished cell of ``sweep`` into ``out_dir/results.sqlite`` (checkpoints in
    ``out_dir/checkpoints``). ``executor`` defaults to a local process pool."""
    out = Path(out_dir)
    runs = list({r.key(): r for r in expand(sweep)}.values())  # equal keys: equal runs
    with ResultStore(out / STORE_NAME) as store:
        finished = store.finished_keys()
        todo = [r for r in runs if r.key() not in finished]
        progress = SweepProgress(
            len(todo), len(runs) - len(todo), steps=sweep.train.steps, live=live
        )
        executor = LocalExecutor() if executor is None else executor
        if isinstance(executor, LocalExecutor) and executor.on_steps is None:
            executor.on_steps = progress.steps
        failed = []
        by_key = {r.key(): r for r in todo}
        with progress:
            for result in executor.map(todo, out / "checkpoints"):
                if not isinstance(result, RunFailure):
                    try:
                        store.add(result, sweep=sweep.name)
                    except ValueError as err:  # a NaN metric: report it, store nothing
                        result = RunFailure.of(by_key[result.key], err)
                if isinstance(result, RunFailure):
                    failed.append(result)
                    progress.run_failed(result)
                else:
                    progress.run_done(result)
    ran = len(todo) - len(failed)
    return SweepOutcome(runs, out / STORE_NAME, ran, len(runs) - len(todo), failed)
