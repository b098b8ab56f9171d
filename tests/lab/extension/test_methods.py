"""Each method's wiring: a model evaluated with method X rotates by exactly posenc's scaling X
(cos/sin against ``posenc.extension`` and, for the simple methods, the paper's formula in
float64), with the trained weights unchanged, at the lengths each unit measures."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from posenc.extension import METHODS as SCALE_FUNCTIONS
from posenc.extension import scaling_config
from posenc.lab.config import EXTEND_METHODS
from posenc.lab.extension import units
from posenc.lab.extension.methods import (
    build_model,
    candidate_factors,
    longrope_search,
    rescaled,
    scaling,
)
from posenc.lab.extension.pretrain import fine_tune
from posenc.lab.extension.units import Unit

from .conftest import TINY

LAMBDA = [1.0, 1.5, 2.0, 2.0]  # a LongRoPE long_factor for P = 4 pairs


def _theta(d: int) -> np.ndarray:
    return 10000.0 ** (-np.arange(0, d, 2, dtype=np.float64) / d)  # Su et al. eq. 15


def _cos_sin(model: Any, T: int) -> tuple[np.ndarray, np.ndarray]:
    """The model's encoding's cos, sin (T, P) at positions 0..T-1 (current length T)."""
    cos, sin = model.pe.cos_sin(torch.arange(T), torch.float64)
    return cos.numpy(), sin.numpy()


@pytest.mark.parametrize("method", EXTEND_METHODS)
@pytest.mark.parametrize("factor", [2, 4])
def test_rescaled_model_rotates_by_posencs_scaling(method: str, factor: int) -> None:
    torch.manual_seed(0)
    base = build_model(TINY, "rope")
    spec = scaling(method, factor, TINY, LAMBDA)
    model = rescaled(base, TINY, spec)
    for k, v in base.state_dict().items():  # the trained weights, untouched
        assert torch.equal(v, model.state_dict()[k]), k
    L = TINY.context
    for T in (L // 2, L, factor * L):  # dynamic methods: below and past L
        theta = _theta(TINY.head_dim)
        if spec is None:
            inv, scale = theta, 1.0
        else:  # the pure function with the spec's keys, called directly
            params = {k: v for k, v in spec.items() if k != "rope_type"}
            if method in ("dynamic", "longrope"):
                params["seq_len"] = T
            inv, scale = SCALE_FUNCTIONS[method](theta, **params)
        pos = np.arange(T, dtype=np.float64)[:, None]
        cos, sin = _cos_sin(model, T)
        np.testing.assert_allclose(cos, scale * np.cos(pos * inv), rtol=0, atol=1e-12)
        np.testing.assert_allclose(sin, scale * np.sin(pos * inv), rtol=0, atol=1e-12)


@pytest.mark.parametrize("factor", [2, 8])
def test_methods_follow_their_papers_formulas(factor: int) -> None:
    """Independent float64 formulas: PI θ/s (Chen et al.); NTK base·s^(d/(d-2)) (bloc97);
    dynamic NTK s' = T/L past L and nothing below (Peng et al. sec. 3.3); YaRN's temperature
    0.1·ln s + 1 (Peng et al. eq. 22); Llama 3 keeps wavelengths below L/4 and divides those
    above L by s."""
    d, L = TINY.head_dim, TINY.context
    theta, pos = _theta(d), np.arange(factor * L, dtype=np.float64)[:, None]

    def rotation(method: str, T: int) -> tuple[np.ndarray, np.ndarray]:
        spec = scaling(method, factor, TINY, LAMBDA)
        return _cos_sin(rescaled(build_model(TINY, "rope"), TINY, spec), T)

    T = factor * L
    np.testing.assert_allclose(rotation("linear", T)[0], np.cos(pos * theta / factor), atol=1e-12)
    ntk = (10000.0 * factor ** (d / (d - 2))) ** (-np.arange(0, d, 2) / d)
    np.testing.assert_allclose(rotation("ntk", T)[0], np.cos(pos * ntk), atol=1e-12)
    dyn = (10000.0 * (T / L) ** (d / (d - 2))) ** (-np.arange(0, d, 2) / d)
    np.testing.assert_allclose(rotation("dynamic", T)[0], np.cos(pos * dyn), atol=1e-12)
    np.testing.assert_allclose(rotation("dynamic", L)[0], np.cos(pos[:L] * theta), atol=1e-12)
    yarn_cos = rotation("yarn", 1)[0][0]  # position 0: cos = the temperature
    np.testing.assert_allclose(yarn_cos, 0.1 * math.log(factor) + 1.0, atol=1e-12)
    wavelength = 2 * math.pi / theta
    llama = rotation("llama3", T)[0]
    keep, divide = wavelength < L / 4, wavelength > L
    np.testing.assert_allclose(llama[:, keep], np.cos(pos * theta[keep]), atol=1e-12)
    np.testing.assert_allclose(llama[:, divide], np.cos(pos * theta[divide] / factor), atol=1e-12)


def test_longrope_search_starts_from_pi_ntk_yarn_and_keeps_its_constraints() -> None:
    start = candidate_factors(TINY, 4)
    theta = _theta(TINY.head_dim)
    np.testing.assert_allclose(start["linear"], 4.0)
    ntk = SCALE_FUNCTIONS["ntk"](theta, factor=4.0).inv_freq
    np.testing.assert_allclose(start["ntk"], theta / ntk)
    seen: list[np.ndarray] = []

    def fitness(lam: np.ndarray) -> float:  # prefers factors near 3
        seen.append(lam)
        return float(np.sum((lam - 3.0) ** 2))

    best, scored = longrope_search(fitness, TINY, 4, np.random.default_rng(0))
    assert len(scored) == 3 + TINY.search_generations * TINY.search_children == len(seen)
    assert fitness(best) == min(s for _, s in scored)
    for lam in seen:
        assert np.all(lam >= 1.0) and np.all(np.diff(lam) >= 0)


def test_unknown_method_and_longrope_without_factors_are_refused() -> None:
    with pytest.raises(ValueError, match="method must be one of"):
        scaling("xpos", 2, TINY)
    with pytest.raises(ValueError, match="long_factor"):
        scaling("longrope", 2, TINY)


@pytest.mark.parametrize("method", EXTEND_METHODS)
def test_units_evaluate_each_length_with_that_lengths_scaling(
    method: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What ``free/METHOD`` and ``tune/METHOD/xS`` measure: for each factor s the model with
    ``scaling(METHOD, s)`` at s·L (fine-tuned: the fine-tuned weights), and below L the
    largest factor's scaling at L."""
    cfg, L = TINY, TINY.context
    torch.manual_seed(0)
    base = build_model(cfg, "rope")
    path = units.checkpoint_path(tmp_path, "rope", 0)
    path.parent.mkdir(parents=True)
    torch.save(base.state_dict(), path)
    seen: list[tuple[Any, int, bool]] = []

    def record(model: Any, cfg: Any, length: int) -> list:
        changed = any(
            not torch.equal(v, base.state_dict()[k]) for k, v in model.state_dict().items()
        )
        seen.append((model.pe.config.scaling, length, changed))
        return []

    monkeypatch.setattr(units, "loss", record)
    monkeypatch.setattr(units, "retrieval", lambda model, cfg, length: [])
    free = units.execute(Unit(f"free/{method}/s0", "free", 0, method=method), cfg, tmp_path, {})
    lam = free.info.get("long_factor", {})
    s = cfg.factors[0]
    want = [(scaling(method, s, cfg, lam.get(str(s))), s * L, False)]
    if method != "none":
        want.append((scaling(method, s, cfg, lam.get(str(s))), L, False))
    needs = {"free/longrope/s0": {"long_factor": {str(s): LAMBDA}}}
    unit = Unit(f"tune/{method}/x{s}/s0", "tune", 0, method=method, factor=s)
    units.execute(unit, cfg, tmp_path, needs)
    want.append((scaling(method, s, cfg, LAMBDA), s * L, True))
    if method == "ntk":  # its fine-tune is dynamic NTK's too, evaluated with that scaling
        want.append((scaling("dynamic", s, cfg), s * L, True))
    assert len(seen) == len(want)
    for (got, length, changed), (spec, n, tuned) in zip(seen, want, strict=True):
        assert got == (None if spec is None else scaling_config(spec))
        assert (length, changed) == (n, tuned)


def test_dynamic_ntk_shares_ntks_fine_tune_which_is_the_same_bit_for_bit() -> None:
    """``units.SHARED_TUNE``: trained at s·L, dynamic NTK (factor 1) is NTK at factor s, so the
    plan has no ``tune/dynamic`` unit (``tune/ntk`` stores dynamic's tuned rows)."""
    torch.manual_seed(0)
    base = build_model(TINY, "rope")
    for s in (2, 4):
        tuned = {}
        for method in ("ntk", "dynamic"):
            model = rescaled(base, TINY, scaling(method, s, TINY))
            losses = fine_tune(model, TINY, s, 0)
            tuned[method] = (losses, model.state_dict())
        assert tuned["ntk"][0] == tuned["dynamic"][0]
        for k, v in tuned["ntk"][1].items():
            assert torch.equal(v, tuned["dynamic"][1][k]), k
    names = [u.name for u in units.plan(TINY)]
    assert not [n for n in names if n.startswith("tune/dynamic/")]
    assert "tune/ntk/x2/s0" in names and "free/dynamic/s0" in names
    alone = units.plan(replace(TINY, methods=("none", "dynamic")))
    assert "tune/dynamic/x2/s0" in [u.name for u in alone]  # without NTK: its own fine-tune
