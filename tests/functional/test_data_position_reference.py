"""Forgetting, stick-breaking, PaTH and sink attention against the float64 references written
from their papers (``tests.reference.data_position``): grouped heads, decode rows over a cache,
packed segments, the block size smaller than, equal to and larger than T."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from posenc import functional as PF
from tests.functional._data_position import inputs
from tests.reference import data_position as ref

B, H, Hkv, T, D = 2, 4, 2, 9, 4
SEGMENTS = np.array([[0, 0, 0, 1, 1, 1, 1, 2, 2], [3, 3, 3, 3, 3, 3, 3, 3, 3]])
CASES = [
    pytest.param(T, None, None, id="prefill"),
    pytest.param(T, 4, SEGMENTS, id="segments"),
    pytest.param(3, 2, None, id="decode"),
    pytest.param(T, 1, None, id="block1"),
]


def t(x: np.ndarray | None) -> torch.Tensor | None:
    return None if x is None else torch.from_numpy(x)


@pytest.mark.parametrize(("Tq", "block", "segments"), CASES)
@pytest.mark.parametrize("scale", [None, 0.7])
def test_forgetting_matches_reference(Tq, block, segments, scale) -> None:
    a = inputs(B, H, Hkv, T, D)
    q = a["q"][:, :, T - Tq :]
    want = ref.forgetting(q, a["k"], a["v"], a["log_f"], scale=scale, segments=segments)
    got = PF.forgetting_attention(
        t(q),
        t(a["k"]),
        t(a["v"]),
        t(a["log_f"]),
        scale=scale,
        segment_ids=t(segments),
        block_size=block,
    )
    np.testing.assert_allclose(got.numpy(), want, atol=1e-12)


@pytest.mark.parametrize(("Tq", "block", "segments"), CASES)
@pytest.mark.parametrize("attend_current", [False, True])
def test_stick_breaking_matches_reference(Tq, block, segments, attend_current) -> None:
    a = inputs(B, H, Hkv, T, D)
    q = a["q"][:, :, T - Tq :]
    want, want_rem = ref.stick_breaking(
        q, a["k"], a["v"], attend_current=attend_current, segments=segments
    )
    got, rem = PF.stick_breaking_attention(
        t(q),
        t(a["k"]),
        t(a["v"]),
        attend_current=attend_current,
        segment_ids=t(segments),
        block_size=block,
    )
    np.testing.assert_allclose(got.numpy(), want, atol=1e-12)
    np.testing.assert_allclose(rem.numpy(), want_rem, atol=1e-12)


def test_stick_breaking_weights_and_remainder_sum_to_one() -> None:
    a = {n: torch.from_numpy(x) for n, x in inputs(1, 2, 2, T, D).items()}
    ones = torch.ones_like(a["v"])  # o_i = Σ_j A_ij when every value is 1
    out, rem = PF.stick_breaking_attention(a["q"], a["k"], ones, block_size=4)
    torch.testing.assert_close(out[..., 0] + rem, torch.ones_like(rem))
    assert torch.all(rem[..., 0] == 1)  # the first query sees no earlier key


@pytest.mark.parametrize(("Tq", "block", "segments"), CASES)
@pytest.mark.parametrize("gated", [False, True])
def test_path_matches_reference(Tq, block, segments, gated) -> None:
    a = inputs(B, H, Hkv, T, D)
    q = a["q"][:, :, T - Tq :]
    log_f = a["log_f"] if gated else None
    want = ref.path(q, a["k"], a["v"], a["w"], a["beta"], log_f, segments=segments)
    got = PF.path_attention(
        t(q),
        t(a["k"]),
        t(a["v"]),
        t(a["w"]),
        t(a["beta"]),
        t(log_f),
        segment_ids=t(segments),
        block_size=block,
    )
    np.testing.assert_allclose(got.numpy(), want, atol=1e-12)


def test_path_with_no_reflection_is_softmax_attention() -> None:
    a = {n: torch.from_numpy(x) for n, x in inputs(B, H, H, T, D).items()}
    got = PF.path_attention(a["q"], a["k"], a["v"], a["w"], torch.zeros_like(a["beta"]))
    want = torch.nn.functional.scaled_dot_product_attention(a["q"], a["k"], a["v"], is_causal=True)
    torch.testing.assert_close(got, want)


def test_path_reflections_preserve_the_score_under_a_common_rotation() -> None:
    """Rotating q, k and w by one orthogonal R leaves every q_iᵀ H ··· H k_j unchanged."""
    a = {n: torch.from_numpy(x) for n, x in inputs(1, 2, 2, T, D).items()}
    R = torch.linalg.qr(torch.randn(D, D, dtype=torch.float64))[0]
    want = PF.path_attention(a["q"], a["k"], a["v"], a["w"], a["beta"], block_size=4)
    got = PF.path_attention(a["q"] @ R, a["k"] @ R, a["v"], a["w"] @ R, a["beta"], block_size=4)
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize(("Tq", "block", "segments"), CASES)
def test_sinks_match_reference(Tq, block, segments) -> None:
    a = inputs(B, H, Hkv, T, D)
    q = a["q"][:, :, T - Tq :]
    want = ref.sinks(q, a["k"], a["v"], a["sinks"], segments=segments)
    got = PF.attention_with_sinks(
        t(q), t(a["k"]), t(a["v"]), t(a["sinks"]), segment_ids=t(segments), block_size=block
    )
    np.testing.assert_allclose(got.numpy(), want, atol=1e-12)


def test_softmax_with_sinks_matches_reference_rows() -> None:
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(2, 3, 4, 5))
    logits[..., 0, 2:] = -np.inf  # masked keys
    sinks = rng.normal(size=3)
    got = PF.softmax_with_sinks(torch.from_numpy(logits), torch.from_numpy(sinks)).numpy()
    for b, h, i in np.ndindex(2, 3, 4):
        keep = np.isfinite(logits[b, h, i])
        row = ref._softmax_row(list(logits[b, h, i][keep]), sinks[h])
        np.testing.assert_allclose(got[b, h, i][keep], row, atol=1e-15)
        assert np.all(got[b, h, i][~keep] == 0)


def test_a_very_negative_sink_is_plain_softmax() -> None:
    a = {n: torch.from_numpy(x) for n, x in inputs(B, H, Hkv, T, D).items()}
    got = PF.attention_with_sinks(a["q"], a["k"], a["v"], torch.full((H,), -1e4))
    want = torch.nn.functional.scaled_dot_product_attention(
        a["q"], a["k"], a["v"], is_causal=True, enable_gqa=True
    )
    torch.testing.assert_close(got, want)
