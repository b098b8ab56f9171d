"""``posenc lab``: train tiny transformers with every encoding, measure length generalisation.

``posenc lab`` runs the quick preset; ``posenc lab sweep CONFIG`` runs a TOML/YAML grid;
``posenc lab export`` writes the results as CSV or Parquet. Imports stay inside the commands.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from ._errors import interrupted
from ._options import check_out, out_path
from .extend import extend, run_preset

if TYPE_CHECKING:
    from ..lab.config import SweepConfig

T = TypeVar("T")

app = typer.Typer(
    help="Train tiny transformers per encoding and measure length generalisation.",
    invoke_without_command=True,
    rich_markup_mode="markdown",
)

Out = Annotated[
    Path,
    typer.Option("--out", parser=out_path, help="Output folder (results.sqlite, report.html)."),
]
Sets = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a config key, e.g. --set model.n_layers=4 (repeatable)."),
]
ExecutorName = Annotated[str, typer.Option(help="Where runs execute: local or ray.")]
Address = Annotated[str | None, typer.Option(help="Ray cluster address (ray executor).")]
Workers = Annotated[int | None, typer.Option(help="Parallel runs (default: CPU count).")]
Device = Annotated[str | None, typer.Option(help="cpu or cuda (overrides the config).")]
Backend = Annotated[
    str | None, typer.Option(help="torch or jax (decoder/LM tasks; needs posenc\\[jax]).")
]
GpusPerRun = Annotated[float, typer.Option(help="Fractional GPUs per run (ray executor).")]


@app.callback()
def lab(
    ctx: typer.Context,
    preset: Annotated[
        str,
        typer.Option(
            help="Built-in sweep: quick, full, lm, seq2seq, grid, frontier, or extend "
            "(posenc lab extend)."
        ),
    ] = "quick",
    out: Out = Path("posenc-results"),
    set_: Sets = None,
    executor: ExecutorName = "local",
    address: Address = None,
    workers: Workers = None,
    device: Device = None,
    gpus_per_run: GpusPerRun = 0.0,
    backend: Backend = None,
) -> None:
    """With no command: run the PRESET sweep (default quick) and write its report."""
    if ctx.invoked_subcommand is not None:
        return
    if preset == "extend":  # the extend suite: its units and their runner (cli/extend)
        if executor != "local" or address or device or backend or gpus_per_run:
            typer.echo(
                "error: the extend preset runs locally on CPU; --executor, --address, --device, "
                "--backend and --gpus-per-run do not apply",
                err=True,
            )
            raise typer.Exit(2)
        run_preset(out, "extend", workers, set_ or [])
        return
    from ..lab.config import apply_overrides, parse_sweep
    from ..lab.presets import preset_data

    data = _guard(lambda: apply_overrides(preset_data(preset), _sets(set_, device, backend)))
    sweep = _guard(lambda: parse_sweep(data))
    _run(sweep, out, executor, address, workers, gpus_per_run)


app.command("extend")(extend)


@app.command("sweep")
def sweep_command(
    config: Annotated[Path, typer.Argument(help="Sweep config (.toml, .yaml).")],
    out: Out = Path("posenc-results"),
    set_: Sets = None,
    executor: ExecutorName = "local",
    address: Address = None,
    workers: Workers = None,
    device: Device = None,
    gpus_per_run: GpusPerRun = 0.0,
    backend: Backend = None,
) -> None:
    """Run (or resume) the grid in CONFIG; finished runs are skipped."""
    from ..lab.config import load_sweep

    sweep = _guard(lambda: load_sweep(config, _sets(set_, device, backend)))
    _run(sweep, out, executor, address, workers, gpus_per_run)


@app.command("export")
def export(
    out: Out = Path("posenc-results"),
    csv: Annotated[Path | None, typer.Option("--csv", help="Write rows to this CSV file.")] = None,
    parquet: Annotated[Path | None, typer.Option("--parquet", help="Write Parquet.")] = None,
) -> None:
    """Export the metric rows of OUT/results.sqlite (one row per run, length and metric)."""
    from ..lab.store import ResultStore
    from ..lab.sweep import STORE_NAME

    path = out / STORE_NAME if out.is_dir() else out
    if not path.is_file():
        raise typer.BadParameter(f"no result store at {path}", param_hint="--out")
    if csv is None and parquet is None:
        raise typer.BadParameter("give --csv PATH and/or --parquet PATH")
    with _guard(lambda: ResultStore(path, readonly=True)) as store:
        if csv is not None:
            typer.echo(f"wrote {store.export_csv(csv)} rows to {csv}")
        if parquet is not None:
            typer.echo(f"wrote {_guard(lambda: store.export_parquet(parquet))} rows to {parquet}")


@app.command("table")
def table(
    out: Out = Path("posenc-results"),
    into: Annotated[
        Path | None,
        typer.Option("--into", help="Replace the generated block in this file (e.g. README.md)."),
    ] = None,
) -> None:
    """Print the results of OUT (a folder or its results.sqlite) as Markdown tables: per task
    mean [95% interval] over learned seeds, winners, findings, and the CPU the runs ran on."""
    from ..lab.sweep import STORE_NAME
    from ..lab.table import results_markdown, write_into

    path = out / STORE_NAME if out.is_dir() else out
    if not path.is_file():
        raise typer.BadParameter(f"no result store at {path}", param_hint="--out")
    command = f"posenc lab table --out {out}" + (f" --into {into}" if into else "")
    block = _guard(lambda: results_markdown(path, command=command))
    if into is None:
        typer.echo(block, nl=False)
        return
    _guard(lambda: write_into(into, block))
    typer.echo(f"wrote the results of {path} into {into}")


@app.command("compare")
def compare(
    a: Annotated[Path, typer.Argument(help="A result store (folder or results.sqlite).")],
    b: Annotated[Path, typer.Argument(help="Another store of the same sweep.")],
) -> None:
    """Do two stores of one sweep (say, made on two CPUs) agree: the findings' verdicts, which
    encodings learned, every ranked pair beyond training? Exit 0 when they agree, 1 when not."""
    from ..lab.agreement import agreement_markdown, compare_stores
    from ..lab.sweep import STORE_NAME

    paths = []
    for out in (a, b):
        path = out / STORE_NAME if out.is_dir() else out
        if not path.is_file():
            raise typer.BadParameter(f"no result store at {path}")
        paths.append(path)
    result = _guard(lambda: compare_stores(*paths))
    typer.echo(agreement_markdown(result, str(a), str(b)), nl=False)
    raise typer.Exit(0 if result.agree else 1)


def _sets(sets: list[str] | None, device: str | None, backend: str | None) -> list[str]:
    extra = [f"device={device}"] if device else []
    return [*(sets or []), *extra, *([f"backend={backend}"] if backend else [])]


def _guard(fn: Callable[[], T]) -> T:
    """Show a config/usage error as one clean message and exit 2 (no traceback)."""
    try:
        return fn()
    except (ValueError, ImportError) as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None


def _run(
    sweep: SweepConfig,
    out: Path,
    executor: str,
    address: str | None,
    workers: int | None,
    gpus_per_run: float,
) -> None:
    from ..lab.config import expand
    from ..lab.environment import record_environment
    from ..lab.executors import LocalExecutor, make_executor
    from ..lab.footprint import check_fits
    from ..lab.progress import plural
    from ..lab.report import sweep_panels, write_report
    from ..lab.results import learned, load_runs
    from ..lab.store import ResultStore
    from ..lab.summary import answer_text
    from ..lab.sweep import STORE_NAME, run_sweep, sweep_lock

    runs = _guard(lambda: expand(sweep))  # unknown encodings/tasks: one line, before any output
    ex = _guard(
        lambda: make_executor(executor, workers=workers, address=address, gpus_per_run=gpus_per_run)
    )
    at_once = ex.workers if isinstance(ex, LocalExecutor) else 1
    _guard(lambda: check_fits(runs, min(at_once, len(runs))))  # sizes: before any work
    check_out(out, STORE_NAME)
    _guard(lambda: ResultStore(out / STORE_NAME).close())  # not a store, another schema
    try:  # the report too under the lock: a second sweep on OUT waits for both
        with sweep_lock(out) as held:
            outcome = run_sweep(sweep, out, executor=ex, lock=False, held=held)
            held.check()  # the folder still there: the report goes beside the runs
            if outcome.ran:  # the report and `lab table` name the CPU the runs came from
                with ResultStore(out / STORE_NAME) as store:
                    record_environment(store)
            report = write_report(outcome.runs, out, title=f"posenc lab: {sweep.name}")
    except KeyboardInterrupt:
        raise interrupted("runs", out / STORE_NAME) from None
    with ResultStore(outcome.store, readonly=True) as store:
        stored = load_runs(store, {r.key() for r in outcome.runs})
    if stored:  # the answer first, then where everything is
        groups = sweep_panels(outcome.runs, stored)
        missed = sum(not learned(r) for r in stored)
        typer.echo(answer_text(groups, total=len(stored), failed=missed))
    ran = plural(outcome.ran, "run")
    typer.echo(f"results: {outcome.store}  ({ran}, {outcome.skipped} reused)")
    typer.echo(f"report:  {report.resolve()}")
    if outcome.failed:
        failed = plural(len(outcome.failed), "run")
        typer.echo(f"{failed} failed; re-running the sweep retries them", err=True)
        raise typer.Exit(1)
