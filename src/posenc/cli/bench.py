"""``posenc bench``: timings against the anchors installed here, as a table and a JSON file."""

from __future__ import annotations

import json
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer


class Suite(str, Enum):
    rope = "rope"
    bias = "bias"
    attention = "attention"
    lab = "lab"
    all = "all"


def bench(
    suite: Annotated[Suite, typer.Argument(help="Which suite to run.")] = Suite.all,
    out: Annotated[Path, typer.Option(help="JSON file to write.")] = Path("bench.json"),
    quick: Annotated[bool, typer.Option(help="Small shapes, few rounds (a smoke run).")] = False,
    device: Annotated[str, typer.Option(help="cpu or cuda.")] = "cpu",
) -> None:
    """Time posenc against the anchors (interleaved, medians) and write JSON."""
    import torch
    from rich.console import Console

    from ..bench import attention, bias, harness, lab, rope

    if device not in ("cpu", "cuda"):
        raise typer.BadParameter(f"--device must be cpu or cuda, got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise typer.BadParameter("--device cuda: torch sees no CUDA device here")
    if suite == Suite.lab and device == "cuda":
        raise typer.BadParameter("the lab suite times one-thread CPU training: --device cpu")
    console = Console()
    heap = harness.steady_heap()
    result: dict[str, Any] = {"machine": {**harness.machine(), "heap": heap}, "quick": quick}
    out.parent.mkdir(parents=True, exist_ok=True)
    suites: dict[Suite, tuple[Callable[[], Any], Callable[[Any], Any]]] = {  # run, table
        Suite.rope: (lambda: rope.run(quick=quick, device=device), _rope_table),
        Suite.bias: (lambda: bias.run(quick=quick, device=device), _bias_table),
        Suite.attention: (lambda: attention.run(quick=quick, device=device), _attention_table),
        Suite.lab: (lambda: lab.run(quick=quick), _lab_table),
    }
    for name, (run, table) in suites.items():
        if suite not in (name, Suite.all):
            continue
        if name == Suite.lab and device == "cuda":
            console.print(
                "lab: a CPU suite (one-thread training steps), not run with --device cuda"
            )
            continue
        result[name.value] = run()
        console.print(table(result[name.value]))
        if name == Suite.rope and device == "cpu":  # the cos/sin cache is built on the host
            result["rope_cache"] = rope.cache_case(
                **({"positions": 4096, "rounds": 1} if quick else {})
            )
            console.print(_cache_line(result["rope_cache"]))
        out.write_text(json.dumps(result, indent=1))  # after every suite: a killed run keeps it
    console.print(f"wrote {out}")


Case = dict[str, Any]
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
        f"in place x copy floor (eager / {fast})": inplace,
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
    }
    title = "One causal attention layer: time / the same layer without position"
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
