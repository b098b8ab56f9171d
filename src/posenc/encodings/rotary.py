"""Rotary encodings: queries and keys rotated by their positions."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .. import functional as PF
from ..kernels.rope import Kernel, check_kernel, rotate_tables
from ..kernels.rope_eager import apply_rope
from ..kernels.rope_tables import RopeTables
from ..registry import register
from .base import PositionalEncoding, check_qk
from .capabilities import Capabilities
from .configs import RoPEConfig
from .context import Ctx, shared_for


class KernelRotary(PositionalEncoding):
    """Base of the RoPEs rotating by a ``kernel`` (``posenc.kernels.rope``): ``rotate`` checks
    its inputs (unless a context comes with them: the caller that built it checked them) and
    rotates q and k by their ``pair_tables``, made once per forward through the context."""

    capabilities = Capabilities(rotates=True)

    def __init__(self, *, kernel: Kernel = "eager", **config: Any) -> None:
        super().__init__(**config)
        self.kernel: Kernel = check_kernel(kernel)

    def pair_tables(
        self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, ctx: Ctx
    ) -> tuple[RopeTables, RopeTables]:
        """cos, sin tables of q at ``q_pos`` and of k at ``k_pos``, broadcastable to each."""
        raise NotImplementedError

    def rotate(
        self,
        q: Tensor,
        k: Tensor,
        q_pos: Tensor,
        k_pos: Tensor,
        *,
        ctx: Ctx = None,
        inplace: bool = False,
    ) -> tuple[Tensor, Tensor]:
        """R(q_pos) q, R(k_pos) k for q (B, H, Tq, D), k (B, Hkv, Tk, D) by the module's
        ``kernel``; ``inplace=True`` (inference) overwrites q and k instead of allocating."""
        if ctx is None:
            q_pos, k_pos = check_qk(q, k, q_pos, k_pos, self.head_dim, axes=self.config.axes)
        tq, tk = self.pair_tables(q, k, q_pos, k_pos, ctx)
        return rotate_tables(q, k, tq, tk, layout=self.layout, inplace=inplace, kernel=self.kernel)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, kernel={self.kernel!r}"


@register("rope", family="rotary", paper="Su et al., arXiv:2104.09864", year=2021)
class RoPE(KernelRotary):
    """Rotary position embedding (Su et al. 2021, RoFormer): q_m -> R_m q_m, k_n -> R_n k_n with

    R_m rotating pair i by m·θ_i, θ_i = base^(-2i/d), so <R_m q, R_n k> = <q, R_(n-m) k>.
    ``layout``: "half" (GPT-NeoX/HF) or "interleaved" (RoFormer/Meta); ``partial``: fraction
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

    def frequencies(self, seq_len: int | None = None) -> tuple[Tensor, float]:
        """(inv_freq (P,) float64, attention_scaling) at the current length ``seq_len``."""
        if not self.dynamic or seq_len is None:
            return self.inv_freq64, self.attention_scaling
        return self.scaling.apply(self.default_inv_freq64, seq_len)

    def seq_len(self, *positions: Tensor) -> int | None:
        """max(positions) + 1 for dynamic scaling (what transformers uses), else None."""
        if not self.dynamic:
            return None
        return max((int(p.max()) for p in positions if p.numel()), default=-1) + 1

    def cos_sin(
        self, pos: Tensor, dtype: torch.dtype = torch.float32, seq_len: int | None = None
    ) -> tuple[Tensor, Tensor]:
        """cos, sin (..., P) in ``dtype`` for int64 positions (...,), from float64 angles, times
        the scaling's attention factor. ``seq_len`` (dynamic scaling) defaults to max(pos) + 1."""
        seq_len = self.seq_len(pos) if seq_len is None else seq_len
        inv_freq, scale = self.frequencies(seq_len)
        cos, sin = PF.rope_cos_sin(pos, inv_freq)  # float64
        if scale != 1.0:
            cos, sin = cos * scale, sin * scale
        return cos.to(dtype), sin.to(dtype)

    def _tables(self, x: Tensor, pos: Tensor, seq_len: int | None, ctx: Ctx = None) -> RopeTables:
        """cos, sin broadcastable to x (B, H, T, D): (T, P) or (B, 1, T, P), with what the
        kernels derive from them; made once per forward for the context's positions (every
        layer rotates at the same ones)."""
        dtype = torch.promote_types(x.dtype, torch.float32)

        def make() -> RopeTables:
            cos, sin = self.cos_sin(pos, dtype, seq_len)
            return RopeTables(*((cos[:, None], sin[:, None]) if cos.ndim == 3 else (cos, sin)))

        return shared_for(ctx, pos, ("rope", self, dtype, seq_len), make)

    def rotate_one(self, x: Tensor, pos: Tensor, seq_len: int | None = None) -> Tensor:
        """Rotate x (B, H, T, D) at positions (T,) or (B, T) (dynamic scaling at ``seq_len``)."""
        tables = self._tables(x, pos, seq_len)
        return apply_rope(x, tables.cos, tables.sin, layout=self.layout)  # the eager kernel

    def pair_tables(
        self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, ctx: Ctx
    ) -> tuple[RopeTables, RopeTables]:
        seq_len = self._seq_len(q_pos, k_pos, ctx)
        return self._tables(q, q_pos, seq_len, ctx), self._tables(k, k_pos, seq_len, ctx)

    def _seq_len(self, q_pos: Tensor, k_pos: Tensor, ctx: Ctx) -> int | None:
        """The dynamic length of a call: of the whole context (read once per forward), or of
        these positions."""
        if not self.dynamic:
            return None
        roles = (None, None) if ctx is None else (ctx.role(q_pos), ctx.role(k_pos))
        if ctx is None or None in roles:
            return self.seq_len(q_pos, k_pos)
        return ctx.shared(("rope_seq_len", self, *roles), lambda: self.seq_len(q_pos, k_pos))
