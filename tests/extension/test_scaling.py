"""Scaling methods: float64 references from the papers, properties, and input validation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import posenc
from posenc import extension as X
from posenc import functional as PF
from tests.reference import extension as ref

BASE, DIM = 10000.0, 64


def _default(dim: int = DIM, base: float = BASE) -> torch.Tensor:
    return PF.rope_inv_freq(dim, base=base, xp=PF.torch_xp)  # (P,) float64


def _close(got: X.Scaled, want: tuple[list[float], float]) -> None:
    torch.testing.assert_close(
        got.inv_freq, torch.tensor(want[0], dtype=torch.float64), rtol=1e-13, atol=0.0
    )
    assert math.isclose(got.attention_scaling, want[1], rel_tol=1e-14)


@pytest.mark.parametrize("factor", [1.0, 2.0, 8.0])
def test_linear_and_ntk_match_reference(factor: float) -> None:
    _close(X.linear(_default(), factor=factor), ref.linear(BASE, DIM, factor))
    _close(X.ntk(_default(), factor=factor), ref.ntk(BASE, DIM, factor))


@pytest.mark.parametrize("seq_len", [None, 100, 4096, 4097, 10_000, 100_000])
def test_dynamic_matches_reference(seq_len: int | None) -> None:
    got = X.dynamic(_default(), factor=4.0, original_max_position_embeddings=4096, seq_len=seq_len)
    _close(got, ref.dynamic(BASE, DIM, 4.0, 4096, 4096 if seq_len is None else seq_len))


YARN_CASES = [
    {"factor": 4.0, "original": 4096},
    {"factor": 40.0, "original": 4096, "mscale": 1.0, "mscale_all_dim": 1.0},
    {"factor": 40.0, "original": 4096, "mscale": 0.707, "mscale_all_dim": 1.0},
    {"factor": 32.0, "original": 4096, "truncate": False, "beta_fast": 32, "beta_slow": 1},
    {"factor": 16.0, "original": 2048, "beta_fast": 64, "beta_slow": 2, "mscale": 1.0},
]


@pytest.mark.parametrize("case", YARN_CASES)
@pytest.mark.parametrize(("dim", "base"), [(64, 10000.0), (128, 500000.0), (32, 150000.0)])
def test_yarn_matches_reference(case: dict, dim: int, base: float) -> None:
    kw = dict(case)
    factor, original = kw.pop("factor"), kw.pop("original")
    got = X.yarn(
        _default(dim, base), factor=factor, original_max_position_embeddings=original, **kw
    )
    _close(got, ref.yarn(base, dim, factor, original, **kw))


@pytest.mark.parametrize("seq_len", [None, 4096, 4097, 131_072])
def test_longrope_matches_reference(seq_len: int | None) -> None:
    rng = np.random.default_rng(0)
    short, long = (1 + rng.random(DIM // 2)).tolist(), (1 + 30 * rng.random(DIM // 2)).tolist()
    got = X.longrope(
        _default(),
        short_factor=short,
        long_factor=long,
        factor=32.0,
        original_max_position_embeddings=4096,
        seq_len=seq_len,
    )
    _close(got, ref.longrope(BASE, DIM, short, long, 4096, 32.0, seq_len or 0))


@pytest.mark.parametrize(("dim", "base"), [(128, 500000.0), (64, 10000.0)])
def test_llama3_matches_reference(dim: int, base: float) -> None:
    got = X.llama3(
        _default(dim, base),
        factor=8.0,
        low_freq_factor=1.0,
        high_freq_factor=4.0,
        original_max_position_embeddings=8192,
    )
    _close(got, ref.llama3(base, dim, 8.0, 1.0, 4.0, 8192))


def test_methods_run_on_numpy_arrays() -> None:
    inv = PF.rope_inv_freq(DIM)  # NumPy float64
    got = X.llama3(
        inv,
        factor=8.0,
        low_freq_factor=1.0,
        high_freq_factor=4.0,
        original_max_position_embeddings=8192,
    )
    want = ref.llama3(BASE, DIM, 8.0, 1.0, 4.0, 8192)[0]
    np.testing.assert_allclose(np.asarray(got.inv_freq), want, rtol=1e-13)


# Properties, from the papers.


def test_linear_is_default_divided_by_factor_and_equals_squeezed_positions() -> None:
    rope = posenc.build("rope", head_dim=DIM, scaling={"rope_type": "linear", "factor": 4.0})
    torch.testing.assert_close(rope.inv_freq64, _default() / 4.0)
    q = torch.randn(1, 1, 4, DIM, dtype=torch.float64)
    pos = torch.tensor([0, 4, 400, 40_000])
    plain = posenc.build("rope", head_dim=DIM)
    squeezed = plain.rotate(q, q, pos // 4, pos // 4)[0]  # positions m/4, exact here
    torch.testing.assert_close(rope.rotate(q, q, pos, pos)[0], squeezed)


def test_yarn_keeps_high_frequencies_and_divides_low_ones() -> None:
    default = _default(128, 10000.0)
    got = X.yarn(default, factor=16.0, original_max_position_embeddings=4096).inv_freq
    turns = 4096 * default / (2 * math.pi)  # rotations of each pair over the original context
    fast, slow = turns > 32 * 1.2, turns < 1 / 1.2  # clear of the truncated ramp ends
    torch.testing.assert_close(got[fast], default[fast], rtol=0, atol=0)
    torch.testing.assert_close(got[slow], default[slow] / 16.0)
    assert fast.any() and slow.any()
    assert bool(((got <= default) & (got >= default / 16.0)).all())
    assert bool((got[1:] < got[:-1]).all())  # still strictly decreasing


def test_llama3_ramps_between_bands() -> None:
    default = _default(128, 500000.0)
    got = X.llama3(
        default,
        factor=8.0,
        low_freq_factor=1.0,
        high_freq_factor=4.0,
        original_max_position_embeddings=8192,
    ).inv_freq
    wavelength = 2 * math.pi / default
    high, low = wavelength < 8192 / 4, wavelength > 8192
    torch.testing.assert_close(got[high], default[high], rtol=0, atol=0)
    torch.testing.assert_close(got[low], default[low] / 8.0)
    ratio = (default / got)[~high & ~low]  # between 1 and 8, increasing with wavelength
    assert ratio.numel() > 0 and bool(((ratio > 1) & (ratio < 8)).all())
    assert bool((ratio[1:] > ratio[:-1]).all())


def test_ntk_changes_only_the_base() -> None:
    factor, d = 8.0, DIM
    got = X.ntk(_default(), factor=factor).inv_freq
    torch.testing.assert_close(got, _default(d, BASE * factor ** (d / (d - 2))), rtol=1e-14, atol=0)
    assert got[0] == 1.0 and math.isclose(float(_default()[-1] / got[-1]), factor)


def test_dynamic_is_default_inside_and_ntk_outside_the_original_context() -> None:
    inside = X.dynamic(_default(), factor=2.0, original_max_position_embeddings=1024, seq_len=1024)
    torch.testing.assert_close(inside.inv_freq, _default(), rtol=0, atol=0)
    at_2l = X.dynamic(_default(), factor=2.0, original_max_position_embeddings=1024, seq_len=2048)
    torch.testing.assert_close(at_2l.inv_freq, X.ntk(_default(), factor=3.0).inv_freq)


# Validation: each invalid configuration raises a ValueError naming the key.


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ({"rope_type": "linear", "factor": 0.5}, "'factor' must be a finite number >= 1"),
        (
            {"rope_type": "yarn", "factor": 0.9, "original_max_position_embeddings": 4096},
            "'factor'",
        ),
        (
            {"rope_type": "yarn", "factor": 4.0},
            r"needs key\(s\) \['original_max_position_embeddings'\]",
        ),
        (
            {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0},
            "original_max_position_embeddings",
        ),
        ({"rope_type": "dynamic", "factor": 2.0}, "original_max_position_embeddings"),
        (
            {
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 4.0,
                "high_freq_factor": 1.0,
                "original_max_position_embeddings": 8192,
            },
            "'low_freq_factor' must be <= 'high_freq_factor'",
        ),
        (
            {
                "rope_type": "yarn",
                "factor": 4.0,
                "original_max_position_embeddings": 4096,
                "beta_fast": 1,
                "beta_slow": 32,
            },
            "'beta_fast' must be > 'beta_slow'",
        ),
        (
            {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 0},
            "positive integer",
        ),
        (
            {
                "rope_type": "longrope",
                "short_factor": [1.0] * 3,
                "long_factor": [1.0] * 2,
                "original_max_position_embeddings": 4096,
                "factor": 2.0,
            },
            "same length",
        ),
        (
            {
                "rope_type": "longrope",
                "short_factor": [1.0] * 32,
                "long_factor": [2.0] * 32,
                "original_max_position_embeddings": 4096,
                "factor": 2.0,
                "short_mscale": 1.2,
            },
            "'short_mscale' and 'long_mscale' must be given together",
        ),
        (
            {"rope_type": "linear", "factor": 2.0, "beta_fast": 3},
            r"unknown key\(s\) \['beta_fast'\]",
        ),
        ({"rope_type": "xyz", "factor": 2.0}, "'rope_type' must be one of"),
        ({"factor": 2.0}, "'rope_type' must be one of"),
    ],
)
def test_invalid_scaling_raises_naming_the_key(spec: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        posenc.build("rope", head_dim=DIM, scaling=spec)


def test_factor_list_of_wrong_length_raises() -> None:
    spec = {
        "rope_type": "longrope",
        "short_factor": [1.0] * 16,
        "long_factor": [2.0] * 16,
        "original_max_position_embeddings": 4096,
        "factor": 2.0,
    }
    with pytest.raises(
        ValueError, match=r"short_factor must have one entry per rotated pair .* = 32\), got 16"
    ):
        posenc.build("rope", head_dim=DIM, scaling=spec)


def test_type_errors_and_kv_policy() -> None:
    with pytest.raises(TypeError, match="'factor' must be a number, got str"):
        X.LinearScaling(factor="2")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="scaling must be a dict or a ScalingConfig, got int"):
        posenc.build("rope", head_dim=DIM, scaling=4)
    with pytest.raises(ValueError, match="kv_policy must be one of"):
        posenc.build("rope", head_dim=DIM, kv_policy="fresh")
    with pytest.raises(ValueError, match="ntk scaling needs a rotated width d >= 4"):
        posenc.build("rope", head_dim=2, scaling={"rope_type": "ntk", "factor": 2.0})


def test_config_roundtrip_and_registry() -> None:
    assert sorted(X.SCALINGS) == ["dynamic", "linear", "llama3", "longrope", "ntk", "yarn"]
    assert set(X.METHODS) == set(X.SCALINGS)
    spec = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096, "mscale": None}
    cfg = X.scaling_config(spec)
    assert cfg == X.YaRNScaling(factor=4.0, original_max_position_embeddings=4096)
    assert X.scaling_config(cfg.to_dict()) == cfg
    assert cfg.to_dict()["rope_type"] == "yarn" and "mscale" not in cfg.to_dict()
