"""M-RoPE from a Qwen-VL or ERNIE 4.5 VL config (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, ERNIE 4.5 VL):
what ``rope_from_hf`` returns for them, read as transformers 5.23's rotary embeddings read the
config. ``ErnieMRoPE`` is ERNIE 4.5 VL's arrangement of the pairs (h and w alternating, t on
the lowest frequencies), and ``TwoAxisMRoPE`` M-RoPE over two position axes (NeoMME's row and
column, alternating), which ``patch`` also finds in rotary modules by comparison."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._validate import check_bool, check_even, check_positive_float
from ..encodings.configs import MRoPEConfig
from ..encodings.mrope import MRoPE
from ..functional import LAYOUTS, Layout
from ..functional.rotary_nd import check_sections, pair_axes

__all__ = [
    "MROPE_MODEL_TYPES",
    "ErnieMRoPE",
    "ErnieMRoPEConfig",
    "TwoAxisMRoPE",
    "TwoAxisMRoPEConfig",
    "ernie_pair_axes",
    "is_mrope",
    "mrope_from_hf",
]

#: Qwen-VL model types (their ``*_text`` language models too) -> (default ``mrope_section``,
#: interleaved): transformers falls back to these sections when the config omits them.
MROPE_MODEL_TYPES: dict[str, tuple[tuple[int, int, int], bool]] = {
    "qwen2_vl": ((16, 24, 24), False),
    "qwen2_5_vl": ((16, 24, 24), False),
    "qwen3_vl": ((24, 20, 20), True),
    "qwen3_vl_moe": ((24, 20, 20), True),
}


#: ERNIE 4.5 VL (``ernie4_5_vl_moe`` and its ``_text`` model) -> its built-in ``mrope_section``
#: in transformers' (h, w, t) order.
ERNIE_MODEL_TYPES: dict[str, tuple[int, int, int]] = {"ernie4_5_vl_moe": (22, 22, 20)}


def ernie_pair_axes(sections: Sequence[int]) -> tuple[int, ...]:
    """ERNIE 4.5 VL's axis a(p) of each rotary pair, for ``sections`` (t, h, w) pairs.

    The first s_h + s_w pairs alternate between h and w, the last s_t follow t (the lowest
    frequencies turn by time):

        a(p) = h (1) for even p < 2 s_h,  w (2) for odd p < 2 s_h,  t (0) for p >= 2 s_h,

    over RoPE's own series θ_p = base^(-2p/D) (transformers 5.23's
    ``Ernie4_5_VLMoeTextRotaryEmbedding``: its ``inv_freq`` de-interleaves the first 2 s_h
    frequencies, ``recomposition_frequencies`` stacks h and w back). Baidu, "ERNIE 4.5
    Technical Report" (2025), 3D RoPE of the vision-language models.
    Shapes: returns P = s_t + s_h + s_w entries.
    Raises: ValueError unless three positive sections with s_h == s_w."""
    t, h, w = _three(check_sections(sections))
    if h != w:
        raise ValueError(
            f"ERNIE's M-RoPE alternates h and w: their sections must be equal, got {h}, {w}"
        )
    return tuple(1 + p % 2 for p in range(2 * h)) + (0,) * t


def _three(sections: tuple[int, ...]) -> tuple[int, int, int]:
    if len(sections) != 3:
        raise ValueError(f"mrope_section must give pairs for (t, h, w), got {sections}")
    return sections[0], sections[1], sections[2]


@dataclass(frozen=True, kw_only=True)
class ErnieMRoPEConfig(MRoPEConfig):
    """M-RoPE with ERNIE 4.5 VL's pairs (``ernie_pair_axes``): ``mrope_section`` (t, h, w) in
    posenc's order (transformers' config lists (h, w, t)), s_h == s_w; ``interleaved`` unused
    (False). ``mrope_section`` None is ERNIE's (20, 22, 22) of 64 pairs scaled to head_dim/2."""

    def check(self) -> None:
        if self.mrope_section is None:
            P = self.head_dim // 2
            h = (P - 5 * P // 16) // 2
            object.__setattr__(self, "mrope_section", (P - 2 * h, h, h))
        if self.interleaved:
            raise ValueError(
                "ErnieMRoPE has its own arrangement of the pairs: interleaved must be False"
            )
        super().check()
        ernie_pair_axes(self.mrope_section or ())

    def pair_axes(self) -> tuple[int, ...]:
        """The axis (0 = t, 1 = h, 2 = w) whose coordinate turns each pair, (P,)."""
        return ernie_pair_axes(self.mrope_section or ())


class ErnieMRoPE(MRoPE):
    """M-RoPE as ERNIE 4.5 VL arranges it: angle_p = pos[a(p)]·θ_p with θ_p = base^(-2p/D) and
    a(p) from ``ernie_pair_axes`` (h and w alternating over the high frequencies, t over the
    last s_t pairs). Baidu, "ERNIE 4.5 Technical Report" (2025); transformers 5.23's
    ``Ernie4_5_VLMoeTextRotaryEmbedding``. Not in the registry: built by ``rope_from_hf`` and
    ``patch`` for ERNIE 4.5 VL.
    Shapes: ``rotate(q, k, q_pos, k_pos)``: q (B, H, Tq, D), k (B, Hkv, Tk, D), q_pos (Tq, 3) |
    (B, Tq, 3), k_pos (Tk, 3) | (B, Tk, 3) int64 (t, h, w) -> q and k of the same shapes.
    """

    config_class = ErnieMRoPEConfig
    config: ErnieMRoPEConfig


@dataclass(frozen=True, kw_only=True)
class TwoAxisMRoPEConfig(MRoPEConfig):
    """M-RoPE over two position axes (row, column): RoPE's series θ_p = base^(-2p/D) over all
    P pairs, ``mrope_section`` (s_0, s_1) pairs per axis, contiguous or ``interleaved``
    (pair p odd, p < 2 s_1, by the column, the rest by the row). ``mrope_section`` None is
    (ceil(P/2), floor(P/2))."""

    axes = 2

    def check(self) -> None:
        check_even(self.head_dim, "head_dim")
        P = self.head_dim // 2
        if self.mrope_section is None:
            object.__setattr__(self, "mrope_section", ((P + 1) // 2, P // 2))
        sections = check_sections(self.mrope_section or (), P)
        if len(sections) != 2:
            raise ValueError(f"two-axis M-RoPE needs 2 sections (row, column), got {sections}")
        object.__setattr__(self, "mrope_section", sections)
        check_positive_float(self.base, "base")
        check_bool(self.interleaved, "interleaved")
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {self.layout!r}")
        self.pair_axes()  # interleaved sections must fit

    def pair_axes(self) -> tuple[int, ...]:
        """The axis (0 = row, 1 = column) whose coordinate turns each pair, (P,)."""
        return pair_axes(self.mrope_section or (), interleaved=self.interleaved)


class TwoAxisMRoPE(MRoPE):
    """M-RoPE over two position axes: angle_p = pos[a(p)]·θ_p with RoPE's series
    θ_p = base^(-2p/D) and a(p) from ``mrope_section`` (s_0, s_1): interleaved, a(p) = p mod 2
    for p < 2 s_1 (row0-col0-row1-col1: transformers 5.23's ``NeoMMERotaryEmbedding``, whose
    ``recomposition_frequencies`` takes the even frequencies from the row and the odd ones
    from the column), else the first s_0 pairs by the row. Text tokens sit at (p, p), where
    this is 1-D RoPE. Not in the registry: built by ``patch``.
    Shapes: ``rotate(q, k, q_pos, k_pos)``: q (B, H, Tq, D), k (B, Hkv, Tk, D), q_pos (Tq, 2) |
    (B, Tq, 2), k_pos (Tk, 2) | (B, Tk, 2) int64 (row, column) -> q and k of the same shapes.
    """

    config_class = TwoAxisMRoPEConfig
    config: TwoAxisMRoPEConfig


def _family(cfg: Mapping[str, Any]) -> str:
    return str(cfg.get("model_type") or "").removesuffix("_text")


def is_mrope(cfg: Mapping[str, Any], params: Mapping[str, Any]) -> bool:
    """Whether a config's rope parameters describe M-RoPE: a Qwen-VL model type, an
    ``mrope_section`` or ``mrope_interleaved``, or the older ``"type": "mrope"``."""
    return (
        _family(cfg) in MROPE_MODEL_TYPES
        or _family(cfg) in ERNIE_MODEL_TYPES
        or "mrope_section" in params
        or "mrope_interleaved" in params
        or (params.get("rope_type") == "mrope")
    )


def mrope_from_hf(
    cfg: Mapping[str, Any], params: Mapping[str, Any], head_dim: int, layout: Layout | None
) -> MRoPE:
    """The ``mrope`` encoding of rope ``params`` (flattened by ``rope_from_hf``): base
    ``rope_theta``, ``mrope_section`` (default: the model type's, as transformers'), and
    Qwen3-VL's interleaved sections (its rotary embedding always interleaves; other models
    when ``mrope_interleaved`` says so); ERNIE 4.5 VL's arrangement (``ErnieMRoPE``, its
    (h, w, t) ``mrope_section`` reordered to (t, h, w)).
    Raises: ValueError for a scaling method or partial rotary with M-RoPE."""
    sections, interleaved = MROPE_MODEL_TYPES.get(_family(cfg), (None, False))
    if params["rope_type"] not in ("default", "mrope"):
        raise ValueError(
            f"rope_type {params['rope_type']!r} with M-RoPE is not supported; posenc reads "
            "M-RoPE without context extension"
        )
    if float(params.get("partial_rotary_factor", 1.0)) != 1.0:
        raise ValueError("partial_rotary_factor with M-RoPE is not supported")
    ernie = ERNIE_MODEL_TYPES.get(_family(cfg))
    if ernie is not None:
        h, w, t = params.get("mrope_section") or ernie
        return ErnieMRoPE(
            head_dim=head_dim,
            base=float(params["rope_theta"]),
            mrope_section=(t, h, w),
            layout=layout or "interleaved",
        )
    return MRoPE(
        head_dim=head_dim,
        base=float(params["rope_theta"]),
        mrope_section=params.get("mrope_section") or sections,
        interleaved=interleaved or bool(params.get("mrope_interleaved", False)),
        layout=layout or "half",
    )
