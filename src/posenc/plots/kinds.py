"""Plot kinds by name, each with the encodings it applies to (``posenc plot KIND``, report)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from matplotlib.figure import Figure

from ..analysis.subjects import has_bias, is_additive, is_rotary, is_sequence, resolve
from ..analysis.table_checks import sinusoid_like
from ..encodings.base import PositionalEncoding
from . import attention, bias, extension, grid, rotary, tables


def _has_frequencies(pe: PositionalEncoding) -> bool:
    if not is_sequence(pe):
        return False
    try:
        rotary.inv_freq_of(pe)
    except ValueError:
        return False
    return True


def _has_weights(pe: PositionalEncoding) -> bool:
    """Attention gives softmax weights to draw: not an encoding computing attention from the
    data (FoX, stick-breaking, PaTH: blockwise, no weights returned)."""
    return not pe.capabilities.attention_form


def _sequence_weights(pe: PositionalEncoding) -> bool:
    return is_sequence(pe) and _has_weights(pe)


def _features(pe: PositionalEncoding) -> bool:
    """Per-position pictures of 1-D encodings (grids: ``grid-similarity``)."""
    return is_sequence(pe) and (is_additive(pe) or is_rotary(pe))


def _sequence_additive(pe: PositionalEncoding) -> bool:
    return is_sequence(pe) and is_additive(pe)


def _sequence_rotary(pe: PositionalEncoding) -> bool:
    return is_sequence(pe) and is_rotary(pe)


@dataclass(frozen=True)
class PlotKind:
    """A figure type: ``per_encoding`` kinds draw one encoding, others overlay a list
    (``multi``) or take none (``applies`` is None); ``argument`` is the keyword that the
    names given to such a kind fill (``posenc plot alibi-slopes 8 12``: head_counts)."""

    name: str
    draw: Callable[..., Figure]
    applies: Callable[[PositionalEncoding], bool] | None
    multi: bool = False
    argument: str | None = None

    @property
    def parameters(self) -> list[str]:
        """Every parameter of the drawing function (``pe``, ``ax``, the options)."""
        return list(inspect.signature(self.draw).parameters)

    @property
    def options(self) -> list[str]:
        """The drawing function's keyword options (``n_positions``, ``dims``, ``dim``...)."""
        skip = {"encodings", "pe", "ax", "axes", self.argument}
        return [n for n in self.parameters if n not in skip]

    @property
    def description(self) -> str:
        """The drawing function's first docstring paragraph, on one line."""
        return " ".join((self.draw.__doc__ or self.name).strip().split("\n\n")[0].split())

    def __call__(self, encodings: Sequence[PositionalEncoding | str] = (), **kw: Any) -> Figure:
        """Draw for ``encodings`` (one, several for overlays, none for global kinds)."""
        if self.applies is None:
            return self.draw(**kw)
        pes = [resolve(e) for e in encodings]
        if not pes or (not self.multi and len(pes) != 1):
            want = "one or more encodings" if self.multi else "exactly one encoding"
            raise ValueError(f"plot {self.name!r} needs {want}, got {len(pes)}")
        skipped = [pe.name for pe in pes if not self.applies(pe)]
        if skipped:
            raise ValueError(f"plot {self.name!r} does not apply to {skipped}")
        return self.draw(pes, **kw) if self.multi else self.draw(pes[0], **kw)


PLOTS: dict[str, PlotKind] = {
    k.name: k
    for k in (
        PlotKind("heatmap", tables.encoding_heatmap, _features),
        PlotKind("similarity", tables.similarity_matrix, _features),
        PlotKind("waveforms", tables.dimension_waveforms, _features),
        PlotKind("dot-distance", tables.dot_vs_distance, _sequence_additive),
        PlotKind("contamination", tables.contamination, _sequence_additive),
        PlotKind("contamination-dims", tables.contamination_dims, _sequence_additive),
        PlotKind("wavelengths", rotary.wavelengths, _has_frequencies, multi=True),
        PlotKind("shift-matrix", rotary.shift_matrix_blocks, sinusoid_like),
        PlotKind("rotation", rotary.rotation_pair, _sequence_rotary),
        PlotKind("qk-distance", rotary.qk_vs_distance, _sequence_rotary, multi=True),
        PlotKind("grid-similarity", grid.grid_similarity, grid.is_grid, multi=True),
        PlotKind("sections", grid.pair_sections, grid.has_pair_axes),
        PlotKind("bias", bias.bias_heatmaps, has_bias),
        PlotKind("attention", attention.attention_heatmap, _has_weights),
        PlotKind("attention-decay", attention.attention_decay, _sequence_weights, multi=True),
        PlotKind("extension", extension.extension_scales, None, argument="methods"),
        PlotKind("alibi-slopes", extension.alibi_slopes, None, argument="head_counts"),
    )
}


def plot_kinds_for(pe: PositionalEncoding | str) -> list[PlotKind]:
    """The per-encoding plot kinds that apply to ``pe``."""
    pe = resolve(pe)
    return [k for k in PLOTS.values() if k.applies is not None and k.applies(pe)]
