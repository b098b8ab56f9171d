"""p-RoPE (Barbero et al. 2024, arXiv:2410.06205): a float64 reference written from the paper,
its limits (p = 1 is RoPE, p = 0 rotates nothing), transformers' ``proportional`` rope type
(Gemma 4, LFM3) read by ``rope_from_hf`` and written by ``rope_to_hf``, the Flax twin."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import posenc
import posenc.functional as PF
from posenc.hf.rope_config import rope_from_hf, rope_to_hf


def reference_p_rope(x: np.ndarray, pos: np.ndarray, *, p: float, base: float) -> np.ndarray:
    """Sec. 6 of the paper, half layout: pair (j, j + d/2) turns by pos·θ_j with θ_j =
    base^(-2j/d) for the ⌊p·d/2⌋ highest frequencies (j small) and 0 for the rest.
    x (B, H, T, d) float64, pos (T,) int -> (B, H, T, d)."""
    d = x.shape[-1]
    out = x.copy()
    for j in range(d // 2):
        theta = base ** (-2.0 * j / d) if j < math.floor(p * d / 2) else 0.0
        for t, m in enumerate(pos):
            c, s = math.cos(m * theta), math.sin(m * theta)
            a, b = x[..., t, j], x[..., t, j + d // 2]
            out[..., t, j], out[..., t, j + d // 2] = a * c - b * s, a * s + b * c
    return out


def _qk(D: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    return (torch.randn(1, 2, 6, D, generator=g, dtype=torch.float64),) * 2


@pytest.mark.parametrize("p", [0.0, 0.25, 0.5, 0.75, 1.0])
def test_p_rope_matches_float64_reference(p: float) -> None:
    pe = posenc.build("p_rope", head_dim=16, p=p, base=100.0)
    q, k = _qk()
    pos = torch.tensor([0, 1, 5, 17, 300, 4099])
    rq, _ = pe.rotate(q, k, pos, pos)
    expected = reference_p_rope(q.numpy(), pos.numpy(), p=p, base=100.0)
    torch.testing.assert_close(rq, torch.from_numpy(expected))


def test_p_one_is_rope_and_p_zero_rotates_nothing() -> None:
    q, k = _qk()
    pos = torch.arange(6) * 7
    rope = posenc.build("rope", head_dim=16)
    full = posenc.build("p_rope", head_dim=16, p=1.0)
    torch.testing.assert_close(full.rotate(q, k, pos, pos), rope.rotate(q, k, pos, pos))
    none = posenc.build("p_rope", head_dim=16, p=0.0)
    torch.testing.assert_close(none.rotate(q, k, pos, pos), (q, k))


def test_kept_pairs_turn_and_dropped_pairs_do_not() -> None:
    inv_freq = PF.p_rope_inv_freq(16, 0.5, base=10000.0)
    np.testing.assert_array_equal(inv_freq[4:], 0.0)
    np.testing.assert_allclose(inv_freq[:4], PF.rope_inv_freq(16, base=10000.0)[:4])


def test_scores_depend_on_the_offset_only() -> None:
    pe = posenc.build("p_rope", head_dim=16, p=0.5)
    q, k = _qk()
    pos = torch.arange(6)
    rq, rk = pe.rotate(q, k, pos, pos)
    sq, sk = pe.rotate(q, k, pos + 1000, pos + 1000)
    torch.testing.assert_close(rq @ rk.transpose(-1, -2), sq @ sk.transpose(-1, -2))


@pytest.mark.parametrize(("p", "error"), [(1.5, ValueError), (-0.1, ValueError), ("x", TypeError)])
def test_bad_p_is_refused(p: object, error: type[Exception]) -> None:
    with pytest.raises(error, match="p "):
        posenc.build("p_rope", head_dim=16, p=p)


@pytest.mark.anchor
def test_proportional_rope_type_equals_transformers() -> None:
    from transformers import Lfm3Config
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = Lfm3Config()  # full attention: proportional, partial_rotary_factor 0.5, θ 1e6
    params = config.rope_parameters["full_attention"]
    assert params["rope_type"] == "proportional"
    params["factor"] = 2.0  # position interpolation on the kept frequencies
    pe = rope_from_hf(config, layer_type="full_attention")
    assert isinstance(pe, posenc.encodings.rotary.PRoPE)
    inv_freq, attention_factor = ROPE_INIT_FUNCTIONS["proportional"](
        config, layer_type="full_attention"
    )
    assert attention_factor == 1.0
    torch.testing.assert_close(pe.inv_freq, inv_freq)  # HF: float32 from float32 powers
    assert pe.p == 0.5 and pe.head_dim == config.head_dim
    written = rope_to_hf(pe)["rope_parameters"]
    assert written == {
        "rope_type": "proportional",
        "rope_theta": params["rope_theta"],
        "partial_rotary_factor": 0.5,
        "factor": 2.0,
    }


def test_flax_twin_equals_torch() -> None:
    pytest.importorskip("flax")
    import jax.numpy as jnp

    import posenc.flax as pfx

    q, k = _qk()
    pos = torch.arange(6) * 11
    torch_pe = posenc.build("p_rope", head_dim=16, p=0.25)
    flax_pe = pfx.build("p_rope", head_dim=16, p=0.25)
    fq, _ = flax_pe.rotate(
        jnp.asarray(q.float().numpy()),
        jnp.asarray(k.float().numpy()),
        jnp.asarray(pos.numpy()),
        jnp.asarray(pos.numpy()),
    )
    tq, _ = torch_pe.rotate(q.float(), k.float(), pos, pos)
    np.testing.assert_allclose(np.asarray(fq), tq.numpy(), atol=2e-5)
