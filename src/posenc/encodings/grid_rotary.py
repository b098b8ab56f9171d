"""RoPE on grids: positions (T, A) | (B, T, A) of A axes (image rows and columns, video frames)
turn each rotary pair by an angle built from the coordinates, then the RoPE kernels rotate."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from .. import functional as PF
from ..kernels.rope import Kernel
from ..registry import register
from .configs import AxialRoPEConfig, MRoPEConfig, RoPE3DConfig, RoPEMixedConfig
from .flows import AxialFlow, GridFlow
from .rotary import KernelRotary


class GridRotary(GridFlow, KernelRotary):
    """Base of the grid RoPEs (``posenc.encodings.flows.GridFlow``): cos/sin of float64 angles
    made once per forward and handed to the RoPE ``kernel`` (``posenc.kernels.rope``: "eager",
    "cpp", "inductor", "triton", "auto"; learnable angles always run "eager")."""


class AxialRoPE(AxialFlow, GridRotary):
    """Axial RoPE (``posenc.encodings.flows.AxialFlow``); the frequencies ``inv_freq64`` stay
    float64 under ``model.to(bf16)``."""

    config: AxialRoPEConfig | MRoPEConfig
    keep_dtype_buffers = ("inv_freq64",)
    inv_freq64: Tensor
    axis_of_pair: Tensor

    def __init__(self, *, kernel: Kernel = "eager", **config: Any) -> None:
        super().__init__(kernel=kernel, **config)
        self.register_fixed_buffers()  # inv_freq64 (P,) float64, axis_of_pair (P,) int64

    def fixed_buffers(self) -> dict[str, Tensor]:
        return {
            "inv_freq64": self.config.inv_freq(PF.torch_xp),
            "axis_of_pair": torch.tensor(self.config.pair_axes(), dtype=torch.long),
        }


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
class RoPEMixed(GridRotary):
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

    config_class = RoPEMixedConfig
    config: RoPEMixedConfig
    per_head = True

    def __init__(self, *, kernel: Kernel = "eager", **config: Any) -> None:
        super().__init__(kernel=kernel, **config)
        self.freqs = nn.Parameter(torch.empty(self.n_heads, 2, self.head_dim // 2))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """F from phases φ_h ~ U(0, 2π) drawn from torch's generator."""
        with torch.no_grad():
            phases = torch.rand(self.n_heads, dtype=torch.float64, device=self.freqs.device)
            init = PF.mixed_inv_freq(self.head_dim, 2 * math.pi * phases, base=self.base)
            self.freqs.copy_(init)

    def angles(self, pos: Tensor) -> Tensor:
        return PF.mixed_angles(pos, self.freqs)  # (..., H, T, P), float64
