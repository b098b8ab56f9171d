"""``posenc plot KIND [NAME...] [--set KEY=VALUE...] --out DIR``: write figures of encodings as
PNG or SVG; ``--compare`` puts the encodings (and comma-separated kinds) in one figure,
``posenc plot attention --checkpoint PATH`` draws a trained lab model's attention."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from ..encodings.base import PositionalEncoding
    from ..plots import PlotKind


def parse_settings(items: list[str]) -> dict[str, Any]:
    """``["dim=64", "dims=(0, 10)", "layout=interleaved"]`` -> {key: value}: each value read as
    a Python literal (64, 1e4, (0, 10), True), else kept as text.

    Raises: typer.BadParameter for an item without ``=`` or without a key.
    """
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"--set takes KEY=VALUE, got {item!r}")
        out[key.strip()] = _literal(raw)
    return out


def _literal(raw: str) -> Any:
    """``raw`` as a Python literal ("64" -> 64, "(0, 10)" -> (0, 10)), else the text itself."""
    try:
        return ast.literal_eval(raw.strip())
    except (ValueError, SyntaxError):
        return raw.strip()


def accepts(name: str, config: dict[str, Any]) -> bool:
    """True when subject ``name`` ("rope:yarn" -> rope) takes every key of ``config``: its own
    parameters or the model geometry (dim, n_heads, max_len) it is built for."""
    from ..registry import info

    geometry = {"dim", "n_heads", "max_len"}
    return set(config) <= geometry | set(info(name.partition(":")[0]).parameters)


def _encodings(
    chosen: PlotKind, names: list[str] | None, config: dict[str, Any]
) -> list[PositionalEncoding]:
    """The named subjects built with ``config``; without names, every subject the kind applies
    to that takes the config keys (one that rejects their values is skipped with a note)."""
    from ..analysis.subjects import subject, subject_names

    if names:
        return [subject(n, **config) for n in names]
    applies = chosen.applies or (lambda pe: True)
    pes = []
    for name in (n for n in subject_names() if accepts(n, config)):
        try:
            pe = subject(name, **config)
        except ValueError as err:  # e.g. the rope:longrope example's 4 factors at head_dim 16
            typer.echo(f"skipped {name}: {err}", err=True)
            continue
        if applies(pe):
            pes.append(pe)
    if not pes:
        raise ValueError(f"no encoding that plot {chosen.name!r} applies to takes {sorted(config)}")
    return pes


def _figures(
    kind: str, chosen: PlotKind, names: list[str] | None, settings: dict[str, Any]
) -> dict[str, Figure]:
    """File stem -> figure. Settings named like a drawing option go to the figure, the others
    to the encodings' constructors."""
    options = {k: v for k, v in settings.items() if k in chosen.options}
    config = {k: v for k, v in settings.items() if k not in chosen.options}
    if chosen.applies is None:
        if config:
            raise ValueError(
                f"plot {kind!r} draws no encoding: unknown option(s) {sorted(config)}; "
                f"choose from {chosen.options}"
            )
        if names and chosen.argument is None:
            raise ValueError(f"plot {kind!r} takes no names, got {names}")
        if names:
            options[str(chosen.argument)] = tuple(_literal(n) for n in names)
        return {kind: chosen(**options)}
    pes = _encodings(chosen, names, config)
    if chosen.multi:
        return {kind: chosen(pes, **options)}
    return {f"{kind}-{pe.name.replace(':', '-')}": chosen([pe], **options) for pe in pes}


def _compare(kinds: list[str], names: list[str] | None, settings: dict[str, Any]) -> Figure:
    """``posenc.plots.compare`` of ``kinds`` (comma-separated KIND) for the named encodings
    (default: every one the first kind applies to); settings named like an option of one of
    the kinds go to the figures, the others to the encodings' constructors."""
    from ..plots import compare, compare_kinds

    chosen = compare_kinds(kinds)
    taken = {o for k in chosen for o in k.options}
    options = {k: v for k, v in settings.items() if k in taken}
    config = {k: v for k, v in settings.items() if k not in taken}
    pes = _encodings(chosen[0], names, config)
    if not names:  # every encoding all the kinds apply to
        pes = [pe for pe in pes if all(k.applies is None or k.applies(pe) for k in chosen)]
    return compare(pes, kinds, **options)


def _checkpoint_figure(
    checkpoint: Path, store: Path | None, names: list[str] | None, settings: dict[str, Any]
) -> Figure:
    """``posenc.plots.attention_weights`` of a lab checkpoint's model on its task's first
    evaluation sample at the training length (``posenc.lab.attention_maps.checkpoint_input``);
    settings are the figure's options (layer, heads, average)."""
    from ..lab.attention_maps import checkpoint_input
    from ..plots import attention_weights

    if names:
        raise ValueError(
            f"--checkpoint draws the checkpoint's own model: pass no names, got {names}"
        )
    allowed = {"layer", "heads", "average", "batch"}
    unknown = sorted(set(settings) - allowed)
    if unknown:
        raise ValueError(f"--checkpoint takes --set {sorted(allowed)}, got {unknown}")
    net, tokens, pos, _ = checkpoint_input(checkpoint, store)
    return attention_weights(net, tokens, pos, **settings)


HELP = "Draw one figure per encoding (overlay kinds: one figure for all) into --out."


def _markdown(text: str) -> str:
    """A docstring line for the terminal's Markdown help: reST literals ``x`` become `x`."""
    return text.replace("``", "`")


def kinds_help() -> str:
    """``HELP`` and a Markdown list of every plot kind with its description, from ``PLOTS``
    (the help is rendered as Markdown: reST literals ``x`` shown as code)."""
    from ..plots import PLOTS

    lines = [f"- **{name}**: {_markdown(k.description)}" for name, k in PLOTS.items()]
    return "\n\n".join([HELP, "KIND is one of:", "\n".join(lines)])


def _show_help(ctx: typer.Context, value: bool) -> None:
    """``--help``: the command's help with the plot kinds listed. Built only when asked, so
    that ``posenc --help`` does not import matplotlib and torch for it."""
    if not value or ctx.resilient_parsing:
        return
    ctx.command.help = kinds_help()
    typer.echo(ctx.get_help(), color=ctx.color)
    raise typer.Exit()


def plot(
    kind: Annotated[
        str, typer.Argument(help="Figure kind: one of those listed above (heatmap, bias...).")
    ],
    names: Annotated[
        list[str] | None,
        typer.Argument(
            help="Encodings (default: every one the kind applies to); for extension the "
            "methods, for alibi-slopes the head counts."
        ),
    ] = None,
    settings: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="KEY=VALUE, repeatable: a drawing option (n_positions=100, dims=(0,1,10)) or "
            "an encoding parameter (dim=64, head_dim=128, base=500000.0).",
        ),
    ] = None,
    compare: Annotated[
        bool,
        typer.Option(
            "--compare",
            help="One figure for all the encodings (a panel each, shared colour and y scales); "
            "KIND may list several kinds, comma-separated: heatmap,similarity,waveforms.",
        ),
    ] = False,
    checkpoint: Annotated[
        Path | None,
        typer.Option(
            help="attention only: draw this lab checkpoint's model (OUT/checkpoints/KEY.pt) "
            "on its task's first evaluation sample; --set layer=1, heads=(0, 1), average=True."
        ),
    ] = None,
    store: Annotated[
        Path | None,
        typer.Option(help="With --checkpoint: its results.sqlite (default: OUT/results.sqlite)."),
    ] = None,
    out: Annotated[Path, typer.Option(help="Output directory.")] = Path("posenc-plots"),
    fmt: Annotated[str, typer.Option("--format", help="png or svg.")] = "png",
    show_help: Annotated[
        bool,
        typer.Option(
            "--help",
            is_eager=True,
            callback=_show_help,
            help="Show this message, with every plot kind, and exit.",
        ),
    ] = False,
) -> None:
    """Draw one figure per encoding (overlay kinds: one figure for all) into --out."""
    from .._files import atomic_open
    from ..plots import PLOTS

    kinds = kind.split(",") if compare else [kind]
    unknown = [k for k in kinds if k not in PLOTS]
    if unknown:
        raise typer.BadParameter(f"unknown plot kind {unknown[0]!r}; choose one of {sorted(PLOTS)}")
    if fmt not in ("png", "svg"):
        raise typer.BadParameter(f"--format must be png or svg, got {fmt!r}")
    if checkpoint is not None and (kind != "attention" or compare):
        raise typer.BadParameter("--checkpoint goes with `posenc plot attention` alone")
    if store is not None and checkpoint is None:
        raise typer.BadParameter("--store goes with --checkpoint")
    try:
        config = parse_settings(settings or [])
        if checkpoint is not None:
            figures = {
                f"attention-{checkpoint.stem}": _checkpoint_figure(checkpoint, store, names, config)
            }
        elif compare:
            figures = {"compare-" + "-".join(kinds): _compare(kinds, names, config)}
        else:
            figures = _figures(kind, PLOTS[kind], names, config)
    except (ValueError, TypeError) as err:
        raise typer.BadParameter(str(err)) from err
    out.mkdir(parents=True, exist_ok=True)
    for stem, fig in figures.items():
        path = out / f"{stem}.{fmt}"
        with atomic_open(path, "wb") as f:
            fig.savefig(f, format=fmt)
        typer.echo(str(path))
