"""``posenc eval ppl|passkey MODEL``: long-context evaluation of a transformers model directory,
a GGUF file or a lab checkpoint, written as JSON and a figure. Views of ``posenc.eval``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

app = typer.Typer(
    help="Evaluate long context: perplexity by position, passkey retrieval.",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)

Model = Annotated[
    Path,
    typer.Argument(
        help="A transformers model directory (config.json), a .gguf file or a lab checkpoint .pt."
    ),
]
Lengths = Annotated[str, typer.Option("--lengths", help="Comma-separated lengths in tokens.")]
Scaling = Annotated[
    str | None,
    typer.Option(
        "--scaling",
        help='RoPE scaling as JSON, e.g. \'{"rope_type": "yarn", "factor": 4.0}\' (at load).',
    ),
]
Out = Annotated[Path, typer.Option("--out", help="Output folder (JSON and PNG).")]
Device = Annotated[str, typer.Option(help="cpu or cuda.")]
Dtype = Annotated[
    str | None, typer.Option(help="float32 (default), bfloat16, float16 or auto (transformers).")
]


@app.command("ppl")
def ppl(
    model: Model,
    text: Annotated[Path, typer.Option("--text", help="UTF-8 text file to score.")],
    lengths: Lengths = "512,1024,2048",
    stride: Annotated[
        int | None, typer.Option(help="Tokens between window starts (default: the length).")
    ] = None,
    buckets: Annotated[int, typer.Option(help="Position buckets per length.")] = 8,
    max_windows: Annotated[int | None, typer.Option(help="At most this many windows.")] = None,
    scaling: Scaling = None,
    out: Out = Path("posenc-eval"),
    device: Device = "cpu",
    dtype: Dtype = None,
) -> None:
    """Loss by position in sliding windows of each length; writes OUT/ppl.json and ppl.png."""
    from ..eval import load_model, perplexity, save

    sizes = _ints(lengths, "--lengths")
    if not text.is_file():
        raise typer.BadParameter(f"no file at {text}", param_hint="--text")
    lm = load_model(model, scaling=_scaling(scaling), device=device, dtype=dtype)
    if lm.tokenizer is None:
        raise typer.BadParameter(
            f"{model} has no text tokenizer (a lab model of a task other than lm)",
            param_hint="MODEL",
        )
    tokens = lm.tokenizer.encode(text.read_text(encoding="utf-8"))
    result = perplexity(
        lm, tokens, lengths=sizes, stride=stride, buckets=buckets, max_windows=max_windows
    )
    for r in result.lengths:
        typer.echo(f"length {r.length:>6}: ppl {r.ppl:.4g} (loss {r.loss:.4f}, {r.tokens} tokens)")
    _written(save(result, out))


@app.command("passkey")
def passkey_command(
    model: Model,
    lengths: Lengths = "1024,2048,4096",
    depths: Annotated[
        str, typer.Option("--depths", help="Comma-separated needle depths in [0, 1].")
    ] = "0,0.25,0.5,0.75,1",
    trials: Annotated[int, typer.Option(help="Keys per length and depth.")] = 3,
    digits: Annotated[int, typer.Option(help="Digits of the key.")] = 5,
    seed: Annotated[int, typer.Option(help="Seed of the keys.")] = 0,
    scaling: Scaling = None,
    out: Out = Path("posenc-eval"),
    device: Device = "cpu",
    dtype: Dtype = None,
) -> None:
    """Retrieval of a number hidden in filler text at each length and depth; writes
    OUT/passkey.json and passkey.png (token form for models without a tokenizer)."""
    from ..eval import load_model, passkey, save

    sizes, where = _ints(lengths, "--lengths"), _floats(depths, "--depths")
    if any(not 0.0 <= d <= 1.0 for d in where):
        raise typer.BadParameter(
            f"depths must lie in [0, 1], got {depths!r}", param_hint="--depths"
        )
    lm = load_model(model, scaling=_scaling(scaling), device=device, dtype=dtype)
    result = passkey(lm, lengths=sizes, depths=where, trials=trials, digits=digits, seed=seed)
    for d, row in zip(result.depths, result.accuracy, strict=True):
        cells = "  ".join(f"{n}: {a:.2f}" for n, a in zip(result.lengths, row, strict=True))
        typer.echo(f"depth {d:<4g} accuracy by length  {cells}")
    _written(save(result, out))


def _ints(text: str, option: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise typer.BadParameter(
            f"expected comma-separated integers, got {text!r}", param_hint=option
        ) from None
    if any(v < 1 for v in values):
        raise typer.BadParameter(f"lengths must be >= 1, got {text!r}", param_hint=option)
    return values


def _floats(text: str, option: str) -> list[float]:
    try:
        return [float(v) for v in text.split(",")]
    except ValueError:
        raise typer.BadParameter(
            f"expected comma-separated numbers, got {text!r}", param_hint=option
        ) from None


def _scaling(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise typer.BadParameter(
            f"not JSON ({err.msg}): {text!r}", param_hint="--scaling"
        ) from None
    if not isinstance(value, dict):
        raise typer.BadParameter(f"expected a JSON object, got {text!r}", param_hint="--scaling")
    return value


def _written(paths: tuple[Path, Path]) -> None:
    typer.echo(f"wrote {paths[0]} and {paths[1]}")
