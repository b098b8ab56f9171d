"""The models of the extension lab and the scaling each method puts on a trained RoPE model.

Every method is posenc's own (``posenc.extension``): ``scaling(method, factor, cfg)`` returns
the ``rope_scaling`` dict that ``RoPE(scaling=...)`` takes, and ``rescaled`` rebuilds a trained
model with it (RoPE has no weights, its frequencies are non-persistent buffers, so the weights
load unchanged). For a target length s·L:

- ``none``: no scaling (extrapolation past L);
- ``linear`` (PI, Chen et al. 2023), ``ntk`` (bloc97 2023), ``yarn`` (Peng et al. 2023,
  beta_fast 32, beta_slow 1, default temperature), ``llama3`` (low 1, high 4): factor s;
- ``dynamic``: dynamic NTK with factor 1, i.e. NTK by s' = max(T, L)/L at the current
  length T (Peng et al. 2023 sec. 3.3): one model for every length, unchanged up to L;
- ``longrope`` (Ding et al. 2024): per-pair factors λ found by ``longrope_search``, used past
  L (short factors 1), default attention factor.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ...extension import scaling_config
from ...functional import rope_inv_freq
from ...models import TinyTransformer
from ...registry import build_for_model
from ..config import EXTEND_METHODS, ExtendConfig
from .corpus import vocab

Spec = dict[str, Any]


def scaling(
    method: str,
    factor: float,
    cfg: ExtendConfig,
    long_factor: Sequence[float] | np.ndarray | None = None,
) -> Spec | None:
    """The ``rope_scaling`` dict of ``method`` for a target length ``factor``·L (None: none).

    Raises: ValueError for an unknown method, or ``longrope`` without its ``long_factor``.
    """
    L = cfg.context
    if method not in EXTEND_METHODS:
        raise ValueError(f"method must be one of {list(EXTEND_METHODS)}, got {method!r}")
    if method == "none":
        return None
    if method in ("linear", "ntk"):
        return {"rope_type": method, "factor": float(factor)}
    if method == "dynamic":
        return {"rope_type": "dynamic", "factor": 1.0, "original_max_position_embeddings": L}
    if method == "yarn":
        return {"rope_type": "yarn", "factor": float(factor), "original_max_position_embeddings": L}
    if method == "llama3":
        return {
            "rope_type": "llama3",
            "factor": float(factor),
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": L,
        }
    if long_factor is None:
        raise ValueError("longrope needs its searched long_factor (longrope_search)")
    return {
        "rope_type": "longrope",
        "factor": float(factor),
        "original_max_position_embeddings": L,
        "short_factor": [1.0] * (cfg.head_dim // 2),
        "long_factor": [float(x) for x in long_factor],
    }


def build_model(cfg: ExtendConfig, encoding: str, spec: Spec | None = None) -> TinyTransformer:
    """A fresh decoder with ``encoding`` (RoPE with scaling ``spec``) over the lab vocabulary.

    FIRE's learned threshold starts at the training context (its paper's L), not at 512.
    """
    pe_config: dict[str, Any] = {}
    if encoding == "rope" and spec is not None:
        pe_config["scaling"] = spec
    if encoding == "fire":
        pe_config["init_threshold"] = float(cfg.context)
    pe = build_for_model(
        encoding, dim=cfg.d_model, n_heads=cfg.n_heads, max_len=cfg.max_len, **pe_config
    )
    return TinyTransformer(
        vocab_size=vocab().size,
        pe=pe,
        d_model=cfg.d_model,
        n_layers=cfg.n_layers,
        n_heads=cfg.n_heads,
        max_len=cfg.max_len,
    )


def rescaled(model: TinyTransformer, cfg: ExtendConfig, spec: Spec | None) -> TinyTransformer:
    """A copy of the RoPE ``model`` whose encoding applies ``spec`` (same weights)."""
    out = build_model(cfg, "rope", spec)
    out.load_state_dict(model.state_dict())
    return out.train(model.training)


def candidate_factors(cfg: ExtendConfig, factor: float) -> dict[str, np.ndarray]:
    """LongRoPE's initial population (Ding et al. 2024 sec. 3.2): the per-pair factors
    λ_i = θ_i / θ'_i of PI, NTK and YaRN at ``factor``, from posenc's own functions. (P,)."""
    theta = np.asarray(rope_inv_freq(cfg.head_dim), dtype=np.float64)  # (P,)
    out = {}
    for method in ("linear", "ntk", "yarn"):
        spec = scaling(method, factor, cfg)
        assert spec is not None
        out[method] = theta / np.asarray(scaling_config(spec).apply(theta).inv_freq)
    return out


def longrope_search(
    fitness: Callable[[np.ndarray], float],
    cfg: ExtendConfig,
    factor: float,
    rng: np.random.Generator,
) -> tuple[np.ndarray, list[tuple[str, float]]]:
    """Per-pair factors λ (P,) of lowest ``fitness`` (a loss at factor·L on training text).

    The search of Ding et al. 2024 (sec. 3.2), scaled down: the population starts from PI, NTK
    and YaRN (``candidate_factors``); each of ``cfg.search_generations`` generations mutates
    the best ``search_children`` into as many children, λ·exp(ε), ε ~ N(0, (0.1·ln s)²), kept
    within LongRoPE's constraints (λ_i >= 1, non-decreasing in i: lower frequencies are
    interpolated at least as much). Returns λ and the (name, fitness) of every candidate.
    """
    population = [(name, lam) for name, lam in candidate_factors(cfg, factor).items()]
    scored = [(fitness(lam), name, lam) for name, lam in population]
    sigma = 0.1 * np.log(factor)
    for g in range(cfg.search_generations):
        parents = sorted(scored, key=lambda t: t[0])[: cfg.search_children]
        for c in range(cfg.search_children):
            _, name, lam = parents[c % len(parents)]
            child = lam * np.exp(rng.normal(0.0, sigma, size=lam.shape))
            child = np.maximum.accumulate(np.maximum(child, 1.0))  # λ >= 1, non-decreasing
            scored.append((fitness(child), f"{name}+g{g}c{c}", child))
    best = min(scored, key=lambda t: t[0])
    return best[2], [(name, float(f)) for f, name, _ in scored]
