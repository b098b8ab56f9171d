"""Validated, frozen configurations of the context-extension methods, and their registry.

``scaling_config({"rope_type": "yarn", "factor": 4, ...})`` builds the matching config (the
keys are those of a Hugging Face ``rope_scaling`` / ``rope_parameters`` dict); every invalid
value raises ValueError/TypeError naming the key. ``config.apply(inv_freq, seq_len)`` returns
``Scaled(inv_freq, attention_scaling)`` from the pure functions in ``scaling.py``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import MISSING, dataclass
from typing import Any, ClassVar

from . import scaling as S


@dataclass(frozen=True, kw_only=True)
class ScalingConfig:
    """Base of the method configs: ``apply`` returns the scaled frequencies."""

    method: ClassVar[str] = ""
    paper: ClassVar[str] = ""
    #: True when the frequencies depend on the current sequence length.
    dynamic: ClassVar[bool] = False

    @classmethod
    def signature(cls) -> str:
        """``factor, original_max_position_embeddings, beta_fast=32.0, ...`` for tables."""
        return ", ".join(
            f.name if f.default is MISSING else f"{f.name}={f.default!r}"
            for f in dataclasses.fields(cls)
        )

    def apply(self, inv_freq: Any, seq_len: int | None = None) -> S.Scaled:
        """Scaled frequencies for default ``inv_freq`` (P,) at the current length ``seq_len``."""
        kwargs = self._values() | ({"seq_len": seq_len} if self.dynamic else {})
        return S.METHODS[self.method](inv_freq, **kwargs)

    def _values(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def to_dict(self) -> dict[str, Any]:
        """The Hugging Face ``rope_parameters`` form: ``{"rope_type": method, **fields}``."""
        values = {k: list(v) if isinstance(v, tuple) else v for k, v in self._values().items()}
        return {"rope_type": self.method, **{k: v for k, v in values.items() if v is not None}}


@dataclass(frozen=True, kw_only=True)
class LinearScaling(ScalingConfig):
    """Position interpolation: every frequency divided by ``factor``."""

    method: ClassVar[str] = "linear"
    paper: ClassVar[str] = "Chen et al. 2023 (position interpolation), arXiv:2306.15595"
    factor: float

    def __post_init__(self) -> None:
        S.check_factor(self.factor)


@dataclass(frozen=True, kw_only=True)
class NTKScaling(ScalingConfig):
    """NTK-aware: base multiplied by ``factor`` ** (d / (d - 2))."""

    method: ClassVar[str] = "ntk"
    paper: ClassVar[str] = "bloc97 2023 (NTK-aware scaled RoPE)"
    factor: float

    def __post_init__(self) -> None:
        S.check_factor(self.factor)


@dataclass(frozen=True, kw_only=True)
class DynamicNTKScaling(ScalingConfig):
    """Dynamic NTK: the NTK factor follows the current length past the original one."""

    method: ClassVar[str] = "dynamic"
    paper: ClassVar[str] = "emozilla 2023 (dynamic NTK); Peng et al., arXiv:2309.00071 sec. 3.3"
    dynamic: ClassVar[bool] = True
    factor: float
    original_max_position_embeddings: int

    def __post_init__(self) -> None:
        S.check_factor(self.factor)
        S.check_length(self.original_max_position_embeddings)


@dataclass(frozen=True, kw_only=True)
class YaRNScaling(ScalingConfig):
    """YaRN: NTK-by-parts ramp between ``beta_fast`` and ``beta_slow`` turns, plus temperature."""

    method: ClassVar[str] = "yarn"
    paper: ClassVar[str] = "Peng et al. 2023 (YaRN), arXiv:2309.00071"
    factor: float
    original_max_position_embeddings: int
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: float | None = None
    mscale_all_dim: float | None = None
    attention_factor: float | None = None
    truncate: bool = True

    def __post_init__(self) -> None:
        S.check_factor(self.factor)
        S.check_length(self.original_max_position_embeddings)
        S.check_betas(self.beta_fast, self.beta_slow)
        for key in ("mscale", "mscale_all_dim"):  # 0 (DeepSeek's default) counts as unset
            S.check_optional(getattr(self, key), key, inclusive=True)
        S.check_optional(self.attention_factor, "attention_factor")
        if not isinstance(self.truncate, bool):
            raise TypeError(f"scaling key 'truncate' must be a bool, got {self.truncate!r}")


@dataclass(frozen=True, kw_only=True)
class LongRoPEScaling(ScalingConfig):
    """LongRoPE: per-pair factors, short or long by the current length."""

    method: ClassVar[str] = "longrope"
    paper: ClassVar[str] = "Ding et al. 2024 (LongRoPE), arXiv:2402.13753"
    dynamic: ClassVar[bool] = True
    short_factor: tuple[float, ...]
    long_factor: tuple[float, ...]
    original_max_position_embeddings: int
    factor: float
    attention_factor: float | None = None
    short_mscale: float | None = None
    long_mscale: float | None = None

    def __post_init__(self) -> None:
        for key in ("short_factor", "long_factor"):
            object.__setattr__(self, key, S.check_factor_list(getattr(self, key), key))
        if len(self.short_factor) != len(self.long_factor):
            raise ValueError(
                f"scaling keys 'short_factor' and 'long_factor' must have the same length, got "
                f"{len(self.short_factor)} and {len(self.long_factor)}"
            )
        S.check_length(self.original_max_position_embeddings)
        S.check_factor(self.factor)
        for key in ("attention_factor", "short_mscale", "long_mscale"):
            S.check_optional(getattr(self, key), key)
        if (self.short_mscale is None) != (self.long_mscale is None):
            raise ValueError(
                "scaling keys 'short_mscale' and 'long_mscale' must be given together (one per "
                f"regime), got short_mscale={self.short_mscale}, long_mscale={self.long_mscale}"
            )


@dataclass(frozen=True, kw_only=True)
class Llama3Scaling(ScalingConfig):
    """Llama 3.1: keep short wavelengths, divide long ones by ``factor``, ramp in between."""

    method: ClassVar[str] = "llama3"
    paper: ClassVar[str] = "Meta 2024 (The Llama 3 Herd of Models), arXiv:2407.21783"
    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_position_embeddings: int

    def __post_init__(self) -> None:
        S.check_factor(self.factor)
        S.check_bands(self.low_freq_factor, self.high_freq_factor)
        S.check_length(self.original_max_position_embeddings)


#: Method name -> config class (the names of ``posenc list --scaling``).
SCALINGS: dict[str, type[ScalingConfig]] = {
    cls.method: cls
    for cls in (
        LinearScaling,
        NTKScaling,
        DynamicNTKScaling,
        YaRNScaling,
        LongRoPEScaling,
        Llama3Scaling,
    )
}


def _fields(cls: type[ScalingConfig]) -> tuple[list[str], list[str]]:
    """(required, optional) keys of a config class."""
    fields = dataclasses.fields(cls)
    required = [f.name for f in fields if f.default is MISSING and f.default_factory is MISSING]
    return required, [f.name for f in fields if f.name not in required]


def scaling_config(spec: ScalingConfig | Mapping[str, Any]) -> ScalingConfig:
    """A ScalingConfig from a transformers-style ``rope_scaling`` dict.

    A config from a dict like ``{"rope_type": "llama3", "factor": 8.0, ...}`` (``type`` also
    accepted, as in older ``rope_scaling`` dicts); a ScalingConfig is returned as is.

    Raises: ValueError for a missing/unknown method, an unknown key, a missing required key or
    an invalid value (each naming the key); TypeError for a spec that is not a dict.
    """
    if isinstance(spec, ScalingConfig):
        return spec
    if not isinstance(spec, Mapping):
        raise TypeError(f"scaling must be a dict or a ScalingConfig, got {type(spec).__name__}")
    params = dict(spec)
    method = params.pop("rope_type", None) or params.pop("type", None)
    params.pop("type", None)
    if method not in SCALINGS:
        raise ValueError(f"scaling 'rope_type' must be one of {sorted(SCALINGS)}, got {method!r}")
    cls = SCALINGS[method]
    required, optional = _fields(cls)
    unknown = sorted(set(params) - set(required) - set(optional))
    if unknown:
        raise ValueError(
            f"unknown key(s) {unknown} for {method!r} scaling; valid keys: {required + optional}"
        )
    missing = [k for k in required if params.get(k) is None]
    if missing:
        raise ValueError(f"{method!r} scaling needs key(s) {missing} (required: {required})")
    return cls(**{k: v for k, v in params.items() if v is not None})
