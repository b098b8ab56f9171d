"""``posenc bench``: timings against the anchors installed here, as a table and a JSON file."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
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


def _table(title: str, columns: Iterable[str], rows: Iterable[Iterable[str]]) -> Any:
    from rich.table import Table

    table = Table(title=title)
    for column in columns:
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(*row)
    return table


def _fmt(value: float | None, spec: str = ".2f", suffix: str = "") -> str:
    """``value`` formatted, or "-" where the case has none."""
    return "-" if value is None else f"{value:{spec}}{suffix}"


def _cache_line(cache: dict[str, Any]) -> str:
    hf = cache["hf_build_s"]
    return (
        f"cos/sin cache of {cache['positions']} positions: {cache['build_s']:.2f} s"
        + ("" if hf is None else f" (HF LlamaRotaryEmbedding {hf:.2f} s)")
        + "; decode step (q, k of one token) at positions "
        + ", ".join(f"{p}: {us:.0f} µs" for p, us in cache["decode_step_us"].items())
    )


def _rope_table(cases: list[dict[str, Any]]) -> Any:
    fast = cases[0].get("fast_backend", "cpp") if cases else "cpp"
    impls = [
        "posenc_eager",
        f"posenc_{fast}",
        "posenc_inductor",
        "rotary_embedding_torch",
        "x_transformers",
        "torchtune",
        *(["liger_rotary_pos_emb"] if fast == "triton" else []),
    ]

    def cell(c: dict[str, Any], name: str) -> str:
        speedup, floor = c["speedup_vs_hf"].get(name), c.get("x_clone_floor", {}).get(name)
        if speedup is None:
            return "-"
        return f"{speedup:.2f}x" + ("" if floor is None else f" ({floor:.1f})")

    def row(c: dict[str, Any]) -> list[str]:
        inplace = c.get("inplace_x_copy_floor")
        return [
            "x".join(map(str, c["shape"])),
            c["dtype"],
            c["mode"],
            *(cell(c, name) for name in impls),
            "-" if inplace is None else " / ".join(f"{v:.1f}" for v in inplace.values()),
        ]

    return _table(
        "RoPE on q and k: speed-up over HF apply_rotary_pos_emb (x clone floor)",
        ["shape", "dtype", "mode", *impls, f"in place x copy floor (eager / {fast})"],
        map(row, cases),
    )


def _bias_table(cases: list[dict[str, Any]]) -> Any:
    impls = {  # column -> implementation
        "default": "posenc_default",
        "blockwise": "posenc_blockwise",
        "flex": "posenc_flex",
        "dense": "dense_bias",
    }

    def row(c: dict[str, Any]) -> list[str]:
        x, mem = c["x_sdpa_no_bias"], c["peak_extra_MiB"]
        return [
            c["encoding"],
            str(c["T"]),
            c.get("dtype", "fp32"),
            str(c["causal"]),
            *(_fmt(x.get(n)) for n in impls.values()),
            *(_fmt(mem.get(n), ".0f") for n in [*impls.values(), "sdpa_no_bias"]),
        ]

    return _table(
        "Bias attention: time / SDPA without bias; peak extra MiB",
        ["encoding", "T", "dtype", "causal", *impls] + [f"MiB {n}" for n in [*impls, "sdpa"]],
        map(row, cases),
    )


def _attention_table(cases: list[dict[str, Any]]) -> Any:
    return _table(
        "One causal attention layer: time / the same layer without position",
        ["encoding", "mode", "posenc", "x-transformers", "posenc speed-up over x-t"],
        (
            [
                c["encoding"],
                c["mode"],
                _fmt(c["x_nope"]["posenc"]),
                _fmt(c["x_nope"].get("x_transformers")),
                _fmt(c.get("speedup_vs_x_transformers"), suffix="x"),
            ]
            for c in cases
        ),
    )


def _lab_table(lab: dict[str, Any]) -> Any:
    def row(r: dict[str, Any]) -> list[str]:
        xt = [v for k, v in r.items() if k.startswith("xt") and k.endswith("tokens_per_s")]
        return [
            r["encoding"],
            f"{r['batch']}x{r['length']}",
            str(r["posenc_tokens_per_s"]),
            str(max(xt)) if xt else "-",
            _fmt(r.get("ratio_vs_best_xt")),
        ]

    return _table(
        "Lab training step (one thread): tokens/s",
        ["encoding", "batch x length", "posenc", "best x-transformers", "ratio"],
        map(row, lab["results"]),
    )
