"""Transformer-XL relative attention (Dai et al. 2019): terms, relative shift, layer output."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import posenc
from posenc import Attention
from posenc import functional as PF
from tests.encodings._helpers import causal_mask, heads_of, merge_heads, qkv, softmax_attention
from tests.reference import families as ref


def _txl(dim: int = 24, n_heads: int = 3) -> posenc.PositionalEncoding:
    pe = posenc.build("transformer_xl", dim=dim, n_heads=n_heads).double()
    with torch.no_grad():
        for p in pe.parameters():
            p.normal_(std=0.3, generator=torch.Generator().manual_seed(4))
    return pe


def _params(pe: posenc.PositionalEncoding) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return tuple(p.detach().numpy() for p in (pe.r_proj, pe.u, pe.v))  # type: ignore[return-value]


@pytest.mark.parametrize(
    ("q_pos", "k_pos"),
    [
        (torch.arange(5), torch.arange(5)),  # one sequence
        (torch.tensor([[5, 6, 7, 8, 9], [0, 1, 2, 3, 4]]), torch.arange(5, 10).expand(2, 5)),
        (torch.tensor([3, 1, 4, 1, 5]), torch.tensor([9, 2, 6, 5, 3])),  # any positions
    ],
)
def test_terms_equal_reference(q_pos: torch.Tensor, k_pos: torch.Tensor) -> None:
    pe = _txl()
    q, k, _ = qkv(H=3)
    scores = q @ k.transpose(-2, -1) / 8**0.5
    got = pe.relative_logits(scores, q, k, q_pos, k_pos)
    qp, kp = np.broadcast_to(q_pos.numpy(), (2, 5)), np.broadcast_to(k_pos.numpy(), (2, 5))
    want = ref.transformer_xl_logits(q.numpy(), k.numpy(), qp, kp, *_params(pe))
    np.testing.assert_allclose(got.detach().numpy(), want, rtol=1e-12, atol=1e-12)


def test_gather_equals_the_papers_relative_shift() -> None:
    """Dai et al.'s trick: scores against offsets T-1..0, padded by one column and reshaped,
    give B_ij = x_i · r_(i-j); ``gather_relative`` must agree for contiguous positions."""
    T = 6
    per_offset = torch.randn(2, 3, T, T, dtype=torch.float64)  # column c = offset T-1-c
    padded = torch.cat([torch.zeros(2, 3, T, 1, dtype=torch.float64), per_offset], dim=-1)
    shifted = padded.view(2, 3, T + 1, T)[:, :, 1:].view(2, 3, T, T)  # the rel-shift
    pos = torch.arange(T)
    index = (T - 1) - (pos[:, None] - pos[None, :])  # column of offset i - j
    got = PF.gather_relative(per_offset, index.clamp(0, T - 1))
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    torch.testing.assert_close(got[..., causal], shifted[..., causal])


@pytest.mark.parametrize("causal", [True, False])
def test_attention_layer_equals_explicit_definition(causal: bool) -> None:
    torch.manual_seed(0)
    pe = _txl()
    attn = Attention(24, 3, pe=pe, causal=causal).double()
    x = torch.randn(2, 6, 24, dtype=torch.float64)
    q, k, v = heads_of(attn, x)
    pos = np.broadcast_to(np.arange(6), (2, 6))
    logits = ref.transformer_xl_logits(q, k, pos, pos, *_params(pe))
    if causal:
        logits = logits + causal_mask(6, 6)
    with torch.no_grad():
        got = attn(x)
    want = merge_heads(attn, softmax_attention(logits, v))
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-11, atol=1e-12)


def test_terms_on_numpy_equal_torch() -> None:
    pe = _txl()
    q, k, _ = qkv(H=3)
    pos = torch.arange(5)
    r_proj, u, v = (p.detach() for p in (pe.r_proj, pe.u, pe.v))
    want = PF.transformer_xl_terms(q, k, pos, pos, r_proj=r_proj, u=u, v=v)
    got = PF.transformer_xl_terms(
        q.numpy(),
        k.numpy(),
        pos.numpy(),
        pos.numpy(),
        r_proj=r_proj.numpy(),
        u=u.numpy(),
        v=v.numpy(),
    )
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-12, atol=1e-12)


def test_terms_from_rows_of_a_wider_offset_range() -> None:
    """Rows computed once for a wider offset range (one attention call's query blocks) give
    the same terms; rows that miss an offset are refused."""
    pe = _txl()
    q, k, _ = qkv(H=3)
    q_pos, k_pos = torch.arange(2, 5), torch.arange(5)
    r_proj, u, v = (p.detach() for p in (pe.r_proj, pe.u, pe.v))
    kwargs = {"r_proj": r_proj, "u": u, "v": v}
    want = PF.transformer_xl_terms(q[:, :, 2:], k, q_pos, k_pos, **kwargs)
    rows = PF.transformer_xl_position_rows(-7, 9, r_proj=r_proj, n_heads=3, dtype=q.dtype)
    got = PF.transformer_xl_terms(q[:, :, 2:], k, q_pos, k_pos, rows=(-7, rows), **kwargs)
    torch.testing.assert_close(got, want, rtol=1e-13, atol=1e-13)
    with pytest.raises(ValueError, match=r"rows cover offsets -1..9, the positions need -2..4"):
        PF.transformer_xl_terms(q[:, :, 2:], k, q_pos, k_pos, rows=(-1, rows[:, 6:]), **kwargs)


@pytest.mark.parametrize(
    ("config", "error", "match"),
    [
        ({"dim": 23}, ValueError, "dim must be a positive even integer, got 23"),
        ({"n_heads": 0}, ValueError, "n_heads must be an integer >= 1, got 0"),
        ({"head_dim": 0}, ValueError, "head_dim must be an integer >= 1, got 0"),
        ({"base": -1.0}, ValueError, "base must be a finite number > 0"),
    ],
)
def test_bad_config_raises(config: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        posenc.build("transformer_xl", **({"dim": 24, "n_heads": 3} | config))


def test_wrong_head_count_raises() -> None:
    pe = _txl(n_heads=3)
    q, k, _ = qkv(H=2)
    with pytest.raises(ValueError, match="n_heads=3 heads, got 2"):
        pe.relative_logits(q @ k.transpose(-2, -1), q, k, torch.arange(5), torch.arange(5))


def test_empty_positions_give_empty_terms() -> None:
    """T = 0 (an empty prompt) gives empty logits, in the hook and inside an attention call."""
    pe = _txl()
    q, k, _ = qkv(H=3, Tq=0, Tk=0)
    empty = torch.arange(0)
    scores = q @ k.transpose(-2, -1)
    assert pe.relative_logits(scores, q, k, empty, empty).shape == (2, 3, 0, 0)
    ctx = pe.prepare(empty)
    assert pe.relative_logits(scores, q, k, empty, empty, ctx=ctx).shape == (2, 3, 0, 0)
