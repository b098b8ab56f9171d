"""``posenc bench``: timings against the anchors installed here, as a table and a JSON file."""

from __future__ import annotations

import json
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

    def save() -> None:  # after every suite: a killed run keeps what it finished
        out.write_text(json.dumps(result, indent=1))

    if suite in (Suite.rope, Suite.all):
        result["rope"] = rope.run(quick=quick, device=device)
        console.print(_rope_table(result["rope"]))
        if device == "cpu":  # the cos/sin cache is built on the host
            cache = rope.cache_case(**({"positions": 4096, "rounds": 1} if quick else {}))
            result["rope_cache"] = cache
            hf = cache["hf_build_s"]
            console.print(
                f"cos/sin cache of {cache['positions']} positions: {cache['build_s']:.2f} s"
                + ("" if hf is None else f" (HF LlamaRotaryEmbedding {hf:.2f} s)")
                + "; decode step (q, k of one token) at positions "
                + ", ".join(f"{p}: {us:.0f} µs" for p, us in cache["decode_step_us"].items())
            )
        save()
    if suite in (Suite.bias, Suite.all):
        result["bias"] = bias.run(quick=quick, device=device)
        console.print(_bias_table(result["bias"]))
        save()
    if suite in (Suite.attention, Suite.all):
        result["attention"] = attention.run(quick=quick, device=device)
        console.print(_attention_table(result["attention"]))
        save()
    if suite == Suite.all and device == "cuda":
        console.print("lab: a CPU suite (one-thread training steps), not run with --device cuda")
    elif suite in (Suite.lab, Suite.all):
        result["lab"] = lab.run(quick=quick)
        console.print(_lab_table(result["lab"]["results"]))
        save()
    console.print(f"wrote {out}")


def _rope_table(cases: list[dict[str, Any]]) -> Any:
    from rich.table import Table

    table = Table(title="RoPE on q and k: speed-up over HF apply_rotary_pos_emb (x clone floor)")
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
    for col in ["shape", "dtype", "mode", *impls, f"in place x copy floor (eager / {fast})"]:
        table.add_column(col, justify="right")
    for c in cases:
        cells = []
        for name in impls:
            sp = c["speedup_vs_hf"].get(name)
            fl = c.get("x_clone_floor", {}).get(name)
            cells.append(
                "-" if sp is None else f"{sp:.2f}x" + ("" if fl is None else f" ({fl:.1f})")
            )
        inpl = c.get("inplace_x_copy_floor")
        table.add_row(
            "x".join(map(str, c["shape"])),
            c["dtype"],
            c["mode"],
            *cells,
            "-" if inpl is None else " / ".join(f"{v:.1f}" for v in inpl.values()),
        )
    return table


def _bias_table(cases: list[dict[str, Any]]) -> Any:
    from rich.table import Table

    table = Table(title="Bias attention: time / SDPA without bias; peak extra MiB")
    for col in [
        "encoding",
        "T",
        "dtype",
        "causal",
        "default",
        "blockwise",
        "flex",
        "dense",
        "MiB default",
        "MiB blockwise",
        "MiB flex",
        "MiB dense",
        "MiB sdpa",
    ]:
        table.add_column(col, justify="right")
    for c in cases:
        x, mem = c["x_sdpa_no_bias"], c["peak_extra_MiB"]
        dense = x.get("dense_bias")
        table.add_row(
            c["encoding"],
            str(c["T"]),
            c.get("dtype", "fp32"),
            str(c["causal"]),
            f"{x['posenc_default']:.2f}",
            f"{x['posenc_blockwise']:.2f}",
            "-" if "posenc_flex" not in x else f"{x['posenc_flex']:.2f}",
            "-" if dense is None else f"{dense:.2f}",
            *(
                _mib(mem, n)
                for n in (
                    "posenc_default",
                    "posenc_blockwise",
                    "posenc_flex",
                    "dense_bias",
                    "sdpa_no_bias",
                )
            ),
        )
    return table


def _mib(mem: dict[str, float], name: str) -> str:
    return f"{mem[name]:.0f}" if name in mem else "-"


def _attention_table(cases: list[dict[str, Any]]) -> Any:
    from rich.table import Table

    table = Table(title="One causal attention layer: time / the same layer without position")
    for col in ["encoding", "mode", "posenc", "x-transformers", "posenc speed-up over x-t"]:
        table.add_column(col, justify="right")
    for c in cases:
        x = c["x_nope"]
        sp = c.get("speedup_vs_x_transformers")
        table.add_row(
            c["encoding"],
            c["mode"],
            f"{x['posenc']:.2f}",
            f"{x['x_transformers']:.2f}" if "x_transformers" in x else "-",
            "-" if sp is None else f"{sp:.2f}x",
        )
    return table


def _lab_table(rows: list[dict[str, Any]]) -> Any:
    from rich.table import Table

    table = Table(title="Lab training step (one thread): tokens/s")
    for col in ["encoding", "batch x length", "posenc", "best x-transformers", "ratio"]:
        table.add_column(col, justify="right")
    for r in rows:
        xt = [v for k, v in r.items() if k.startswith("xt") and k.endswith("tokens_per_s")]
        table.add_row(
            r["encoding"],
            f"{r['batch']}x{r['length']}",
            str(r["posenc_tokens_per_s"]),
            str(max(xt)) if xt else "-",
            f"{r['ratio_vs_best_xt']:.2f}" if "ratio_vs_best_xt" in r else "-",
        )
    return table
