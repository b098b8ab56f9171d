"""The RoPE decay bound and the context-extension checks: where they apply, that they pass on
published configurations, and that each catches the bug it is for (and only that one)."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

import posenc
from posenc.analysis import CHECKS, all_checks, applicable, subject
from posenc.analysis.rotary_checks import decay_bound
from posenc.analysis.subjects import EXAMPLE_SCALINGS

from .broken import EagerDynamicNTK, JumpingDynamicNTK, RoundingPI

all_checks()  # fill CHECKS

YARN_CONFIGS = [  # (head_dim, base, rope_scaling) as published or as in HF tests
    (128, 10000.0, {"factor": 32.0, "original_max_position_embeddings": 4096}),
    (128, 10000.0, {"factor": 32.0, "original_max_position_embeddings": 4096, "truncate": False}),
    (
        128,
        10000.0,
        {"factor": 16.0, "original_max_position_embeddings": 2048, "beta_fast": 64, "beta_slow": 2},
    ),
    (
        64,
        1e6,
        {
            "factor": 40.0,
            "original_max_position_embeddings": 4096,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
        },
    ),
]


def _rope(head_dim: int = 8, **config: Any) -> Any:
    return posenc.build("rope", head_dim=head_dim, **config).eval()


# --- rope_long_term_decay -------------------------------------------------------------------


def test_decay_bound_matches_its_closed_form_for_two_pairs() -> None:
    # P = 2: |S_1| = 1, |S_2| = |e^{irθ_0} + e^{irθ_1}| = 2|cos(r(θ_0 - θ_1)/2)|
    inv_freq = torch.tensor([1.0, 0.01], dtype=torch.float64)
    r = torch.arange(500, dtype=torch.float64)
    expected = (1 + 2 * (r * (1.0 - 0.01) / 2).cos().abs()) / 2
    torch.testing.assert_close(decay_bound(inv_freq, 500), expected, rtol=0, atol=1e-12)
    assert float(decay_bound(torch.rand(7, dtype=torch.float64), 1)[0]) == pytest.approx(4.0)


@pytest.mark.parametrize(
    "config",
    [
        {"head_dim": 16},
        {"head_dim": 64},
        {"head_dim": 128},
        {"head_dim": 64, "partial": 0.25},
        {"head_dim": 10},
        {"head_dim": 32, "layout": "interleaved"},
    ],
)
def test_decay_holds_for_the_standard_base_at_other_head_dims(config: dict[str, Any]) -> None:
    result = CHECKS["rope_long_term_decay"](_rope(**config))
    assert result.passed, result.detail


def test_decay_is_not_claimed_where_the_paper_does_not_promise_it() -> None:
    for name in [f"rope:{m}" for m in EXAMPLE_SCALINGS] + ["pope", "randomized", "sinusoidal"]:
        assert "rope_long_term_decay" not in {c.name for c in applicable(name)}, name
    # NTK at head_dim 8 is RoPE with base 63496: its window means do rise (0.54 -> 0.62)
    assert not CHECKS["rope_long_term_decay"].applies(_rope(base=4.0 ** (8 / 6) * 1e4))
    assert not CHECKS["rope_long_term_decay"].applies(_rope(head_dim=6))  # < 4 pairs


def test_decay_fails_when_the_exponent_sign_is_flipped() -> None:
    pe = _rope()
    pe.inv_freq64 = 1 / pe.default_inv_freq64  # θ_i = base^(+2i/d): aliased, no decay
    result = CHECKS["rope_long_term_decay"](pe)
    assert not result.passed and result.error > 0.05, result.detail


# --- pi_equals_scaled_positions -------------------------------------------------------------


@pytest.mark.parametrize("factor", [2.0, 2.5, 3.0, 8.0, math.pi])
def test_pi_is_rope_at_scaled_positions(factor: float) -> None:
    pe = _rope(64, layout="interleaved", scaling={"rope_type": "linear", "factor": factor})
    result = CHECKS["pi_equals_scaled_positions"](pe)
    assert result.passed and result.error < 1e-11, result.detail
    assert ("m = " in result.detail) == (factor != math.pi)  # no small ratio for π


def test_pi_with_whole_positions_passes_the_multiples_and_fails_the_rest() -> None:
    pe = RoundingPI(head_dim=8, scaling={"rope_type": "linear", "factor": 4.0}).eval()
    result = CHECKS["pi_equals_scaled_positions"](pe)
    assert not result.passed
    assert "m = 4j vs rotate at 1j: 0.0e+00" in result.detail  # exact at multiples of s


def test_pi_fails_when_the_frequencies_are_not_divided() -> None:
    pe = subject("rope:linear")
    pe.inv_freq64 = pe.default_inv_freq64.clone()
    assert not CHECKS["pi_equals_scaled_positions"](pe).passed


# --- dynamic NTK ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("head_dim", "factor", "length"), [(128, 8.0, 4096), (64, 2.0, 2048), (8, 1.0, 64)]
)
def test_dynamic_ntk_checks_pass_on_published_sizes(
    head_dim: int, factor: float, length: int
) -> None:
    scaling = {"rope_type": "dynamic", "factor": factor, "original_max_position_embeddings": length}
    pe = _rope(head_dim, scaling=scaling)
    for name in ("dynamic_ntk_plain_within_original", "dynamic_ntk_continuous"):
        result = CHECKS[name](pe)
        assert result.passed, (name, result.detail)
    assert CHECKS["dynamic_ntk_plain_within_original"](pe).error == 0.0  # bit for bit


def test_dynamic_ntk_continuity_error_is_the_closed_form_ratio() -> None:
    # slowest pair: θ·s'^-1 with s'(L+1) = 1 + s/L, s'(2L) = 1 + s: ratio (1 + s)/(L + s)
    result = CHECKS["dynamic_ntk_continuous"](subject("rope:dynamic"))
    assert result.error == pytest.approx((1 + 4) / (64 + 4), rel=1e-12)


@pytest.mark.parametrize(
    ("cls", "fails", "passes"),
    [
        (EagerDynamicNTK, "dynamic_ntk_plain_within_original", "dynamic_ntk_continuous"),
        (JumpingDynamicNTK, "dynamic_ntk_continuous", "dynamic_ntk_plain_within_original"),
    ],
)
def test_each_dynamic_ntk_bug_fails_its_own_check_only(cls: type, fails: str, passes: str) -> None:
    pe = cls(head_dim=8, scaling={"rope_type": "dynamic", **EXAMPLE_SCALINGS["dynamic"]}).eval()
    assert not CHECKS[fails](pe).passed
    assert CHECKS[passes](pe).passed


# --- yarn_ramp_endpoints --------------------------------------------------------------------


@pytest.mark.parametrize(("head_dim", "base", "scaling"), YARN_CONFIGS)
def test_yarn_ramp_holds_on_published_configs_with_every_region_populated(
    head_dim: int, base: float, scaling: dict[str, Any]
) -> None:
    pe = _rope(head_dim, base=base, scaling={"rope_type": "yarn", **scaling})
    result = CHECKS["yarn_ramp_endpoints"](pe)
    assert result.passed, result.detail
    turns = scaling["original_max_position_embeddings"] * pe.default_inv_freq64 / (2 * math.pi)
    fast, slow = scaling.get("beta_fast", 32.0), scaling.get("beta_slow", 1.0)
    kept, interpolated = int((turns > fast).sum()), int((turns < slow).sum())
    assert kept > 0 and interpolated > 0 and kept + interpolated < head_dim // 2
    assert f"{kept} pairs kept" in result.detail and f"{interpolated} at θ/s" in result.detail


def test_yarn_ramp_fails_when_fast_pairs_are_interpolated_too() -> None:
    pe = _rope(128, scaling={"rope_type": "yarn", **YARN_CONFIGS[0][2]})
    pe.inv_freq64 = pe.default_inv_freq64 / 32.0  # plain PI under YaRN's name
    result = CHECKS["yarn_ramp_endpoints"](pe)
    assert not result.passed and result.error == pytest.approx(31 / 32), result.detail
