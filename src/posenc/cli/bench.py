"""``posenc bench``: timings against the anchors installed here, as a table and a JSON file."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from .._files import atomic_write

if TYPE_CHECKING:
    from rich.console import Console


Case = dict[str, Any]


class Suite(str, Enum):
    rope = "rope"
    bias = "bias"
    attention = "attention"
    lab = "lab"
    data_dependent = "data_dependent"
    all = "all"


#: The width tables get when stdout is no terminal (a file, a pipe): wider than any of them, so
#: each prints at its natural width (rich's default there is 80 columns, headers cut to "en…").
NATURAL_WIDTH = 1 << 14


def bench(
    suite: Annotated[Suite, typer.Argument(help="Which suite to run.")] = Suite.all,
    out: Annotated[Path, typer.Option(help="JSON file to write.")] = Path("bench.json"),
    quick: Annotated[bool, typer.Option(help="Small shapes, few rounds (a smoke run).")] = False,
    device: Annotated[str, typer.Option(help="cpu or cuda.")] = "cpu",
    heap: Annotated[
        str,
        typer.Option(
            help="steady: glibc keeps freed memory (fresh tensors are recycled heap, as in a "
            "long run); default: glibc's own settings (large fresh tensors fault in page by page)."
        ),
    ] = "steady",
) -> None:
    """Time posenc against the anchors (interleaved, medians) and write JSON.

    Each finished case is reported on stderr (a progress bar on a terminal, a line otherwise)
    and saved: the JSON is rewritten after every case, with "complete": false until the end."""
    import torch
    from rich.console import Console

    from ..bench import attention, bias, data_dependent, harness, lab, rope

    if device not in ("cpu", "cuda"):
        raise typer.BadParameter(f"--device must be cpu or cuda, got {device!r}")
    if heap not in ("steady", "default"):
        raise typer.BadParameter(f"--heap must be steady or default, got {heap!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise typer.BadParameter("--device cuda: torch sees no CUDA device here")
    if suite == Suite.lab and device == "cuda":
        raise typer.BadParameter("the lab suite times one-thread CPU training: --device cpu")
    if suite == Suite.data_dependent and device == "cuda":
        raise typer.BadParameter("the data_dependent suite times the CPU forms: --device cpu")
    console = Console()
    if not console.is_terminal:
        console = Console(width=NATURAL_WIDTH)
    settings = harness.steady_heap() if heap == "steady" else {}
    result: dict[str, Any] = {
        "machine": {**harness.machine(), "heap": settings, "heap_policy": heap},
        "quick": quick,
        "complete": False,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    record = _Record(out, result, Console(stderr=True))
    record.save()
    Run = Callable[[harness.Progress], Any]
    suites: dict[Suite, tuple[Run, Callable[[Any], Any], Callable[[Case], str]]] = {
        Suite.rope: (lambda p: rope.run(quick, device, p), _rope_table, _rope_label),
        Suite.bias: (lambda p: bias.run(quick, device, p), _bias_table, _bias_label),
        Suite.attention: (
            lambda p: attention.run(quick, device, p),
            _attention_table,
            _attention_label,
        ),
        Suite.lab: (lambda p: lab.run(quick, progress=p), _lab_table, _lab_label),
        Suite.data_dependent: (
            lambda p: data_dependent.run(quick, progress=p),
            _data_dependent_table,
            _data_dependent_label,
        ),
    }
    try:
        for name, (run, table, label) in suites.items():
            if suite not in (name, Suite.all):
                continue
            if name == Suite.lab and device == "cuda":
                console.print(
                    "lab: a CPU suite (one-thread training steps), not run with --device cuda"
                )
                continue
            if name == Suite.data_dependent and device == "cuda":
                console.print("data_dependent: a CPU suite, not run with --device cuda")
                continue
            with record.suite(name.value, label, rows=name == Suite.lab) as progress:
                result[name.value] = run(progress)
            console.print(table(result[name.value]))
            if name == Suite.lab:
                console.print(_trainers_table(result[name.value]))
            if name == Suite.rope and device == "cpu":  # the cos/sin cache is built on the host
                result["rope_cache"] = rope.cache_case(
                    **({"positions": 4096, "rounds": 1} if quick else {})
                )
                console.print(_cache_line(result["rope_cache"]))
            record.save()
    except KeyboardInterrupt:
        typer.echo(
            f"interrupted: {out} keeps the cases finished so far (complete: false)", err=True
        )
        raise typer.Exit(130) from None
    result["complete"] = True
    record.save()
    console.print(f"wrote {out}")


class _Record:
    """The run's JSON, saved after each finished case, and its progress on stderr."""

    def __init__(self, out: Path, result: dict[str, Any], err: Console) -> None:
        self.out, self.result, self.err = out, result, err

    def save(self) -> None:
        """Write the JSON atomically (a temporary file beside it, then renamed over it): a
        killed run leaves the last complete write, never half a file."""
        atomic_write(self.out, json.dumps(self.result, indent=1))

    @contextmanager
    def suite(
        self, key: str, label: Callable[[Case], str], rows: bool = False
    ) -> Iterator[Callable[[Case, int, int], None]]:
        """The progress callback of suite ``key``: it keeps each finished case in the JSON
        (under ``key``, or its ``results`` with ``rows``) and reports it on stderr."""
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        cases: list[Case] = []
        bar = None
        if self.err.is_terminal:  # rich's live bar; elsewhere (a file, a pipe) one line a case
            columns = (BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
            bar = Progress(TextColumn("{task.description}"), *columns, console=self.err)
            task = bar.add_task(f"{key}: first case", total=None)

        def finished(case: Case, done: int, total: int) -> None:
            cases.append(case)
            self.result[key] = {"results": cases} if rows else cases
            self.save()
            line = f"{key}: {label(case)} done ({done}/{total})"
            if bar is None:
                typer.echo(line, err=True)
            else:
                bar.update(task, description=line, completed=done, total=total)

        with bar or nullcontext():
            yield finished


Column = Callable[[Case], str]


def _table(title: str, cases: list[Case], columns: dict[str, Column]) -> Any:
    """A rich table: one row per case, each column's cell computed from the case."""
    from rich.table import Table

    table = Table(title=title)
    for column in columns:
        table.add_column(column, justify="right")
    for case in cases:
        table.add_row(*(cell(case) for cell in columns.values()))
    return table


def _fmt(value: float | None, spec: str = ".2f", suffix: str = "") -> str:
    """``value`` formatted, or "-" where the case has none."""
    return "-" if value is None else f"{value:{spec}}{suffix}"


def _text(key: str) -> Column:
    return lambda case: str(case[key])


def _entry(field: str, name: str, spec: str = ".2f") -> Column:
    """The cell of implementation ``name`` in the case's ``field`` (a dict by implementation)."""
    return lambda case: _fmt(case[field].get(name), spec)


def _rope_label(case: Case) -> str:
    return f"{'x'.join(map(str, case['shape']))} {case['dtype']} {case['mode']}"


def _bias_label(case: Case) -> str:
    causal = "causal" if case["causal"] else "bidirectional"
    return f"{case['encoding']} T={case['T']} {case['dtype']} {causal}"


def _attention_label(case: Case) -> str:
    return f"{case['encoding']} {case['mode']}"


def _data_dependent_label(case: Case) -> str:
    return f"{case['family']} T={case['T']} {case['mode']}"


def _lab_label(row: Case) -> str:
    return f"{row['encoding']} {row['batch']}x{row['length']}"


def _cache_line(cache: Case) -> str:
    hf = cache["hf_build_s"]
    return (
        f"cos/sin cache of {cache['positions']} positions: {cache['build_s']:.2f} s"
        + ("" if hf is None else f" (HF LlamaRotaryEmbedding {hf:.2f} s)")
        + "; decode step (q, k of one token) at positions "
        + ", ".join(f"{p}: {us:.0f} µs" for p, us in cache["decode_step_us"].items())
    )


def _rope_table(cases: list[Case]) -> Any:
    fast = cases[0]["fast_backend"]
    impls = [
        "posenc_eager",
        f"posenc_{fast}",
        "posenc_inductor",
        "rotary_embedding_torch",
        "x_transformers",
        "torchtune",
        *(["liger_rotary_pos_emb"] if fast == "triton" else []),
    ]

    def speedup(name: str) -> Column:
        def cell(case: Case) -> str:
            sp, floor = case["speedup_vs_hf"].get(name), case.get("x_clone_floor", {}).get(name)
            if sp is None:
                return "-"
            return f"{sp:.2f}x" + ("" if floor is None else f" ({floor:.1f})")

        return cell

    def inplace(case: Case) -> str:
        floors = case.get("inplace_x_copy_floor")
        return "-" if floors is None else " / ".join(f"{v:.1f}" for v in floors.values())

    columns = {
        "shape": lambda case: "x".join(map(str, case["shape"])),
        "dtype": _text("dtype"),
        "mode": _text("mode"),
        **{name: speedup(name) for name in impls},
        f"in place x copy floor (eager / {fast} / inductor)": inplace,
    }
    title = "RoPE on q and k: speed-up over HF apply_rotary_pos_emb (x clone floor)"
    return _table(title, cases, columns)


def _bias_table(cases: list[Case]) -> Any:
    impls = {  # column -> implementation
        "default": "posenc_default",
        "blockwise": "posenc_blockwise",
        "flex": "posenc_flex",
        "dense": "dense_bias",
    }
    columns = {
        "encoding": _text("encoding"),
        "T": _text("T"),
        "dtype": _text("dtype"),
        "causal": _text("causal"),
        **{column: _entry("x_sdpa_no_bias", name) for column, name in impls.items()},
    }
    impls["sdpa"] = "sdpa_no_bias"
    columns |= {f"MiB {col}": _entry("peak_extra_MiB", n, ".0f") for col, n in impls.items()}
    return _table("Bias attention: time / SDPA without bias; peak extra MiB", cases, columns)


def _attention_table(cases: list[Case]) -> Any:
    columns = {
        "encoding": _text("encoding"),
        "mode": _text("mode"),
        "posenc": _entry("x_nope", "posenc"),
        "x-transformers": _entry("x_nope", "x_transformers"),
        "posenc speed-up over x-t": lambda c: _fmt(c.get("speedup_vs_x_transformers"), suffix="x"),
        "peak MiB posenc": _entry("peak_MiB", "posenc", ".2f"),
        "peak MiB NoPE": _entry("peak_MiB", "nope", ".2f"),
    }
    title = "One causal attention layer: time / the same layer without position; peak MiB"
    return _table(title, cases, columns)


def _data_dependent_table(cases: list[Case]) -> Any:
    def ms(name: str) -> Column:
        def cell(case: Case) -> str:
            timing = case["us"].get(name)
            return _fmt(None if timing is None else timing["median"] / 1e3, ".3g")

        return cell

    columns = {
        "family": _text("family"),
        "T": _text("T"),
        "mode": _text("mode"),
        "posenc ms": ms("posenc"),
        "fla naive ms": ms("fla_naive"),
        "posenc / fla": lambda c: _fmt(c.get("posenc_over_fla")),
        "layer / NoPE layer": lambda c: _fmt(c.get("layer_over_nope")),
        "decode step / SDPA": lambda c: _fmt(c.get("posenc_over_sdpa")),
        "decode µs per key": lambda c: _fmt(c.get("us_per_key", {}).get("posenc"), ".3f"),
    }
    title = "Data-dependent attention: posenc's blockwise forms against fla's naive references"
    return _table(title, cases, columns)


def _lab_table(lab: Case) -> Any:
    def best_xt(row: Case) -> str:
        xt = [v for k, v in row.items() if k.startswith("xt") and k.endswith("tokens_per_s")]
        return str(max(xt)) if xt else "-"

    columns = {
        "encoding": _text("encoding"),
        "batch x length": lambda row: f"{row['batch']}x{row['length']}",
        "posenc": _text("posenc_tokens_per_s"),
        "best x-transformers": best_xt,
        "ratio": lambda row: _fmt(row.get("ratio_vs_best_xt")),
    }
    return _table("Lab training step (one thread): tokens/s", lab["results"], columns)


def _trainers_table(lab: Case) -> Any:
    """Runs per CPU-minute of each way to train the seeds of one lab configuration."""

    def rate(trainer: str) -> Column:
        def cell(row: Case) -> str:
            entry = row.get(trainer, {})
            if "error" in entry:
                return "cannot"
            if not entry:
                return "-"
            return f"{entry['runs_per_cpu_minute']:.2f} ({entry['x_one_by_one']:.2f}x)"

        return cell

    columns = {"encoding": _text("encoding")} | {t: rate(t) for t in TRAINERS}
    rows = lab.get("trainers", [])
    seeds, steps = (rows[0]["seeds"], rows[0]["run_steps"]) if rows else (0, 0)
    title = f"Lab runs per CPU-minute, {seeds} seeds of {steps} steps (x one by one)"
    return _table(title, rows, columns)


TRAINERS = ("one_by_one", "batched", "compiled")
