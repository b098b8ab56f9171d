"""Constructor arguments of the encodings, validated once for the torch and the Flax modules.

One frozen dataclass per encoding (``RoPEConfig(head_dim=64)``): the keyword arguments, their
defaults, the checks of the constructor (raising ValueError/TypeError naming the argument, as
torch's modules do) and the values derived from them (``rotary_dim``). Floats are stored as
``float``. The torch and Flax encodings are both built from these (``config_class``). What
surrounds an encoding has its own: ``posenc.attention.config.AttentionConfig``,
``posenc.models.config.TransformerConfig`` and ``EncoderDecoderConfig``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, fields
from types import ModuleType
from typing import Any, ClassVar, Literal, Protocol, SupportsInt

import numpy as np

from .. import functional as PF
from .._validate import (
    check_bool,
    check_even,
    check_positive_float,
    check_positive_int,
)
from ..extension.config import ScalingConfig, scaling_config
from ..functional import LAYOUTS, KerpleVariant, Layout

KVPolicy = Literal["reference", "rerotate"]
KV_POLICIES: tuple[KVPolicy, ...] = ("reference", "rerotate")
#: Encodings whose positions ``randomized`` can draw from a larger range (absolute positions).
RANDOMIZED_BASES = ("sinusoidal", "learned", "rope")


class Shaped(Protocol):
    """An array's rank and shape (a torch tensor, a NumPy or JAX array)."""

    @property
    def ndim(self) -> int: ...

    @property
    def shape(self) -> tuple[int, ...]: ...


@dataclass(frozen=True, kw_only=True)
class EncodingConfig:
    """Base: ``check()`` runs on construction, then every ``float`` field becomes a float."""

    name: ClassVar[str] = "nope"
    family: ClassVar[str] = "none"
    #: Position axes A the encoding reads: 1 (sequences), 2 (images), 3 (video, M-RoPE).
    axes: ClassVar[int] = 1

    def __post_init__(self) -> None:
        self.check()
        for f in fields(self):
            if f.type == "float":
                object.__setattr__(self, f.name, float(getattr(self, f.name)))

    def check(self) -> None:
        """Raise ValueError/TypeError naming the first invalid argument."""

    def arguments(self) -> dict[str, object]:
        """The arguments, by name."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        """The constructor's keyword arguments, in order."""
        return tuple(f.name for f in fields(cls))


@dataclass(frozen=True, kw_only=True)
class NoPETemperatureConfig(EncodingConfig):
    """NoPE with Llama 4's query temperature (``posenc.functional.query_temperature``)."""

    name, family = "nope_temperature", "none"
    floor_scale: int = 8192
    attn_scale: float = 0.1

    def check(self) -> None:
        check_positive_int(self.floor_scale, "floor_scale")
        check_positive_float(self.attn_scale, "attn_scale")


@dataclass(frozen=True, kw_only=True)
class SinusoidalConfig(EncodingConfig):
    name, family = "sinusoidal", "additive"
    dim: int
    base: float = 10000.0
    scale: float = 1.0

    def check(self) -> None:
        check_positive_int(self.dim, "dim")  # odd: a last sine column (``sinusoidal_table``)
        check_positive_float(self.base, "base")
        check_positive_float(self.scale, "scale")


@dataclass(frozen=True, kw_only=True)
class LearnedConfig(EncodingConfig):
    name, family = "learned", "additive"
    dim: int
    max_len: int = 512

    def check(self) -> None:
        check_positive_int(self.dim, "dim")
        check_positive_int(self.max_len, "max_len")

    def check_rows(self, low: SupportsInt, high: SupportsInt) -> None:
        """Raise ValueError unless positions low..high (ints or 0-d arrays: a host callback's
        arguments) all have a row of the table."""
        low, high = int(low), int(high)
        if high >= self.max_len or low < 0:
            p, side = (high, "past") if high >= self.max_len else (low, "before")
            raise ValueError(
                f"position {p} is {side} the learned table (max_len={self.max_len}, "
                f"valid positions 0..{self.max_len - 1})"
            )


@dataclass(frozen=True, kw_only=True)
class RotaryConfig(EncodingConfig):
    """The arguments RoPE and xPos share: θ_i = base^(-2i/d) on the ``partial`` rotated share of
    head_dim, paired as ``layout`` says."""

    head_dim: int
    base: float = 10000.0
    layout: Layout = "half"
    partial: float = 1.0

    def check(self) -> None:
        check_even(self.head_dim, "head_dim")
        check_positive_float(self.base, "base")
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {self.layout!r}")
        PF.rotary_dim(self.head_dim, float(self.partial))

    @property
    def rotary_dim(self) -> int:
        """Rotated features P·2 (``partial`` of head_dim)."""
        return PF.rotary_dim(self.head_dim, self.partial)


@dataclass(frozen=True, kw_only=True)
class RoPEConfig(RotaryConfig):
    """``scaling`` is stored as a ``ScalingConfig`` (given as one, a dict or None)."""

    name, family = "rope", "rotary"
    scaling: ScalingConfig | None = None
    kv_policy: KVPolicy = "reference"

    def check(self) -> None:
        super().check()
        if self.kv_policy not in KV_POLICIES:
            raise ValueError(f"kv_policy must be one of {KV_POLICIES}, got {self.kv_policy!r}")
        if self.scaling is not None:
            object.__setattr__(self, "scaling", scaling_config(self.scaling))

    @property
    def dynamic(self) -> bool:
        """The frequencies follow the current length (a dynamic scaling method)."""
        return self.scaling is not None and self.scaling.dynamic

    def scaled_inv_freq(self, xp: ModuleType | None = None) -> tuple[Any, Any, float]:
        """(default θ (P,), θ after the scaling, its attention factor), float64 in ``xp``."""
        default = PF.rope_inv_freq(self.rotary_dim, base=self.base, xp=xp)
        if self.scaling is None:
            return default, default, 1.0
        inv_freq, attention_scaling = self.scaling.apply(default)
        return default, inv_freq, attention_scaling


@dataclass(frozen=True, kw_only=True)
class PRoPEConfig(RoPEConfig):
    """p-RoPE (``PF.p_rope_inv_freq``): RoPE's arguments and ``p``, the share of the highest
    frequencies kept (p = 1: RoPE; p = 0: nothing rotated)."""

    name, family = "p_rope", "rotary"
    p: float = 0.75

    def check(self) -> None:
        super().check()
        PF.p_rope_inv_freq(self.rotary_dim, self.p, base=self.base)

    def scaled_inv_freq(self, xp: ModuleType | None = None) -> tuple[Any, Any, float]:
        """As RoPE's, from p-RoPE's frequencies: the scaling acts on the kept ones (θ = 0
        stays 0 under every method)."""
        default = PF.p_rope_inv_freq(self.rotary_dim, self.p, base=self.base, xp=xp)
        if self.scaling is None:
            return default, default, 1.0
        inv_freq, attention_scaling = self.scaling.apply(default)
        return default, inv_freq, attention_scaling


@dataclass(frozen=True, kw_only=True)
class AxialRoPEConfig(EncodingConfig):
    """RoPE over grid positions of ``axes`` axes: each axis turns its own block of
    ``sections`` pairs by its own RoPE series (default: the P = head_dim/2 pairs split as
    evenly as they go, the P mod A extra pairs to the last axes). Stored as a tuple."""

    name, family = "rope_2d", "rotary"
    axes = 2
    head_dim: int
    base: float = 100.0
    layout: Layout = "half"
    sections: Sequence[int] | None = None

    def check(self) -> None:
        check_even(self.head_dim, "head_dim")
        check_positive_float(self.base, "base")
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {self.layout!r}")
        P, A = self.head_dim // 2, self.axes
        if P < A:
            raise ValueError(
                f"head_dim must give a pair per axis (>= {2 * A}), got {self.head_dim}"
            )
        even = tuple(P // A + (a >= A - P % A) for a in range(A))
        sections = PF.check_sections(even if self.sections is None else self.sections, P)
        if len(sections) != A:
            raise ValueError(f"sections must give pairs for {A} axes, got {sections}")
        object.__setattr__(self, "sections", sections)

    def inv_freq(self, xp: ModuleType | None = None) -> Any:
        """θ (P,) float64 in ``xp``: each axis's own RoPE series over its section."""
        return PF.axial_inv_freq(self.sections or (), base=self.base, xp=xp)

    def pair_axes(self) -> tuple[int, ...]:
        """The axis whose coordinate turns each pair, (P,)."""
        return PF.pair_axes(self.sections or ())


@dataclass(frozen=True, kw_only=True)
class RoPE3DConfig(AxialRoPEConfig):
    name = "rope_3d"
    axes = 3
    base: float = 10000.0


@dataclass(frozen=True, kw_only=True)
class MRoPEConfig(EncodingConfig):
    """M-RoPE: the 1-D series θ_p = base^(-2p/D) over every pair, contiguous ``mrope_section``
    pairs for (t, h, w) (Qwen2-VL, Qwen2.5-VL) or, ``interleaved``, spread over the spectrum
    (Qwen3-VL). ``mrope_section`` None is stored as Qwen2-VL's (16, 24, 24) of 64 pairs (or
    Qwen3-VL's (24, 20, 20) when interleaved) scaled to head_dim/2 pairs."""

    name, family = "mrope", "rotary"
    axes = 3
    head_dim: int
    base: float = 10000.0
    mrope_section: Sequence[int] | None = None
    interleaved: bool = False
    layout: Layout = "half"

    def check(self) -> None:
        check_even(self.head_dim, "head_dim")
        check_positive_float(self.base, "base")
        check_bool(self.interleaved, "interleaved")
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {self.layout!r}")
        P = self.head_dim // 2
        if P < 3:
            raise ValueError(f"mrope needs head_dim >= 6 (a pair per axis), got {self.head_dim}")
        section = self.mrope_section
        if section is None:
            h = 5 * P // 16 if self.interleaved else (P - P // 4 + 1) // 2
            section = (P - 2 * h, h, h) if self.interleaved else (P // 4, h, P - P // 4 - h)
        section = PF.check_sections(section, P)
        if len(section) != 3:
            raise ValueError(f"mrope_section must give pairs for (t, h, w), got {section}")
        PF.pair_axes(section, interleaved=self.interleaved)  # interleaved sections must fit
        object.__setattr__(self, "mrope_section", section)

    def inv_freq(self, xp: ModuleType | None = None) -> Any:
        """θ_p = base^(-2p/D) (P,) float64 in ``xp``: RoPE's own series."""
        return PF.rope_inv_freq(self.head_dim, base=self.base, xp=xp)

    def pair_axes(self) -> tuple[int, ...]:
        """The axis (0 = t, 1 = h, 2 = w) whose coordinate turns each pair, (P,)."""
        return PF.pair_axes(self.mrope_section or (), interleaved=self.interleaved)


@dataclass(frozen=True, kw_only=True)
class RoPEMixedConfig(EncodingConfig):
    name, family = "rope_mixed", "rotary"
    axes = 2
    head_dim: int
    n_heads: int
    base: float = 10.0
    layout: Layout = "half"

    def check(self) -> None:
        check_positive_int(self.head_dim, "head_dim")
        if self.head_dim % 4:
            raise ValueError(f"rope_mixed needs head_dim divisible by 4, got {self.head_dim}")
        check_positive_int(self.n_heads, "n_heads")
        check_positive_float(self.base, "base")
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {self.layout!r}")

    def check_heads(self, q: Shaped, k: Shaped) -> None:
        """Raise ValueError unless q and k (B, H, T, D) have a frequency set per head (or
        ``n_heads`` = 1, one set for every head)."""
        for name, x in (("q", q), ("k", k)):
            if self.n_heads != 1 and x.ndim == 4 and x.shape[1] != self.n_heads:
                raise ValueError(
                    f"rope_mixed has frequencies for n_heads={self.n_heads}; {name} has "
                    f"{x.shape[1]} heads (per-head frequencies need keys with the queries' "
                    "heads, no grouped-query attention; or build it with n_heads=1)"
                )


@dataclass(frozen=True, kw_only=True)
class Sincos2DConfig(EncodingConfig):
    name, family = "sincos_2d", "additive"
    axes = 2
    dim: int
    base: float = 10000.0
    scale: float = 1.0

    def check(self) -> None:
        check_positive_int(self.dim, "dim")
        if self.dim % 4:
            raise ValueError(f"sincos_2d needs dim divisible by 4, got {self.dim}")
        check_positive_float(self.base, "base")
        check_positive_float(self.scale, "scale")


@dataclass(frozen=True, kw_only=True)
class Learned2DConfig(EncodingConfig):
    """``grid`` (rows, columns) is stored as a tuple of ints."""

    name, family = "learned_2d", "additive"
    axes = 2
    dim: int
    grid: Sequence[int] = (16, 16)
    init_std: float = 0.02

    def check(self) -> None:
        check_positive_int(self.dim, "dim")
        check_positive_float(self.init_std, "init_std")
        object.__setattr__(self, "grid", PF.check_grid(self.grid, "grid"))

    def check_rows(
        self, y_min: SupportsInt, y_max: SupportsInt, x_min: SupportsInt, x_max: SupportsInt
    ) -> None:
        """Raise ValueError unless grid positions in rows y_min..y_max and columns x_min..x_max
        (ints or 0-d arrays: a host callback's arguments) all lie on the grid."""
        y_min, y_max, x_min, x_max = (int(v) for v in (y_min, y_max, x_min, x_max))
        rows, cols = self.grid
        if y_min < 0 or x_min < 0 or y_max >= rows or x_max >= cols:
            raise ValueError(
                f"grid positions (row, column) must lie in 0..{rows - 1} x 0..{cols - 1} "
                f"(grid={tuple(self.grid)}), got rows {y_min}..{y_max} and columns "
                f"{x_min}..{x_max}: resample_ the table to a larger grid"
            )


@dataclass(frozen=True, kw_only=True)
class XPosConfig(RotaryConfig):
    name, family = "xpos", "rotary"
    scale_base: float = 512.0
    gamma: float = 0.4

    def check(self) -> None:
        super().check()
        check_positive_float(self.scale_base, "scale_base")
        check_positive_float(self.gamma, "gamma")

    def check_range(self, ends: Sequence[int], limits: Sequence[tuple[float, str]]) -> None:
        """Raise ValueError where positions reaching the largest of ``ends`` in magnitude would
        scale queries or keys past a dtype's range, each given as (largest value, name)
        (``PF.check_xpos_range``)."""
        largest = max(ends, key=abs)
        for limit, dtype in limits:
            PF.check_xpos_range(
                largest, self.rotary_dim, limit, dtype, scale_base=self.scale_base, gamma=self.gamma
            )


@dataclass(frozen=True, kw_only=True)
class PoPEConfig(EncodingConfig):
    name, family = "pope", "rotary"
    head_dim: int
    n_heads: int
    base: float = 10000.0
    phase_bias: bool = True

    def check(self) -> None:
        check_positive_int(self.head_dim, "head_dim")
        check_positive_int(self.n_heads, "n_heads")
        check_positive_float(self.base, "base")
        check_bool(self.phase_bias, "phase_bias")


@dataclass(frozen=True, kw_only=True)
class ALiBiConfig(EncodingConfig):
    """``slopes`` is stored as a tuple of floats (or None: ``PF.alibi_slopes``)."""

    name, family = "alibi", "bias"
    n_heads: int
    bidirectional: bool = False
    slopes: Sequence[float] | None = None

    def check(self) -> None:
        check_positive_int(self.n_heads, "n_heads")
        check_bool(self.bidirectional, "bidirectional")
        if self.slopes is not None:
            if len(self.slopes) != self.n_heads:
                raise ValueError(
                    f"slopes must hold n_heads={self.n_heads} values, got {len(self.slopes)}"
                )
            for m in self.slopes:
                check_positive_float(m, "each ALiBi slope")
            object.__setattr__(self, "slopes", tuple(float(m) for m in self.slopes))

    def slope_values(self, xp: ModuleType | None = None) -> Any:
        """Slopes m_h (H,), float64 in ``xp`` (default NumPy)."""
        if self.slopes is None:
            return PF.alibi_slopes(self.n_heads, xp=xp)
        return (xp or np).asarray(self.slopes, dtype=(xp or np).float64)


@dataclass(frozen=True, kw_only=True)
class T5Config(EncodingConfig):
    name, family = "t5", "bias"
    n_heads: int
    num_buckets: int = 32
    max_distance: int = 128
    bidirectional: bool = False
    init_std: float = 0.02

    def check(self) -> None:
        check_positive_int(self.n_heads, "n_heads")
        PF.check_t5_buckets(
            bidirectional=self.bidirectional,
            num_buckets=self.num_buckets,
            max_distance=self.max_distance,
        )
        check_positive_float(self.init_std, "init_std")


@dataclass(frozen=True, kw_only=True)
class KerpleConfig(EncodingConfig):
    name, family = "kerple", "bias"
    n_heads: int
    variant: KerpleVariant = "log"
    eps: float = 1e-2
    init_r1: float | None = None
    init_r2: float | None = None

    def check(self) -> None:
        PF.check_kerple(
            n_heads=self.n_heads, variant=self.variant, eps=self.eps, init_r1=self.init_r1,
            init_r2=self.init_r2,
        )  # fmt: skip

    @property
    def r2_max(self) -> float | None:
        """r2's upper bound: 2 for the power kernel, else None."""
        return 2.0 if self.variant == "power" else None

    @property
    def init_scales(self) -> tuple[float, float]:
        """Upper ends of the uniform inits of r1, r2 (official code: log U(0, 2), U(0, 1))."""
        return (2.0, 1.0) if self.variant == "log" else (1.0, 2.0)


@dataclass(frozen=True, kw_only=True)
class FIREConfig(EncodingConfig):
    name, family = "fire", "bias"
    n_heads: int
    hidden: int = 32
    init_c: float = 0.1
    init_threshold: float = 512.0
    eps: float = 1e-6
    bidirectional: bool = False

    def check(self) -> None:
        check_positive_int(self.n_heads, "n_heads")
        check_positive_int(self.hidden, "hidden")
        check_bool(self.bidirectional, "bidirectional")
        for what in ("init_c", "init_threshold", "eps"):
            check_positive_float(getattr(self, what), what)


@dataclass(frozen=True, kw_only=True)
class ShawConfig(EncodingConfig):
    name, family = "shaw", "relative"
    head_dim: int
    max_distance: int = 16
    values: bool = True
    init_std: float = 0.02

    def check(self) -> None:
        check_positive_int(self.head_dim, "head_dim")
        check_positive_int(self.max_distance, "max_distance")
        check_bool(self.values, "values")
        check_positive_float(self.init_std, "init_std")


@dataclass(frozen=True, kw_only=True)
class TransformerXLConfig(EncodingConfig):
    """``head_dim`` None is stored as dim // n_heads."""

    name, family = "transformer_xl", "relative"
    dim: int
    n_heads: int
    head_dim: int | None = None
    base: float = 10000.0

    def check(self) -> None:
        check_positive_int(self.n_heads, "n_heads")
        PF.rope_inv_freq(self.dim, base=self.base)  # validates dim (even, > 0) and base
        if self.head_dim is None:
            object.__setattr__(self, "head_dim", self.dim // self.n_heads)
        check_positive_int(self.head_dim, "head_dim")


@dataclass(frozen=True, kw_only=True)
class CoPEConfig(EncodingConfig):
    name, family = "cope", "contextual"
    head_dim: int
    n_positions: int = 64

    def check(self) -> None:
        check_positive_int(self.head_dim, "head_dim")
        check_positive_int(self.n_positions, "n_positions", minimum=2)


@dataclass(frozen=True, kw_only=True)
class FoXConfig(EncodingConfig):
    """Forgetting attention: a forget gate per head from the layer's input of width ``dim``
    (``n_heads`` gates, or 1 shared by every head)."""

    name, family = "fox", "data_dependent"
    dim: int
    n_heads: int

    def check(self) -> None:
        check_positive_int(self.dim, "dim")
        check_positive_int(self.n_heads, "n_heads")


@dataclass(frozen=True, kw_only=True)
class StickBreakingConfig(EncodingConfig):
    """Stick-breaking attention: ``attend_current`` lets a query break the stick at its own
    key; ``remainder`` puts what is left of the stick on the query's own value."""

    name, family = "stick_breaking", "data_dependent"
    attend_current: bool = False
    remainder: bool = True

    def check(self) -> None:
        check_bool(self.attend_current, "attend_current")
        check_bool(self.remainder, "remainder")


@dataclass(frozen=True, kw_only=True)
class PaTHConfig(EncodingConfig):
    """PaTH attention: Householder transforms per key head (``n_kv_heads``, default
    ``n_heads``) of ``head_dim`` from the layer's input of width ``dim``; ``forget_gate``
    adds FoX's gate per query head (PaTH-FoX)."""

    name, family = "path", "data_dependent"
    dim: int
    n_heads: int
    head_dim: int
    n_kv_heads: int | None = None
    forget_gate: bool = False

    def check(self) -> None:
        check_positive_int(self.dim, "dim")
        check_positive_int(self.n_heads, "n_heads")
        check_positive_int(self.head_dim, "head_dim")
        if self.n_kv_heads is not None:
            check_positive_int(self.n_kv_heads, "n_kv_heads")
            if self.n_heads % self.n_kv_heads:
                raise ValueError(
                    f"n_kv_heads must divide n_heads, got {self.n_kv_heads} and {self.n_heads}"
                )
        check_bool(self.forget_gate, "forget_gate")

    @property
    def key_heads(self) -> int:
        """Hkv: the heads that own a transform (``n_kv_heads``, default ``n_heads``)."""
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads


@dataclass(frozen=True, kw_only=True)
class RandomizedConfig(EncodingConfig):
    name, family = "randomized", "randomized"
    max_len: int
    base_encoding: str = "rope"
    dim: int | None = None
    head_dim: int | None = None
    base_config: Mapping[str, object] | None = None
    sample_in_eval: bool = False
    seed: int | None = None

    def check(self) -> None:
        check_positive_int(self.max_len, "max_len")
        check_bool(self.sample_in_eval, "sample_in_eval")
        if self.seed is not None and (
            not isinstance(self.seed, int) or isinstance(self.seed, bool)
        ):
            raise TypeError(f"seed must be an int or None, got {type(self.seed).__name__}")
        if self.base_encoding not in RANDOMIZED_BASES:
            raise ValueError(
                f"base_encoding must be one of {RANDOMIZED_BASES}, got {self.base_encoding!r}"
            )

    def check_draw(self, n: int) -> None:
        """Raise ValueError unless range(max_len) holds n distinct positions."""
        if n > self.max_len:
            raise ValueError(
                f"randomized positions need max_len >= sequence length, got max_len="
                f"{self.max_len} for {n} positions; raise max_len (the random range)"
            )

    def base_keys(self, accepted: Collection[str]) -> dict[str, object]:
        """The base encoding's arguments: dim, head_dim and max_len (the random range) where
        it takes them and they are given, then ``base_config``."""
        shared = {"dim": self.dim, "head_dim": self.head_dim, "max_len": self.max_len}
        given = {k: v for k, v in shared.items() if k in accepted and v is not None}
        return given | dict(self.base_config or {})


#: Every configuration, by encoding name.
CONFIGS: dict[str, type[EncodingConfig]] = {
    c.name: c
    for c in (
        EncodingConfig,
        NoPETemperatureConfig,
        SinusoidalConfig,
        LearnedConfig,
        RoPEConfig,
        PRoPEConfig,
        AxialRoPEConfig,
        RoPE3DConfig,
        MRoPEConfig,
        RoPEMixedConfig,
        Sincos2DConfig,
        Learned2DConfig,
        XPosConfig,
        PoPEConfig,
        ALiBiConfig,
        T5Config,
        KerpleConfig,
        FIREConfig,
        ShawConfig,
        TransformerXLConfig,
        CoPEConfig,
        FoXConfig,
        StickBreakingConfig,
        PaTHConfig,
        RandomizedConfig,
    )
}
