"""``posenc eval ppl|passkey MODEL``: long-context evaluation of a transformers model directory,
a GGUF file or a lab checkpoint, written as JSON and a figure. Views of ``posenc.eval``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from ._options import check_out, out_path

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
Out = Annotated[Path, typer.Option("--out", parser=out_path, help="Output folder (JSON and PNG).")]
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
    if stride is not None and stride < 1:
        raise typer.BadParameter(f"must be >= 1, got {stride}", param_hint="--stride")
    content = _text(text)
    check_out(out, "ppl.json", "ppl.png")  # every input and output checked before the work
    lm = load_model(model, scaling=_scaling(scaling), device=device, dtype=dtype)
    if lm.tokenizer is None:
        raise typer.BadParameter(
            f"{model} has no text tokenizer (a lab model of a task other than lm)",
            param_hint="MODEL",
        )
    tokens = lm.tokenizer.encode(content)
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
    from .._validate import SEED_LIMIT
    from ..eval import load_model, passkey, save

    sizes, where = _ints(lengths, "--lengths"), _floats(depths, "--depths")
    if any(not 0.0 <= d <= 1.0 for d in where):
        raise typer.BadParameter(
            f"depths must lie in [0, 1], got {depths!r}", param_hint="--depths"
        )
    if not 0 <= seed < SEED_LIMIT:
        raise typer.BadParameter(f"must be an int in [0, 2**32), got {seed}", param_hint="--seed")
    if digits < 1:
        raise typer.BadParameter(f"must be >= 1, got {digits}", param_hint="--digits")
    check_out(out, "passkey.json", "passkey.png")
    lm = load_model(model, scaling=_scaling(scaling), device=device, dtype=dtype)
    result = passkey(lm, lengths=sizes, depths=where, trials=trials, digits=digits, seed=seed)
    for d, row in zip(result.depths, result.accuracy, strict=True):
        cells = "  ".join(f"{n}: {a:.2f}" for n, a in zip(result.lengths, row, strict=True))
        typer.echo(f"depth {d:<4g} accuracy by length  {cells}")
    _written(save(result, out))


def _text(path: Path) -> str:
    """The UTF-8 text of ``--text``; BadParameter for a missing, unreadable or binary file."""
    if not path.is_file():
        raise typer.BadParameter(f"no file at {path}", param_hint="--text")
    try:
        content = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise typer.BadParameter(
            f"{path} is not UTF-8 text (byte {err.object[err.start]:#04x} at offset {err.start})",
            param_hint="--text",
        ) from None
    except OSError as err:
        raise typer.BadParameter(f"{path}: {err.strerror}", param_hint="--text") from None
    if "\x00" in content:
        raise typer.BadParameter(f"{path} holds NUL bytes: not text", param_hint="--text")
    if not content.strip():
        raise typer.BadParameter(f"{path} is empty: no text to score", param_hint="--text")
    return content


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
