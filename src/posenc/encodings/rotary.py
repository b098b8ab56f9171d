"""Rotary encodings: queries and keys rotated by their positions."""

from __future__ import annotations

from typing import Any

from torch import Tensor

from .. import functional as PF
from ..kernels.rope import Kernel, check_kernel, rotate_tables
from ..kernels.rope_eager import apply_rope
from ..kernels.rope_tables import RopeTables
from ..registry import register
from .base import PositionalEncoding
from .capabilities import Capabilities
from .configs import PRoPEConfig, RoPEConfig
from .flows import RoPEFlow


class Rotary(PositionalEncoding):
    """torch's side of the rotary flows (``posenc.encodings.flows``): tables held as
    ``RopeTables`` (what the kernels derive from them, made once per forward) and applied by
    the eager kernel."""

    capabilities = Capabilities(rotates=True)

    def wrap_tables(self, cos: Tensor, sin: Tensor) -> RopeTables:
        return RopeTables(cos, sin)

    def apply_tables(self, x: Tensor, tables: RopeTables, inplace: bool = False) -> Tensor:
        return apply_rope(x, tables.cos, tables.sin, layout=self.layout, inplace=inplace)


class KernelRotary(Rotary):
    """Base of the RoPEs rotating q and k by a ``kernel`` (``posenc.kernels.rope``)."""

    def __init__(self, *, kernel: Kernel = "eager", **config: Any) -> None:
        super().__init__(**config)
        self.kernel: Kernel = check_kernel(kernel)

    def rotate_pair(
        self, q: Tensor, k: Tensor, tq: RopeTables, tk: RopeTables, inplace: bool
    ) -> tuple[Tensor, Tensor]:
        return rotate_tables(q, k, tq, tk, layout=self.layout, inplace=inplace, kernel=self.kernel)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, kernel={self.kernel!r}"


@register("rope", family="rotary", paper="Su et al., arXiv:2104.09864", year=2021)
class RoPE(RoPEFlow, KernelRotary):
    """Rotary position embedding (Su et al. 2021, RoFormer): q_m -> R_m q_m, k_n -> R_n k_n with

    R_m rotating pair i by m·θ_i, θ_i = base^(-2i/d), so <R_m q, R_n k> = <q, R_(n-m) k>.
    ``layout``: which features form pair i. "half" (the default, GPT-NeoX/Hugging Face, so HF
    checkpoints load as they are) pairs feature i with i + d/2; "interleaved" (RoFormer/Meta)
    pairs neighbours (2i, 2i + 1), the form tutorials write (``x[k], x[k + 1]`` rotated by
    m/base^(k/d), or ``view_as_complex`` of consecutive features): ``layout="interleaved"``
    gives their numbers feature by feature; both layouts give the same scores up to a fixed
    permutation of q's and k's features. ``partial``: fraction
    of head_dim rotated (the rest passes through, GPT-NeoX). Angles are computed in float64
    from int64 positions and cos/sin shared by every layer of one forward; the frequencies
    ``inv_freq64`` stay float64 under ``model.to(bf16)`` (``inv_freq`` is their float32 copy, as
    Hugging Face stores it). Tables are float32 (or q's dtype if wider); bfloat16/float16 q and
    k are rotated as the kernel says (eager: in their own dtype; the others: in float32).

    ``kernel``: the implementation of ``rotate`` (``posenc.kernels.rope``): "eager" (default,
    PyTorch passes; any device and dtype), "cpp" (hand-written CPU kernel, built on first use),
    "inductor" (``torch.compile`` per shape), "triton" (GPU kernel; needs Triton), or "auto":
    "cpp" on CPU when it builds (else one warning and "eager"), "triton" on CUDA when Triton is
    installed, else "eager". Inputs a kernel does not take, learnable cos/sin and
    ``torch.compile`` tracing always run "eager". Every kernel computes ``PF.apply_rope``.

    ``scaling``: a context-extension method (``posenc.extension``), a dict such as
    ``{"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}`` or a
    ScalingConfig; cos and sin are multiplied by its ``attention_scaling``. Dynamic methods
    (``dynamic``, ``longrope``) follow the current length max(positions) + 1 of each call.
    ``kv_policy``: "reference" caches keys rotated once (as transformers does: with dynamic
    methods earlier keys keep stale frequencies); "rerotate" caches unrotated keys and rotates
    them all with the current frequencies, so each attention layer's cached decoding equals a
    fresh forward on the same inputs (a whole multi-layer model only approximately: deeper
    layers cache keys/values of states computed at earlier lengths).
    Shapes: ``rotate(q, k, q_pos, k_pos)``: q (B, H, Tq, D), k (B, Hkv, Tk, D), q_pos (Tq,) |
    (B, Tq), k_pos (Tk,) | (B, Tk) int64 -> q and k of the same shapes.
    """

    config_class = RoPEConfig
    config: RoPEConfig

    keep_dtype_buffers = ("inv_freq64", "default_inv_freq64")
    inv_freq64: Tensor
    default_inv_freq64: Tensor

    def __init__(self, *, kernel: Kernel = "eager", **config: Any) -> None:
        super().__init__(kernel=kernel, **config)
        self.attention_scaling = 1.0
        self.register_fixed_buffers()  # default_inv_freq64, inv_freq64 (P,) float64

    def fixed_buffers(self) -> dict[str, Tensor]:
        """``default_inv_freq64`` θ_i and ``inv_freq64`` (the scaling's), (P,) float64; sets
        ``attention_scaling``."""
        default, inv_freq, self.attention_scaling = self.config.scaled_inv_freq(PF.torch_xp)
        return {"default_inv_freq64": default, "inv_freq64": inv_freq}

    @property
    def inv_freq(self) -> Tensor:
        """Frequencies (P,) in float32, before any dynamic adjustment (Hugging Face's buffer)."""
        return self.inv_freq64.float()

    def max_position(self, *positions: Tensor) -> int:
        """max(positions), -1 for none: one host read per tensor."""
        return max((int(p.max()) for p in positions if p.numel()), default=-1)


@register("p_rope", family="rotary", paper="Barbero et al., arXiv:2410.06205", year=2024)
class PRoPE(RoPE):
    """p-RoPE: RoPE with only its highest-frequency share of pairs rotated.

    p-RoPE (Barbero et al. 2024, "Round and Round We Go!", sec. 6): RoPE with only the
    highest-frequency share ``p`` of its pairs rotated, θ_i = base^(-2i/d) for
    i < ⌊p·d/2⌋ and θ_i = 0 for the rest (``PF.p_rope_inv_freq``), so the lowest frequencies,
    which carry little position but much "semantic" channel, are not rotated at all.

    p = 1 is ``rope``, p = 0 is ``nope``. transformers' ``rope_type: "proportional"`` (Gemma 4)
    is this with p its ``partial_rotary_factor`` (``posenc.hf.rope_config.rope_from_hf``).
    Everything else (``layout``, ``partial``, ``scaling``, ``kernel``, ``kv_policy``) is RoPE's.
    Shapes: ``rotate(q, k, q_pos, k_pos)``: q (B, H, Tq, D), k (B, Hkv, Tk, D), q_pos (Tq,) |
    (B, Tq), k_pos (Tk,) | (B, Tk) int64 -> q and k of the same shapes.
    """

    config_class = PRoPEConfig
    config: PRoPEConfig
