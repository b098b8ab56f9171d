"""``posenc conform CONFIG_OR_GGUF``: one model's RoPE as transformers, posenc and llama.cpp
compute it, side by side; exit status 1 when they disagree. A view of ``posenc.hf.conform``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer


def conform_command(
    path: Annotated[Path, typer.Argument(help="A config.json or a .gguf file.")],
    positions: Annotated[
        str, typer.Option("--positions", help="Comma-separated positions to compare cos/sin at.")
    ] = "0,1,100,1000",
    length: Annotated[
        int | None,
        typer.Option(
            "--length",
            help="Context length (llama.cpp's n_ctx; dynamic methods' current length). "
            "Default: the largest position + 1.",
        ),
    ] = None,
    layer_type: Annotated[
        str | None, typer.Option("--layer-type", help="Per-layer configs: which layer type.")
    ] = None,
    as_json: Annotated[
        Path | None, typer.Option("--json", help="Also write every number as JSON here.")
    ] = None,
) -> None:
    """Inverse frequencies, attention factor and cos/sin by transformers, posenc and
    llama.cpp; differences marked '!='; exit status 1 if any."""
    from ..hf.conform import conform

    try:
        where = [int(p) for p in positions.split(",")]
    except ValueError:
        raise typer.BadParameter(
            f"expected comma-separated integers, got {positions!r}", param_hint="--positions"
        ) from None
    result = conform(path, where, seq_len=length, layer_type=layer_type)
    typer.echo(result.render())
    if as_json is not None:
        tmp = as_json.with_name(f".{as_json.name}.tmp")
        tmp.write_text(json.dumps(result.to_dict(), indent=1) + "\n", encoding="utf-8")
        tmp.replace(as_json)
    if not result.agree:
        raise typer.Exit(code=1)
