"""M-RoPE: multimodal rotary position embedding (Wang et al. 2024, Qwen2-VL, arXiv:2409.12191)."""

from __future__ import annotations

from ..registry import register
from .configs import MRoPEConfig
from .grid_rotary import AxialRoPE


@register("mrope", family="rotary", paper="Wang et al., arXiv:2409.12191", year=2024)
class MRoPE(AxialRoPE):
    """M-RoPE: RoPE's pairs handed to the (t, h, w) position axes.

    M-RoPE (Qwen2-VL, Wang et al. 2024, sec. 2.1): RoPE's frequencies θ_p = base^(-2p/D)
    over all P pairs, the pairs handed to the position axes (t, h, w) by ``mrope_section``:

        angle_p = pos[a(p)]·θ_p,  a(p) = t for the first s_t pairs, h for the next s_h, w after,

    with ``interleaved=True`` (Qwen3-VL) pair p ≡ 1 (mod 3), p < 3 s_h following h and
    p ≡ 2 (mod 3), p < 3 s_w following w, the rest t. Text tokens sit at (p, p, p), where this
    is 1-D RoPE; image and video tokens at (t, row, column) offsets from the text before them
    (``posenc.mrope_positions`` computes transformers' position ids; Qwen2.5-VL's temporal
    ids count absolute time). Positions are (T, 3) or (B, T, 3); ``layout`` "half" as Qwen's
    ``rotate_half``. ``posenc.rope_from_hf`` reads Qwen2-VL, Qwen2.5-VL and Qwen3-VL configs.
    Shapes: ``rotate(q, k, q_pos, k_pos)``: q (B, H, Tq, D), k (B, Hkv, Tk, D), q_pos (Tq, 3) |
    (B, Tq, 3), k_pos (Tk, 3) | (B, Tk, 3) int64 -> q and k of the same shapes.
    """

    config_class = MRoPEConfig
    config: MRoPEConfig
