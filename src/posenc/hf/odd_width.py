"""RoPE over an odd rotated width, as transformers computes it (GLM-4.5's default config:
``partial_rotary_factor`` 0.5 of head_dim 4096 / 96 = 42 gives int(21.0) = 21).

transformers' ``compute_default_rope_parameters`` takes the rotated width w = int(head_dim ·
partial) as it comes: θ_j = base^(-2j/w) for j < ceil(w/2) (``arange(0, w, 2) / w``), and its
embeddings ``cat(freqs, freqs)`` rotate 2·ceil(w/2) = w + 1 features. ``OddWidthRoPE`` is
posenc's RoPE over those w + 1 features with that series.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

from .. import functional as PF
from ..encodings.configs import RoPEConfig
from ..encodings.rotary import RoPE

__all__ = ["OddWidthRoPE", "OddWidthRoPEConfig"]


@dataclass(frozen=True, kw_only=True)
class OddWidthRoPEConfig(RoPEConfig):
    """RoPE's config with transformers' odd width ``width`` w: ``partial`` must rotate w + 1
    features; no ``scaling`` (its methods are written for an even width)."""

    width: int = 1

    def check(self) -> None:
        super().check()
        if not isinstance(self.width, int) or self.width < 1 or self.width % 2 == 0:
            raise ValueError(f"width must be an odd positive int, got {self.width!r}")
        if self.rotary_dim != self.width + 1:
            raise ValueError(
                f"an odd width {self.width} rotates {self.width + 1} features; partial "
                f"{self.partial} of head_dim {self.head_dim} rotates {self.rotary_dim}"
            )
        if self.scaling is not None:
            raise ValueError(
                f"RoPE over the odd width {self.width} takes no context-extension scaling "
                f"(its methods are defined for an even width), got {self.scaling.method!r}"
            )

    def scaled_inv_freq(self, xp: ModuleType | None = None) -> tuple[Any, Any, float]:
        """(θ, θ, 1.0), θ_j = base^(-2j/w) for j < (w + 1)/2, float64 in ``xp``."""
        default = PF.inv_freq_series(self.width, base=self.base, xp=xp)
        return default, default, 1.0


class OddWidthRoPE(RoPE):
    """RoPE over transformers' odd rotated width w: pairs j < (w + 1)/2 of the first w + 1
    features turn by pos·base^(-2j/w) (transformers 5.23's ``compute_default_rope_parameters``
    at an odd ``int(head_dim · partial_rotary_factor)``). Not in the registry: built by
    ``rope_from_hf``.
    Shapes: ``rotate(q, k, q_pos, k_pos)``: q (B, H, Tq, D), k (B, Hkv, Tk, D), q_pos (Tq,) |
    (B, Tq), k_pos (Tk,) | (B, Tk) int64 -> q and k of the same shapes.
    """

    config_class = OddWidthRoPEConfig
    config: OddWidthRoPEConfig
