"""Where runs execute, behind one small interface: ``executor.map(runs)`` yields results as
runs finish. ``local`` is a process pool with one torch thread per process (or the calling
process when ``workers=1``); ``ray`` sends each run to a Ray cluster (``pip install posenc[ray]``)
with fractional GPU requests, so several tiny models share one GPU.
"""

from __future__ import annotations

import importlib.util
import multiprocessing as mp
import os
import queue
import signal
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from .config import RunConfig
from .train import RunResult, train_run


@dataclass(frozen=True)
class RunFailure:
    """A run that raised: the sweep logs it, keeps going, and stores nothing for it (unless
    ``errno``, an OSError's, says it could not write its files: ``sweep.WRITE_ERRNOS``)."""

    config: RunConfig
    error: str
    errno: int | None = None

    @classmethod
    def of(cls, config: RunConfig, err: BaseException) -> RunFailure:
        code = err.errno if isinstance(err, OSError) else None
        return cls(config, f"{type(err).__name__}: {err}", code)


Outcome = RunResult | RunFailure
#: ``on_steps(run_key, steps_done, loss)``: training progress of one run.
StepCallback = Callable[[str, int, float], None]
#: Pool workers report every ``REPORT_EVERY`` steps (and the last one).
REPORT_EVERY = 20
_progress: mp.Queue | None = None  # set in pool workers by ``_init_worker``


class Executor(Protocol):
    def map(self, runs: Sequence[RunConfig], checkpoint_dir: Path | None) -> Iterator[Outcome]:
        """Run every config; yield each result (or failure) when its run ends (any order)."""
        ...


def execute(
    cfg: RunConfig, checkpoint_dir: Path | None, on_steps: StepCallback | None = None
) -> RunResult:
    """Worker entry point: one torch thread, then train and evaluate ``cfg``. Steps go to
    ``on_steps``, or in a pool worker to the pool's progress queue every ``REPORT_EVERY``."""
    import torch

    torch.set_num_threads(1)
    key, steps, report = cfg.key(), cfg.train.steps, _progress

    def on_step(step: int, loss: float) -> None:
        if on_steps is not None:
            on_steps(key, step + 1, loss)
        elif report is not None and ((step + 1) % REPORT_EVERY == 0 or step + 1 == steps):
            report.put((key, step + 1, loss))

    return train_run(cfg, checkpoint_dir=checkpoint_dir, on_step=on_step)


def _init_worker(progress: mp.Queue, parent: int) -> None:
    global _progress
    _progress = progress
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C: the sweep stops its workers
    threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True).start()


def _exit_with_parent(parent: int) -> None:
    """A worker whose sweep was killed (even ``kill -9``) stops within a second instead of
    finishing its run for nobody."""
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(1)


class LocalExecutor:
    """``workers`` processes (default: the CPU count), or this process when ``workers=1``;
    training progress goes to ``on_steps``."""

    def __init__(self, workers: int | None = None, on_steps: StepCallback | None = None) -> None:
        self.workers = (os.cpu_count() or 1) if workers is None else workers
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.on_steps = on_steps

    def map(self, runs: Sequence[RunConfig], checkpoint_dir: Path | None) -> Iterator[Outcome]:
        runs = [place(cfg, i) for i, cfg in enumerate(runs)]
        if self.workers == 1 or len(runs) <= 1:
            yield from self._in_process(runs, checkpoint_dir)
            return
        strikes: dict[str, int] = {}
        while runs:  # a worker that dies breaks its pool: rerun the runs it took down
            broken = yield from self._pool(runs, checkpoint_dir, min(self.workers, len(runs)))
            runs = []
            for cfg in broken:
                strikes[cfg.key()] = strikes.get(cfg.key(), 0) + 1
                if len(broken) > 1 and strikes[cfg.key()] < 2:
                    runs.append(cfg)
                # alone: it broke the pool itself, or goes down with others again (run it alone)
                elif len(broken) == 1 or (yield from self._pool([cfg], checkpoint_dir, 1)):
                    yield RunFailure(cfg, "its worker process died (out of memory? a crash?)")

    def _pool(
        self, runs: list[RunConfig], checkpoint_dir: Path | None, workers: int
    ) -> Generator[Outcome, None, list[RunConfig]]:
        """Run ``runs`` in a pool of ``workers`` processes; yield their outcomes, return the
        runs a dying worker process took down with the pool (run again, or alone)."""
        ctx = mp.get_context("spawn")  # no forked torch state; workers import posenc afresh
        progress = ctx.Queue()
        broken: list[RunConfig] = []
        with ProcessPoolExecutor(
            workers, mp_context=ctx, initializer=_init_worker, initargs=(progress, os.getpid())
        ) as pool:
            # the largest step budgets first: the short runs fill the workers' tails
            by_budget = sorted(runs, key=lambda c: -c.train.steps)  # stable: grid order within
            submitted = {pool.submit(execute, c, checkpoint_dir): c for c in by_budget}
            pending: set[Future[RunResult]] = set(submitted)
            try:
                while pending:
                    done, pending = wait(pending, timeout=0.25, return_when=FIRST_COMPLETED)
                    self._drain(progress)
                    for fut in done:
                        err, cfg = fut.exception(), submitted[fut]
                        if isinstance(err, BrokenProcessPool):
                            broken.append(cfg)
                        else:
                            yield fut.result() if err is None else RunFailure.of(cfg, err)
            except BaseException:  # Ctrl-C, or the sweep stopped reading: no run is waited for
                _terminate(pool)
                raise
            finally:
                for fut in pending:
                    fut.cancel()
        return broken

    def _in_process(self, runs: list[RunConfig], checkpoint_dir: Path | None) -> Iterator[Outcome]:
        """Run ``runs`` here with one torch thread, as a pool worker does (the thread count
        changes float reductions, so metrics would differ from a pool's), then restore it."""
        import torch

        threads = torch.get_num_threads()
        for cfg in runs:
            try:
                outcome: Outcome = execute(cfg, checkpoint_dir, self.on_steps)
            except Exception as err:  # one broken run must not end the sweep
                outcome = RunFailure.of(cfg, err)
            finally:
                torch.set_num_threads(threads)
            yield outcome

    def _drain(self, progress: mp.Queue) -> None:
        while True:
            try:
                key, step, loss = progress.get_nowait()
            except queue.Empty:
                return
            if self.on_steps is not None:
                self.on_steps(key, step, loss)


def _terminate(pool: ProcessPoolExecutor) -> None:
    """Stop ``pool`` now: its queued runs cancelled, its workers (in mid-run) terminated."""
    workers = list((pool._processes or {}).values())  # no public handle on the processes
    for process in workers:
        process.terminate()
    # the pool's manager thread sees its workers gone and fails every pending future with
    # BrokenProcessPool; cancelling them first raced it (Python 3.11's manager thread then dies
    # on InvalidStateError with a traceback, and the sweep could hang at exit)
    pool.shutdown(wait=True)


def place(cfg: RunConfig, index: int) -> RunConfig:
    """Spread ``device="cuda"`` runs round-robin over the visible GPUs (cuda:0, cuda:1, ...)."""
    if cfg.device != "cuda":
        return cfg
    import torch

    count = torch.cuda.device_count()
    return replace(cfg, device=f"cuda:{index % count}") if count > 1 else cfg


class RayExecutor:
    """Runs on Ray: an existing cluster at ``address`` (or ``RAY_ADDRESS``), else a local
    instance. Each run asks for 1 CPU and ``gpus_per_run`` GPUs (e.g. 0.25 packs 4 per GPU);
    at most ``num_cpus`` runs are in flight at once (default: as many as Ray can place)."""

    def __init__(
        self, address: str | None = None, *, num_cpus: int | None = None, gpus_per_run: float = 0.0
    ) -> None:
        if not 0.0 <= gpus_per_run <= 1.0:
            raise ValueError(f"gpus_per_run must be in [0, 1], got {gpus_per_run}")
        if num_cpus is not None and num_cpus < 1:
            raise ValueError(f"workers must be >= 1, got {num_cpus}")
        if importlib.util.find_spec("ray") is None:  # say so now, not once the sweep started
            raise ImportError("the ray executor needs Ray: pip install 'posenc[ray]'")
        self.address, self.num_cpus, self.gpus_per_run = address, num_cpus, gpus_per_run

    def map(self, runs: Sequence[RunConfig], checkpoint_dir: Path | None) -> Iterator[Outcome]:
        import ray

        if not ray.is_initialized():  # no num_cpus: Ray refuses it for an existing cluster
            ray.init(address=self.address, include_dashboard=False, log_to_driver=False)
        remote = ray.remote(num_cpus=1, num_gpus=self.gpus_per_run)(execute)
        waiting = list(runs)[::-1]  # popped from the end: submitted in sweep order
        pending: dict[object, RunConfig] = {}  # in flight, in submission order
        while waiting or pending:
            while waiting and len(pending) < (self.num_cpus or len(runs)):
                cfg = waiting.pop()
                pending[remote.remote(cfg, checkpoint_dir)] = cfg
            (done,), _ = ray.wait(list(pending), num_returns=1)
            cfg = pending.pop(done)
            try:
                yield ray.get(done)
            except Exception as err:  # ray.exceptions.RayTaskError wraps the run's error
                yield RunFailure.of(cfg, err)


def make_executor(
    name: str,
    *,
    workers: int | None = None,
    address: str | None = None,
    gpus_per_run: float = 0.0,
    on_steps: StepCallback | None = None,
) -> Executor:
    """``"local"`` or ``"ray"``; raises ValueError naming the choices."""
    if name == "local":
        return LocalExecutor(workers, on_steps=on_steps)
    if name == "ray":
        return RayExecutor(address, num_cpus=workers, gpus_per_run=gpus_per_run)
    raise ValueError(f"executor must be 'local' or 'ray', got {name!r}")
