"""What one extension-lab run trains and measures, and the two built-in presets.

``ExtendConfig`` is frozen and checked on creation (ValueError/TypeError naming the field);
``PRESETS["extend"]`` is ``posenc lab --preset extend``, ``PRESETS["quick"]`` its CI smoke
test (``posenc lab extend --quick``). Lengths are token counts: ``context`` L is the training
context, every evaluation length is ``factor·L``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from .._validate import check_positive_float, check_positive_int, check_seed
from ..lab.config import check_sweep_name

#: RoPE's context-extension methods, in display order ("none": unchanged, extrapolation).
METHODS = ("none", "linear", "ntk", "dynamic", "yarn", "llama3", "longrope")
#: Encodings trained the same way, evaluated without any change.
BASELINES = ("alibi", "nope", "fire")


@dataclass(frozen=True, kw_only=True)
class ExtendConfig:
    """One extension-lab run (defaults: the ``extend`` preset).

    Model: ``d_model``, ``n_layers``, ``n_heads`` (TinyTransformer, RoPE base 10 000).
    Pre-training: ``steps`` AdamW steps of ``batch`` rows at context ``context``, a
    ``passkey_fraction`` of the rows passkey prompts (keys of ``passkey_digits`` tokens);
    FIRE's own parameters (its MLP, c and threshold) at ``fire_lr_scale`` times ``lr``.
    Fine-tune: ``round(ft_fraction·steps)`` steps at each longer length at ``ft_lr``, with the
    tokens per step of pre-training (``batch // factor`` rows, at least 2).
    Measures: loss over ``eval_tokens`` held-out tokens per length in buckets of
    ``bucket`` positions; passkey at ``depths`` with ``trials`` keys per cell; a stream of
    ``max(factors)·context`` tokens (``stream_rows`` texts) through a cache of ``window`` keys
    with ``sinks`` sink tokens or none. LongRoPE's factors: a search of ``search_generations``
    generations of ``search_children``, each candidate scored on ``search_windows`` windows of
    training text (Ding et al. 2024, scaled down).
    """

    name: str = "extend"
    context: int = 64
    factors: tuple[int, ...] = (2, 4, 8)
    seeds: tuple[int, ...] = (0, 1, 2)
    methods: tuple[str, ...] = METHODS
    baselines: tuple[str, ...] = BASELINES
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    steps: int = 2000
    batch: int = 16
    lr: float = 3e-3
    fire_lr_scale: float = 0.3
    warmup: int = 50
    passkey_fraction: float = 0.5
    passkey_digits: int = 2
    ft_fraction: float = 0.04
    ft_lr: float = 1e-3
    eval_tokens: int = 8192
    bucket: int = 16
    depths: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)
    trials: int = 4
    window: int = 32
    sinks: int = 4
    stream_rows: int = 4
    search_generations: int = 4
    search_children: int = 8
    search_windows: int = 8
    gate: float = 0.9

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, list):  # from JSON: tuples
                object.__setattr__(self, f.name, tuple(value))
            elif isinstance(f.default, tuple) and not isinstance(value, tuple):
                raise TypeError(
                    f"extend config {f.name!r} must be a list, got {type(value).__name__} "
                    f"{value!r} (e.g. --set {f.name}={json.dumps(list(f.default)[:2])})"
                )
        if not isinstance(self.name, str):
            raise TypeError(f"extend config 'name' must be a string, got {self.name!r}")
        check_sweep_name(self.name)
        for seed in self.seeds:
            check_seed(seed, "extend config 'seeds' item")
        ints = ["context", "d_model", "n_layers", "n_heads", "steps", "batch", "warmup"]
        ints += ["passkey_digits", "eval_tokens", "bucket", "trials", "window", "stream_rows"]
        ints += ["search_generations", "search_children", "search_windows"]
        for key in ints:
            check_positive_int(getattr(self, key), f"extend config {key!r}")
        check_positive_int(self.sinks, "extend config 'sinks'", minimum=0)
        for key in ("lr", "ft_lr", "ft_fraction", "fire_lr_scale"):
            check_positive_float(getattr(self, key), f"extend config {key!r}")
        for key in ("passkey_fraction", "gate"):
            check_positive_float(getattr(self, key), f"extend config {key!r}", upper=1.0)
        if not self.factors or any(
            isinstance(f, bool) or not isinstance(f, int) or f < 2 for f in self.factors
        ):
            raise ValueError(f"factors must be ints >= 2, got {list(self.factors)}")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds must be distinct, at least one, got {list(self.seeds)}")
        _subset(self.methods, METHODS, "methods")
        _subset(self.baselines, BASELINES, "baselines")
        if "none" not in self.methods:
            raise ValueError(
                "methods must include 'none' (the unchanged model every row compares to)"
            )
        if self.d_model % self.n_heads or (self.d_model // self.n_heads) % 4:
            raise ValueError(
                "d_model / n_heads (the rotated head width) must be a multiple of 4 (NTK and YaRN "
                f"need >= 2 frequency pairs), got d_model={self.d_model}, n_heads={self.n_heads}"
            )
        if any(not 0.0 <= d <= 1.0 for d in self.depths) or not self.depths:
            raise ValueError(f"depths must lie in [0, 1], got {list(self.depths)}")
        if self.context < 4 * (self.passkey_digits + 3):
            raise ValueError(
                f"context {self.context} is too short for passkey prompts of "
                f"{self.passkey_digits} digits (needs >= {4 * (self.passkey_digits + 3)})"
            )
        if self.sinks + self.window > self.context:
            raise ValueError(
                f"sinks + window ({self.sinks} + {self.window}) must fit the training context "
                f"{self.context} (cache positions stay inside it)"
            )

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def ft_steps(self) -> int:
        """Fine-tuning steps: a few percent of pre-training (at least one)."""
        return max(1, round(self.ft_fraction * self.steps))

    @property
    def max_len(self) -> int:
        """The longest context anything is evaluated at."""
        return max(self.factors) * self.context

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    def digest(self) -> str:
        """A hash of every setting: a result store holds the results of one configuration."""
        text = json.dumps(self.to_dict(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def _subset(values: tuple[str, ...], allowed: tuple[str, ...], key: str) -> None:
    unknown = [v for v in values if v not in allowed]
    if unknown or len(set(values)) != len(values):
        raise ValueError(f"{key} must be distinct names from {list(allowed)}, got {list(values)}")


#: ``extend``: the published comparisons at CPU scale (see README for its time); ``quick``: every
#: code path in seconds (2 seeds so intervals exist; the numbers mean nothing).
PRESETS: dict[str, ExtendConfig] = {
    "extend": ExtendConfig(),
    "quick": ExtendConfig(
        name="quick",
        context=32,
        factors=(2, 4),
        seeds=(0, 1),
        d_model=32,
        n_layers=1,
        n_heads=2,
        steps=40,
        batch=8,
        warmup=5,
        ft_fraction=0.1,
        eval_tokens=256,
        bucket=8,
        depths=(0.0, 1.0),
        trials=1,
        window=16,
        sinks=2,
        stream_rows=2,
        search_generations=1,
        search_children=2,
        search_windows=2,
    ),
}


def preset(which: str, /, **overrides: Any) -> ExtendConfig:
    """The built-in configuration ``which``, with ``overrides`` of its fields.

    Raises: ValueError for an unknown preset or field (naming the valid ones).
    """
    if which not in PRESETS:
        raise ValueError(f"unknown extension-lab preset {which!r}; choose one of {list(PRESETS)}")
    valid = {f.name for f in fields(ExtendConfig)}
    unknown = sorted(set(overrides) - valid)
    if unknown:
        raise ValueError(f"unknown extend config key(s) {unknown}; valid keys: {sorted(valid)}")
    return replace(PRESETS[which], **overrides)
