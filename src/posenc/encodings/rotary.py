"""Rotary encodings: queries and keys rotated by their positions (RoPE, p-RoPE)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import Tensor

from .. import functional as PF
from ..kernels.rope import Kernel, check_kernel, rotate_tables
from ..kernels.rope_eager import apply_rope, rope_pair
from ..kernels.rope_tables import RopeTables
from ..registry import register
from .base import PositionalEncoding, check_qk
from .capabilities import Capabilities
from .configs import PRoPEConfig, RoPEConfig
from .state import InDtype, PositionState


def work_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype tables are made in for activations of ``dtype``: float32, or the wider one
    (float64)."""
    return torch.promote_types(torch.float32, dtype)


def rope_tables(cos: Tensor, sin: Tensor, dtype: torch.dtype) -> RopeTables:
    """``RopeTables`` of cos, sin (..., T, P) in ``dtype``, broadcastable to x (B, H, T, D):
    (B, T, P) as (B, 1, T, P)."""
    cos, sin = cos.to(dtype), sin.to(dtype)
    if cos.ndim == 3:  # (B, T, P) -> (B, 1, T, P)
        cos, sin = cos[:, None], sin[:, None]
    return RopeTables(cos, sin)


@dataclass(frozen=True, eq=False, kw_only=True)
class RoPEState(PositionState):
    """RoPE's state of one forward: the cos/sin ``RopeTables`` at q_pos (``q_tables``) and at
    k_pos (``key_tables``; the queries' when ``keys_are_queries``), each made on first use in
    the work dtype asked for (float32, or float64 for float64 activations), at the dynamic
    length ``seq_len`` (max(positions) + 1; None without dynamic scaling). ``fresh_tables``:
    the queries' tables at the fresh keys' length (``new_keys``; the same tables unless
    dynamic scaling reads another length)."""

    seq_len: int | None
    q_tables: InDtype[RopeTables]
    key_tables: InDtype[RopeTables]
    fresh_seq_len: int | None
    fresh_tables: InDtype[RopeTables]

    def tables(self, dtype: torch.dtype, *, keys: bool) -> RopeTables:
        """The queries' (or, with ``keys``, the keys') tables in the work dtype ``dtype``."""
        if keys and not self.keys_are_queries:
            return self.key_tables.get(dtype)
        return self.q_tables.get(dtype)

    def new_keys(self) -> RoPEState:
        """The state of the fresh keys: k_pos = q_pos, their tables the queries'."""
        if self.keys_are_queries:
            return self
        return replace(
            self,
            k_pos=self.q_pos,
            offset_bounds=None,
            keys_are_queries=True,
            seq_len=self.fresh_seq_len,
            q_tables=self.fresh_tables,
        )


@register("rope", family="rotary", paper="Su et al., arXiv:2104.09864", year=2021)
class RoPE(PositionalEncoding[RoPEState]):
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
    capabilities = Capabilities(rotates=True)
    rotates_in_place = True

    keep_dtype_buffers = ("inv_freq64", "default_inv_freq64")
    inv_freq64: Tensor
    default_inv_freq64: Tensor

    def __init__(self, *, kernel: Kernel = "eager", **config: object) -> None:
        super().__init__(**config)
        self.kernel: Kernel = check_kernel(kernel)
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

    def frequencies(self, seq_len: int | None = None) -> tuple[Tensor, float]:
        """(inv_freq (P,) float64, attention_scaling) at the current length ``seq_len``."""
        scaling_config = self.config.scaling
        if scaling_config is None or not scaling_config.dynamic or seq_len is None:
            return self.inv_freq64, self.attention_scaling
        inv_freq, scaling = scaling_config.apply(self.default_inv_freq64, seq_len)
        return inv_freq, float(scaling)

    def seq_len(self, *positions: Tensor) -> int | None:
        """max(positions) + 1 for dynamic scaling (what transformers uses), else None."""
        if not self.config.dynamic:
            return None
        return self.max_position(*positions) + 1

    def cos_sin(
        self, pos: Tensor, dtype: torch.dtype | None = None, seq_len: int | None = None
    ) -> tuple[Tensor, Tensor]:
        """cos, sin of pos·θ times the scaling's attention factor.

        cos(pos·θ_i)·s, sin(pos·θ_i)·s (Su et al. 2021, arXiv:2104.09864), from float64
        angles, in ``dtype`` (default float32); θ the scaling's frequencies at ``seq_len``
        (dynamic scaling; default max(pos) + 1), s its ``attention_scaling``.
        Shapes: pos (...,) integer -> cos, sin (..., P).
        """
        seq_len = self.seq_len(pos) if seq_len is None else seq_len
        inv_freq, scale = self.frequencies(seq_len)
        cos, sin = PF.rope_cos_sin(pos, inv_freq)  # (..., P) float64
        if scale != 1.0:
            cos, sin = cos * scale, sin * scale
        target = torch.float32 if dtype is None else dtype
        return cos.to(target), sin.to(target)

    def tables(self, pos: Tensor, dtype: torch.dtype, seq_len: int | None) -> RopeTables:
        """The ``RopeTables`` at positions (T,) | (B, T) in ``dtype``, broadcastable to
        (B, H, T, D)."""
        return rope_tables(*self.cos_sin(pos, dtype, seq_len), dtype)

    def prepare(
        self,
        q_pos: Tensor,
        k_pos: Tensor | None = None,
        *,
        dtype: torch.dtype = torch.float32,
        offset_bounds: tuple[int, int] | None = None,
    ) -> RoPEState:
        """The forward's ``RoPEState``: its tables made on first use (``dtype``: the activations',
        which their first layer meets); with dynamic scaling the current length
        max(positions) + 1 read once (a host read per position tensor).

        Shapes: q_pos (T,) | (B, T), k_pos (L,) | (B, L) int64 (validated) -> the state.
        """
        same = k_pos is None or k_pos is q_pos
        keys = q_pos if k_pos is None else k_pos
        fresh_len = self.seq_len(q_pos)
        seq_len = fresh_len if same or fresh_len is None else self.seq_len(q_pos, keys)
        q_tables = InDtype(lambda work: self.tables(q_pos, work, seq_len))
        fresh = (
            q_tables
            if fresh_len == seq_len
            else InDtype(lambda work: self.tables(q_pos, work, fresh_len))
        )
        return RoPEState(
            q_pos=q_pos,
            k_pos=keys,
            offset_bounds=offset_bounds,
            keys_are_queries=same,
            seq_len=seq_len,
            q_tables=q_tables,
            key_tables=InDtype(lambda work: self.tables(keys, work, seq_len)),
            fresh_seq_len=fresh_len,
            fresh_tables=fresh,
        )

    def rotate(
        self,
        q: Tensor,
        k: Tensor,
        q_pos: Tensor,
        k_pos: Tensor,
        *,
        ctx: RoPEState | None = None,
        inplace: bool = False,
    ) -> tuple[Tensor, Tensor]:
        """R(q_pos) q, R(k_pos) k (positions and tables ``ctx``'s when given) by the
        ``kernel``; ``inplace=True`` (inference) overwrites q and k instead of allocating.

        Shapes: q (B, H, Tq, D), k (B, Hkv, Tk, D), q_pos (Tq,) | (B, Tq), k_pos (Tk,) |
        (B, Tk) -> q and k of the same shapes.
        Raises: ValueError/TypeError for inputs that do not fit (without ``ctx``).
        """
        if ctx is None:
            q_pos, k_pos = check_qk(q, k, q_pos, k_pos, self.config.head_dim)
            seq_len = self.seq_len(q_pos, k_pos)
            tq = self.tables(q_pos, work_dtype(q.dtype), seq_len)
            tk = self.tables(k_pos, work_dtype(k.dtype), seq_len)
        else:
            tq = ctx.tables(work_dtype(q.dtype), keys=False)
            tk = ctx.tables(work_dtype(k.dtype), keys=True)
        if ctx is not None and self.kernel == "eager" and not inplace:
            # inside a forward (inputs checked where they entered), the default kernel
            return rope_pair(q, k, tq, tk, self.layout, inplace=False)
        return rotate_tables(q, k, tq, tk, layout=self.layout, inplace=inplace, kernel=self.kernel)

    def rotate_one(self, x: Tensor, pos: Tensor, seq_len: int | None = None) -> Tensor:
        """R(pos) x by the eager kernel (dynamic scaling at ``seq_len``, default max(pos) + 1).

        Shapes: x (B, H, T, D), pos (T,) | (B, T) -> (B, H, T, D).
        """
        tables = self.tables(pos, work_dtype(x.dtype), seq_len)
        return apply_rope(x, tables.cos, tables.sin, layout=self.layout)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, kernel={self.kernel!r}"


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
