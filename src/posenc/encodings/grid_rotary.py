"""RoPE on grids: positions (T, A) | (B, T, A) of A axes (image rows and columns, video frames)
turn each rotary pair by an angle built from the coordinates, then the RoPE kernels rotate."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .. import functional as PF
from ..kernels.rope import Kernel, check_kernel, rotate_tables
from ..kernels.rope_tables import RopeTables
from ..registry import register
from .base import PositionalEncoding, check_qk
from .capabilities import Capabilities
from .configs import AxialRoPEConfig, MRoPEConfig, RoPE3DConfig, RoPEMixedConfig
from .rotary import work_dtype
from .state import InDtype, PositionState

#: Angles of every pair at positions (..., T, A): (..., T, P), or (..., H, T, P) per head.
Angles = Callable[[Tensor], Tensor]


@dataclass(frozen=True, eq=False, kw_only=True)
class GridState(PositionState):
    """A grid RoPE's state of one forward: cos/sin ``RopeTables`` of the float64 angles at q_pos
    (``q_tables``) and at k_pos (``key_tables``; the queries' when ``keys_are_queries``), each
    made on first use in the work dtype asked for (float32, or float64 for float64
    activations)."""

    q_tables: InDtype[RopeTables]
    key_tables: InDtype[RopeTables]

    def tables(self, dtype: torch.dtype, *, keys: bool) -> RopeTables:
        """The queries' (or, with ``keys``, the keys') tables in the work dtype ``dtype``."""
        if keys and not self.keys_are_queries:
            return self.key_tables.get(dtype)
        return self.q_tables.get(dtype)


def grid_cos_sin(
    angles: Angles, pos: Tensor, dtype: torch.dtype | None = None
) -> tuple[Tensor, Tensor]:
    """cos, sin of ``angles(pos)`` (float64) in ``dtype`` (default float32)."""
    theta = angles(pos)
    target = torch.float32 if dtype is None else dtype
    return torch.cos(theta).to(target), torch.sin(theta).to(target)


def grid_tables(angles: Angles, pos: Tensor, dtype: torch.dtype, per_head: bool) -> RopeTables:
    """The ``RopeTables`` of positions (T, A) | (B, T, A) in ``dtype``, broadcastable to
    (B, H, T, D): (B, T, P) as (B, 1, T, P) unless ``per_head`` (angles (..., H, T, P))."""
    cos, sin = grid_cos_sin(angles, pos, dtype)
    if cos.ndim == 3 and not per_head:  # (B, T, P) -> (B, 1, T, P)
        cos, sin = cos[:, None], sin[:, None]
    return RopeTables(cos, sin)


def prepare_grid(
    angles: Angles,
    q_pos: Tensor,
    k_pos: Tensor | None,
    *,
    axes: int,
    dtype: torch.dtype,
    offset_bounds: tuple[int, int] | None,
    per_head: bool,
) -> GridState:
    """A grid RoPE's ``GridState``, its tables made on first use (``dtype``, the activations',
    is the one their first layer meets)."""
    same = k_pos is None or k_pos is q_pos
    keys = q_pos if k_pos is None else k_pos
    return GridState(
        q_pos=q_pos,
        k_pos=keys,
        axes=axes,
        offset_bounds=offset_bounds,
        keys_are_queries=same,
        q_tables=InDtype(lambda work: grid_tables(angles, q_pos, work, per_head)),
        key_tables=InDtype(lambda work: grid_tables(angles, keys, work, per_head)),
    )


def grid_pair_tables(
    angles: Angles,
    q: Tensor,
    k: Tensor,
    q_pos: Tensor,
    k_pos: Tensor,
    ctx: GridState | None,
    *,
    per_head: bool,
) -> tuple[RopeTables, RopeTables]:
    """q's and k's tables: ``ctx``'s, else made from q_pos and k_pos."""
    wq, wk = work_dtype(q.dtype), work_dtype(k.dtype)
    if ctx is not None:
        return ctx.tables(wq, keys=False), ctx.tables(wk, keys=True)
    return grid_tables(angles, q_pos, wq, per_head), grid_tables(angles, k_pos, wk, per_head)


class AxialRoPE(PositionalEncoding[GridState]):
    """Axial RoPE: pair p turns by its axis's coordinate, pos[a(p)]·θ_p.

    θ ``inv_freq64`` (P,) float64 (it stays float64 under ``model.to(bf16)``), a
    ``axis_of_pair`` (P,), from the config's ``inv_freq()`` and ``pair_axes()``; cos/sin of the
    float64 angles made once per forward (``prepare``) and handed to the RoPE ``kernel``
    (``posenc.kernels.rope``: "eager", "cpp", "inductor", "triton", "auto").
    Shapes: ``rotate(q, k, q_pos, k_pos)``: q (B, H, Tq, D), k (B, Hkv, Tk, D), q_pos (Tq, A) |
    (B, Tq, A), k_pos (Tk, A) | (B, Tk, A) int64 -> q and k of the same shapes.
    Raises: ValueError/TypeError (``rotate`` without a state) for inputs that do not fit.
    """

    capabilities = Capabilities(rotates=True)
    rotates_in_place = True
    config: AxialRoPEConfig | MRoPEConfig
    keep_dtype_buffers = ("inv_freq64",)
    inv_freq64: Tensor
    axis_of_pair: Tensor

    def __init__(self, *, kernel: Kernel = "eager", **config: object) -> None:
        super().__init__(**config)
        self.kernel: Kernel = check_kernel(kernel)
        self.register_fixed_buffers()  # inv_freq64 (P,) float64, axis_of_pair (P,) int64

    def fixed_buffers(self) -> dict[str, Tensor]:
        return {
            "inv_freq64": self.config.inv_freq(PF.torch_xp),
            "axis_of_pair": torch.tensor(self.config.pair_axes(), dtype=torch.long),
        }

    def angles(self, pos: Tensor) -> Tensor:
        """pos[a(p)]·θ_p at positions (..., T, A) -> (..., T, P), float64."""
        return PF.axis_angles(pos, self.inv_freq64, self.axis_of_pair)  # (..., T, P)

    def cos_sin(self, pos: Tensor, dtype: torch.dtype | None = None) -> tuple[Tensor, Tensor]:
        """cos, sin of ``angles(pos)`` in ``dtype`` (default float32), from float64 angles."""
        return grid_cos_sin(self.angles, pos, dtype)

    def prepare(
        self,
        q_pos: Tensor,
        k_pos: Tensor | None = None,
        *,
        dtype: torch.dtype = torch.float32,
        offset_bounds: tuple[int, int] | None = None,
    ) -> GridState:
        """The forward's ``GridState`` (the queries' tables now, the keys' on first use).

        Shapes: q_pos (T, A) | (B, T, A), k_pos (L, A) | (B, L, A) int64 -> the state.
        """
        return prepare_grid(
            self.angles, q_pos, k_pos, axes=self.config.axes, dtype=dtype,
            offset_bounds=offset_bounds, per_head=False,
        )  # fmt: skip

    def rotate(
        self,
        q: Tensor,
        k: Tensor,
        q_pos: Tensor,
        k_pos: Tensor,
        *,
        ctx: GridState | None = None,
        inplace: bool = False,
    ) -> tuple[Tensor, Tensor]:
        """R(q_pos) q, R(k_pos) k by the ``kernel`` (``ctx``'s positions and tables when
        given); ``inplace=True`` (inference) overwrites q and k."""
        if ctx is None:
            q_pos, k_pos = check_qk(q, k, q_pos, k_pos, self.config.head_dim, axes=self.config.axes)
        tq, tk = grid_pair_tables(self.angles, q, k, q_pos, k_pos, ctx, per_head=False)
        return rotate_tables(q, k, tq, tk, layout=self.layout, inplace=inplace, kernel=self.kernel)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, kernel={self.kernel!r}"


@register("rope_2d", family="rotary", paper="Heo et al., arXiv:2403.13298", year=2024)
class RoPE2D(AxialRoPE):
    """Axial 2-D RoPE for images: pairs split between rows and columns.

    Axial 2-D RoPE for images (Heo et al. 2024, "Rotary Position Embedding for Vision
    Transformer", eq. 12): at grid position (y, x) (row, column) the first half of the pairs
    turns by y·θ_j, the second by x·θ_j, θ_j = base^(-4j/D), j < D/4, so

        <R(y, x) q, R(y', x') k> depends on (y' - y, x' - x) only.

    ``base`` 100 as in the paper's ViTs; ``sections`` (pairs per axis) splits the pairs
    otherwise, each axis with its own series base^(-2j/(2 s_a)); ``layout`` "half" or
    "interleaved" (the paper's complex pairs; rotary-embedding-torch's axial frequencies).
    A grid larger than in training needs nothing more: positions past it are rotations too.
    Shapes: ``rotate(q, k, q_pos, k_pos)``: q (B, H, Tq, D), k (B, Hkv, Tk, D), q_pos (Tq, 2) |
    (B, Tq, 2), k_pos (Tk, 2) | (B, Tk, 2) int64 -> q and k of the same shapes.
    """

    config_class = AxialRoPEConfig
    config: AxialRoPEConfig


@register("rope_3d", family="rotary", paper="Heo et al., arXiv:2403.13298 (3 axes)", year=2024)
class RoPE3D(AxialRoPE):
    """Axial RoPE for video: pairs split between frames, rows and columns.

    Axial RoPE for video, positions (t, h, w): ``sections`` (default a third each) of the
    pairs turn by the frame, the row and the column, each axis with its own RoPE series
    base^(-2j/(2 s_a)) (axial RoPE of Heo et al. 2024 on three axes, as video diffusion
    transformers use it). Scores depend on (Δt, Δh, Δw) only.
    Shapes: ``rotate(q, k, q_pos, k_pos)``: q (B, H, Tq, D), k (B, Hkv, Tk, D), q_pos (Tq, 3) |
    (B, Tq, 3), k_pos (Tk, 3) | (B, Tk, 3) int64 -> q and k of the same shapes.
    """

    config_class = RoPE3DConfig
    config: RoPE3DConfig


@register("rope_mixed", family="rotary", paper="Heo et al., arXiv:2403.13298", year=2024)
class RoPEMixed(PositionalEncoding[GridState]):
    """RoPE-Mixed (Heo et al. 2024, eq. 14): learned frequencies per head mixing both axes,

        angle_h,p(y, x) = y·F[h, 0, p] + x·F[h, 1, p],

    so each pair turns along a learned direction of the grid and scores still depend on
    (y' - y, x' - x) only. ``freqs`` F (H, 2, P) starts as the paper's ``init_2d_freqs``: per
    head a random phase φ_h ~ U(0, 2π), half the pairs along φ_h and half along φ_h + π/2,
    magnitudes base^(-4j/D) (``base`` 10 as in the paper). One instance shares F between the
    layers it serves (the paper learns F per layer: give each layer its own encoding).
    Per-head frequencies need keys with the queries' heads (no grouped-query attention), or
    ``n_heads=1`` (one F for every head).
    Shapes: ``rotate(q, k, q_pos, k_pos)``: q (B, H, Tq, D), k (B, Hkv, Tk, D), q_pos (Tq, 2) |
    (B, Tq, 2), k_pos (Tk, 2) | (B, Tk, 2) int64 -> q and k of the same shapes.
    """

    capabilities = Capabilities(rotates=True)
    rotates_in_place = True
    config_class = RoPEMixedConfig
    config: RoPEMixedConfig

    def __init__(self, *, kernel: Kernel = "eager", **config: object) -> None:
        super().__init__(**config)
        self.kernel: Kernel = check_kernel(kernel)
        self.freqs = nn.Parameter(torch.empty(self.n_heads, 2, self.head_dim // 2))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """F from phases φ_h ~ U(0, 2π) drawn from torch's generator."""
        with torch.no_grad():
            phases = torch.rand(self.n_heads, dtype=torch.float64, device=self.freqs.device)
            init = PF.mixed_inv_freq(self.head_dim, 2 * math.pi * phases, base=self.base)
            self.freqs.copy_(init)

    def angles(self, pos: Tensor) -> Tensor:
        """y·F[h, 0, p] + x·F[h, 1, p] at positions (..., T, 2) -> (..., H, T, P), float64."""
        return PF.mixed_angles(pos, self.freqs)  # (..., H, T, P), float64

    def cos_sin(self, pos: Tensor, dtype: torch.dtype | None = None) -> tuple[Tensor, Tensor]:
        """cos, sin of ``angles(pos)`` in ``dtype`` (default float32), from float64 angles."""
        return grid_cos_sin(self.angles, pos, dtype)

    def prepare(
        self,
        q_pos: Tensor,
        k_pos: Tensor | None = None,
        *,
        dtype: torch.dtype = torch.float32,
        offset_bounds: tuple[int, int] | None = None,
    ) -> GridState:
        """The forward's ``GridState`` (per-head tables; the keys' on first use).

        Shapes: q_pos (T, 2) | (B, T, 2), k_pos (L, 2) | (B, L, 2) int64 -> the state.
        """
        return prepare_grid(
            self.angles, q_pos, k_pos, axes=self.config.axes, dtype=dtype,
            offset_bounds=offset_bounds, per_head=True,
        )  # fmt: skip

    def rotate(
        self,
        q: Tensor,
        k: Tensor,
        q_pos: Tensor,
        k_pos: Tensor,
        *,
        ctx: GridState | None = None,
        inplace: bool = False,
    ) -> tuple[Tensor, Tensor]:
        """R_h(q_pos) q, R_h(k_pos) k per head by the ``kernel`` (``ctx``'s positions and
        tables when given); ``inplace=True`` (inference) overwrites q and k.

        Raises: ValueError when k's heads are not q's (or 1 shared frequency set), and for
        inputs that do not fit (without ``ctx``)."""
        if ctx is None:
            q_pos, k_pos = check_qk(q, k, q_pos, k_pos, self.config.head_dim, axes=self.config.axes)
        self.config.check_heads(q, k)
        tq, tk = grid_pair_tables(self.angles, q, k, q_pos, k_pos, ctx, per_head=True)
        return rotate_tables(q, k, tq, tk, layout=self.layout, inplace=inplace, kernel=self.kernel)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, kernel={self.kernel!r}"
