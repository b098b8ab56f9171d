"""Every posenc.functional formula (and RoPE scaling method) gives the same values on NumPy,
torch, JAX and array-api-strict: float64 everywhere (JAX with x64), and JAX's default float32
within float32 tolerance, with no dtype-truncation warning."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import array_api_strict as xps
import numpy as np
import pytest
import torch

from posenc import functional as PF
from posenc.extension import scaling as S
from tests.functional._data_position import inputs

jax = pytest.importorskip("jax", reason="the [jax] extra is not installed")
jnp = pytest.importorskip("jax.numpy")

rng = np.random.default_rng(0)
B, H, Tq, Tk, D, C = 2, 3, 5, 7, 8, 12
Q_POS = np.array([3, 4, 5, 6, 7])  # (Tq,)
K_POS = np.arange(Tk)  # (Tk,)
BQ_POS = np.array([[0, 1, 2, 3, 4], [2, 3, 4, 5, 6]])  # (B, Tq)
X = rng.normal(size=(B, H, Tq, D))
INV = PF.rope_inv_freq(D, base=500.0)  # (P,)
SLOPES = PF.alibi_slopes(H)
R1, R2 = rng.uniform(0.1, 2.0, size=H), rng.uniform(0.1, 1.5, size=H)
C_FIRE, L_FIRE = np.asarray(0.1), np.asarray(3.0)
# FIRE's MLP: two constant units (on, off) and two sharing a kink at 0.5
W1_FIRE = np.array([0.0, 0.0, 2.0, -4.0, 1.5, -0.7])
B1_FIRE = np.array([0.5, -0.5, -1.0, 2.0, 0.3, 0.2])
W2_FIRE, B2_FIRE = rng.normal(size=(H, 6)), rng.normal(size=H)
TABLE = rng.normal(size=(9, D))  # Shaw rows for max_distance = 4
PROBS = rng.dirichlet(np.ones(Tk), size=(B, H, Tq))  # (B, H, Tq, Tk)
ANG = PF.angles(np.arange(Tq), PF.rope_inv_freq(2 * D))  # (Tq, D) phases for PoPE
LOGITS = np.where(np.tril(np.ones((Tq, Tk)), 2) > 0, rng.normal(size=(B, H, Tq, Tk)), -np.inf)
GRID_POS = np.stack([np.arange(6) // 3, np.arange(6) % 3], -1)[None] + np.array([[[0]], [[7]]])
AX_SECTIONS = (2, 3)  # pairs per axis
AX_INV = PF.axial_inv_freq(AX_SECTIONS, base=100.0)  # (P,)
MIXED = PF.mixed_inv_freq(8, np.array([0.3, 2.0]), base=10.0)  # (H, 2, P)
YARN = {"factor": 4.0, "original_max_position_embeddings": 64}
LONG = {"short_factor": [1.0, 1.5, 2.0, 2.5], "long_factor": [2.0, 3.0, 4.0, 5.0]}
LLAMA = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}
ATT = inputs(B, 4, 2, Tk, D)  # forgetting, stick-breaking, PaTH, sink attention (GQA)


def _path_cached(a: Callable[[Any], Any]) -> tuple[Any, ...]:
    """PaTH-FoX over a growing cache: a prefill, two tokens, one token; and the carried keys."""
    outs, carried, P = [], None, 0
    for n in (Tk - 3, 2, 1):
        new, seen = slice(P, P + n), slice(0, P + n)
        out, carried = PF.path_attention_cached(
            *(a(ATT[name][:, :, new]) for name in ("q", "k")),
            a(ATT["v"][:, :, seen]),
            *(a(ATT[name][:, :, new]) for name in ("w", "beta")),
            a(ATT["log_f"][:, :, seen]),
            carried=carried,
            block_size=3,
        )
        outs.append(out)
        P += n
    return (*outs, carried)


def _shaw_index(a: Callable[[Any], Any]) -> Any:
    return PF.shaw_relative_index(a(Q_POS), a(K_POS), max_distance=4)


# name -> f(a, xp): ``a`` moves a NumPy array to the backend, ``xp`` is its namespace.
CASES: dict[str, Callable[[Callable[[Any], Any], Any], Any]] = {
    "rope_inv_freq": lambda a, xp: PF.rope_inv_freq(D, base=500.0, xp=xp),
    "inv_freq_series": lambda a, xp: PF.inv_freq_series(7, base=500.0, xp=xp),
    "p_rope_inv_freq": lambda a, xp: PF.p_rope_inv_freq(D, 0.5, base=500.0, xp=xp),
    "wavelengths_p_rope": lambda a, xp: PF.wavelengths(PF.p_rope_inv_freq(D, 0.5, xp=xp)),
    "wavelengths": lambda a, xp: PF.wavelengths(a(INV)),
    "angles": lambda a, xp: PF.angles(a(BQ_POS), a(INV)),
    "rope_cos_sin": lambda a, xp: PF.rope_cos_sin(a(Q_POS), a(INV)),
    "apply_rope_half": lambda a, xp: PF.apply_rope(a(X), *PF.rope_cos_sin(a(Q_POS), a(INV))),
    "apply_rope_interleaved": lambda a, xp: PF.apply_rope(
        a(X), *PF.rope_cos_sin(a(Q_POS), a(INV)), layout="interleaved"
    ),
    "apply_rope_partial": lambda a, xp: PF.apply_rope(
        a(X), *PF.rope_cos_sin(a(Q_POS), a(INV[:2])), layout="interleaved"
    ),
    "apply_rope_pair": lambda a, xp: PF.apply_rope_pair(
        a(X), a(X[:, :1]), *PF.rope_cos_sin(a(Q_POS), a(INV)), *PF.rope_cos_sin(a(Q_POS), a(INV))
    ),
    "sinusoidal_table_n": lambda a, xp: PF.sinusoidal_table(Tk, C, base=100.0, xp=xp),
    "sinusoidal_table_pos": lambda a, xp: PF.sinusoidal_table(a(BQ_POS), C, base=100.0),
    "sinusoidal_table_odd": lambda a, xp: PF.sinusoidal_table(a(BQ_POS), 7, base=100.0),
    "shift_matrix": lambda a, xp: PF.shift_matrix(5, C, base=100.0, xp=xp),
    "shift_matrix_odd": lambda a, xp: PF.shift_matrix(-3, 7, xp=xp),
    "relative_offsets": lambda a, xp: PF.relative_offsets(a(BQ_POS), a(K_POS)),
    "alibi_slopes": lambda a, xp: PF.alibi_slopes(6, xp=xp),
    "alibi_bias": lambda a, xp: PF.alibi_bias(a(BQ_POS), a(K_POS), a(SLOPES)),
    "alibi_bias_bidirectional": lambda a, xp: PF.alibi_bias(
        a(Q_POS), a(K_POS), a(SLOPES), bidirectional=True
    ),
    "t5_bucket_causal": lambda a, xp: PF.t5_relative_bucket(
        a(np.arange(-300, 300)), bidirectional=False, num_buckets=32, max_distance=128
    ),
    "t5_bucket_bidirectional": lambda a, xp: PF.t5_relative_bucket(
        a(np.arange(-300, 300)), bidirectional=True, num_buckets=32, max_distance=128
    ),
    "kerple_log": lambda a, xp: PF.kerple_bias(a(Q_POS), a(K_POS), a(R1), a(R2), variant="log"),
    "kerple_power": lambda a, xp: PF.kerple_bias(
        a(BQ_POS), a(K_POS), a(R1), a(R2), variant="power"
    ),
    "fire_psi": lambda a, xp: PF.fire_psi(a(np.linspace(-5.0, 5.0, 11)), a(C_FIRE)),
    "fire_distance": lambda a, xp: PF.fire_distance(a(BQ_POS), a(K_POS), a(C_FIRE), a(L_FIRE)),
    "fire_normaliser": lambda a, xp: PF.fire_normaliser(a(BQ_POS), a(C_FIRE), a(L_FIRE)),
    "fire_mlp_pieces": lambda a, xp: PF.fire_mlp_pieces(
        a(W1_FIRE), a(B1_FIRE), a(W2_FIRE), a(B2_FIRE)
    ),
    "fire_mlp": lambda a, xp: PF.fire_mlp(
        a(np.linspace(-2.0, 2.0, 41)),
        *PF.fire_mlp_pieces(a(W1_FIRE), a(B1_FIRE), a(W2_FIRE), a(B2_FIRE)),
    ),
    "shaw_relative_index": lambda a, xp: _shaw_index(a),
    "relative_key_logits": lambda a, xp: PF.relative_key_logits(a(X), a(TABLE), _shaw_index(a)),
    "relative_value_output": lambda a, xp: PF.relative_value_output(
        a(PROBS), a(TABLE), _shaw_index(a)
    ),
    "transformer_xl_terms": lambda a, xp: PF.transformer_xl_terms(
        a(X),
        a(rng_fixed(1, (B, H, Tk, D))),
        a(Q_POS),
        a(K_POS),
        r_proj=a(rng_fixed(2, (H * D, C))),
        u=a(rng_fixed(3, (H, D))),
        v=a(rng_fixed(4, (H, D))),
    ),
    "transformer_xl_position_rows": lambda a, xp: _txl_rows(a(rng_fixed(2, (H * D, C)))),
    "xpos_scale": lambda a, xp: PF.xpos_scale(a(BQ_POS), D, scale_base=64.0),
    "query_temperature": lambda a, xp: PF.query_temperature(a(BQ_POS), floor_scale=2),
    "softplus": lambda a, xp: PF.softplus(a(np.linspace(-30.0, 30.0, 13))),
    "pope_polar": lambda a, xp: PF.pope_polar(a(X), a(np.cos(ANG)), a(np.sin(ANG))),
    "pope_features": lambda a, xp: PF.pope_features(
        a(X), a(BQ_POS), a(PF.rope_inv_freq(2 * D)), a(rng_fixed(3, (H, D)))
    ),
    "cope_positions": lambda a, xp: PF.cope_positions(a(LOGITS), n_positions=4),
    "cope_interpolate": lambda a, xp: PF.cope_interpolate(
        PF.cope_positions(a(LOGITS), n_positions=4), a(rng_fixed(5, (B, H, Tq, 4)))
    ),
    "axial_inv_freq": lambda a, xp: PF.axial_inv_freq(AX_SECTIONS, base=100.0, xp=xp),
    "axis_angles": lambda a, xp: PF.axis_angles(
        a(GRID_POS), a(AX_INV), a(np.asarray(PF.pair_axes(AX_SECTIONS)))
    ),
    "mixed_inv_freq": lambda a, xp: PF.mixed_inv_freq(8, a(np.array([0.3, 2.0])), base=10.0),
    "mixed_angles": lambda a, xp: PF.mixed_angles(a(GRID_POS), a(MIXED)),
    "sincos_2d_table": lambda a, xp: PF.sincos_2d_table(a(GRID_POS), 8, base=100.0),
    "forgetting_attention": lambda a, xp: PF.forgetting_attention(
        *(a(ATT[n]) for n in ("q", "k", "v", "log_f")), block_size=3
    ),
    "stick_breaking_attention": lambda a, xp: PF.stick_breaking_attention(
        *(a(ATT[n]) for n in ("q", "k", "v")), block_size=3
    ),
    "path_attention": lambda a, xp: PF.path_attention(
        *(a(ATT[n]) for n in ("q", "k", "v", "w", "beta", "log_f")), block_size=3
    ),
    "path_attention_cached": lambda a, xp: _path_cached(a),
    "attention_with_sinks": lambda a, xp: PF.attention_with_sinks(
        *(a(ATT[n]) for n in ("q", "k", "v", "sinks")), block_size=3
    ),
    "softmax_with_sinks": lambda a, xp: PF.softmax_with_sinks(a(LOGITS), a(ATT["sinks"][:H])),
    "scaling_linear": lambda a, xp: S.linear(a(INV), factor=4.0),
    "scaling_ntk": lambda a, xp: S.ntk(a(INV), factor=4.0),
    "scaling_dynamic": lambda a, xp: S.dynamic(
        a(INV), factor=4.0, original_max_position_embeddings=64, seq_len=200
    ),
    "scaling_yarn": lambda a, xp: S.yarn(a(INV), **YARN),
    "scaling_longrope": lambda a, xp: S.longrope(
        a(INV), **LONG, original_max_position_embeddings=64, factor=4.0, seq_len=100
    ),
    "scaling_llama3": lambda a, xp: S.llama3(a(INV), **LLAMA, original_max_position_embeddings=64),
}


def rng_fixed(seed: int, shape: tuple[int, ...]) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=shape)


@dataclass(frozen=True)
class Backend:
    name: str
    xp: Any
    to: Callable[[np.ndarray], Any]


def _narrow(x: np.ndarray) -> np.ndarray:
    """What a JAX user without x64 passes: float32 and int32."""
    if x.dtype.kind == "f":
        return x.astype(np.float32)
    return x.astype(np.int32) if x.dtype.kind in "iu" else x


BACKENDS = {
    "numpy": Backend("numpy", PF.np_xp, lambda x: x),
    "torch": Backend("torch", PF.torch_xp, lambda x: torch.from_numpy(np.array(x))),
    "strict": Backend("strict", xps, lambda x: xps.asarray(x)),
    "jax64": Backend("jax64", jnp, lambda x: jnp.asarray(x)),
    "jax32": Backend("jax32", jnp, lambda x: jnp.asarray(_narrow(x))),
}


def _to_numpy(out: Any) -> list[np.ndarray]:
    if isinstance(out, tuple):
        return [a for part in out for a in _to_numpy(part)]
    if isinstance(out, float | int):
        return [np.asarray(out)]
    if isinstance(out, torch.Tensor):
        return [out.numpy()]
    return [np.from_dlpack(out) if _is_strict(out) else np.asarray(out)]


def _is_strict(x: Any) -> bool:
    return type(x).__module__.startswith("array_api_strict")


def _run(name: str, backend: Backend) -> list[np.ndarray]:
    with warnings.catch_warnings(), jax.enable_x64(backend.name == "jax64"):
        warnings.simplefilter("error")  # e.g. JAX truncating an explicit float64 request
        return _to_numpy(CASES[name](backend.to, backend.xp))


def _txl_rows(r_proj: Any) -> Any:
    return PF.transformer_xl_position_rows(-6, 4, r_proj=r_proj, n_heads=H, dtype=r_proj.dtype)


@pytest.mark.parametrize("backend", ["torch", "strict", "jax64"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_formula_same_on_every_backend_float64(name: str, backend: str) -> None:
    expected, got = _run(name, BACKENDS["numpy"]), _run(name, BACKENDS[backend])
    assert len(got) == len(expected)
    for e, g in zip(expected, got, strict=True):
        assert g.dtype == e.dtype, f"{name} on {backend}: dtype {g.dtype}, numpy gives {e.dtype}"
        np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12, err_msg=f"{name} on {backend}")


@pytest.mark.parametrize("name", sorted(CASES))
def test_formula_on_jax_float32_within_float32_tolerance(name: str) -> None:
    expected, got = _run(name, BACKENDS["numpy"]), _run(name, BACKENDS["jax32"])
    for e, g in zip(expected, got, strict=True):
        assert g.dtype.itemsize <= 4 or g.ndim == 0, f"{name}: JAX without x64 gave {g.dtype}"
        if e.dtype.kind in "iub":
            np.testing.assert_array_equal(g, e, err_msg=name)
        else:
            scale = max(1.0, float(np.max(np.abs(e[np.isfinite(e)]), initial=0.0)))
            np.testing.assert_allclose(g, e, rtol=2e-5, atol=2e-6 * scale, err_msg=name)


def test_every_exported_formula_has_a_case() -> None:
    covered = {n.removesuffix(s) for n in CASES for s in ("_n", "_pos")} | set(CASES)
    covered |= {"rope_cos_sin", "apply_rope", "kerple_bias", "t5_relative_bucket", "alibi_bias"}
    covered |= {"kerple_log", "kerple_power", "gather_relative"}  # via kerple_bias, shaw terms
    helpers = {"namespace", "np_xp", "torch_xp", "rotary_dim", "check_t5_buckets", "check_kerple"}
    helpers |= {"widest_float", "widest_int"}
    helpers |= {"xpos_max_position", "check_xpos_range"}  # Python numbers in, no arrays
    helpers |= {"pair_axes", "check_sections", "check_grid"}  # Python ints in and out
    helpers |= {"resample_table"}  # torch's F.interpolate, not the array API: equal to timm's
    formulas = {
        n for n in PF.__all__ if n[0].islower() and n not in helpers and callable(getattr(PF, n))
    }
    assert formulas - covered == set(), "add a conformance case for these formulas"
