"""Shaw et al. 2018 relative keys/values: index, logits, attention output vs the O(T²) reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import posenc
from posenc import Attention
from posenc import functional as PF
from tests.encodings._helpers import heads_of, merge_heads, qkv
from tests.reference import families as ref


def _shaw(
    max_distance: int = 2, values: bool = True, head_dim: int = 8
) -> posenc.PositionalEncoding:
    pe = posenc.build("shaw", head_dim=head_dim, max_distance=max_distance, values=values).double()
    with torch.no_grad():
        for p in pe.parameters():
            p.normal_(generator=torch.Generator().manual_seed(3))
    return pe


def test_index_clips_past_max_distance() -> None:
    pos = torch.arange(10)
    idx = PF.shaw_relative_index(pos, pos, max_distance=3)  # (Tq, Tk)
    rel = (pos[None, :] - pos[:, None]).clamp(-3, 3) + 3  # j - i clipped, shifted to [0, 6]
    torch.testing.assert_close(idx, rel)
    assert idx[9, 0] == 0 and idx[0, 9] == 6 and idx[4, 4] == 3  # far left, far right, self
    assert set(idx[9, :7].tolist()) == {0}  # every key >= 3 behind shares the edge row


def test_index_on_numpy_equals_torch() -> None:
    q_pos, k_pos = np.array([[3, 4, 5]]), np.array([[0, 1, 2, 3, 4, 5]])
    got = PF.shaw_relative_index(q_pos, k_pos, max_distance=2)
    want = PF.shaw_relative_index(torch.tensor(q_pos), torch.tensor(k_pos), max_distance=2)
    np.testing.assert_array_equal(got, want.numpy())


@pytest.mark.parametrize("values", [True, False])
@pytest.mark.parametrize("max_distance", [1, 2, 7])
def test_hooks_equal_reference_attention(values: bool, max_distance: int) -> None:
    pe = _shaw(max_distance, values)
    q, k, v = qkv(Tq=4, Tk=7)
    q_pos, k_pos = (
        torch.tensor([[3, 4, 5, 6], [5, 6, 7, 8]]),
        torch.arange(7).expand(2, 7) + torch.tensor([[0], [2]]),
    )
    scores = q @ k.transpose(-2, -1) / 8**0.5
    scores = scores.masked_fill(~torch.ones(4, 7, dtype=torch.bool).tril(3), float("-inf"))
    logits = pe.relative_logits(scores, q, k, q_pos, k_pos)
    probs = torch.softmax(logits, dim=-1)
    extra = pe.relative_values(probs, q_pos, k_pos)
    out = probs @ v + (0 if extra is None else extra)
    table_v = pe.value_table.detach().numpy() if values else None
    want = ref.shaw_attention(
        q.numpy(),
        k.numpy(),
        v.numpy(),
        q_pos.numpy(),
        k_pos.numpy(),
        pe.key_table.detach().numpy(),
        table_v,
        max_distance,
    )
    np.testing.assert_allclose(out.detach().numpy(), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("causal", [True, False])
def test_attention_layer_equals_explicit_definition(causal: bool) -> None:
    torch.manual_seed(0)
    pe = _shaw(max_distance=2)
    attn = Attention(24, 3, pe=pe, causal=causal).double()
    x = torch.randn(2, 6, 24, dtype=torch.float64)
    q, k, v = heads_of(attn, x)
    pos = np.broadcast_to(np.arange(6), (2, 6))
    heads = ref.shaw_attention(
        q,
        k,
        v,
        pos,
        pos,
        pe.key_table.detach().numpy(),
        pe.value_table.detach().numpy(),
        2,
        causal=causal,
    )
    with torch.no_grad():
        got = attn(x)
    np.testing.assert_allclose(got.numpy(), merge_heads(attn, heads), rtol=1e-11, atol=1e-12)


def test_keys_beyond_max_distance_are_indistinguishable() -> None:
    """With identical content, every key >= K behind the query gets the same logit."""
    pe = _shaw(max_distance=2)
    q, k, _ = qkv(B=1, H=1, Tq=1, Tk=8)
    k = k[:, :, :1].expand(1, 1, 8, 8)  # same key content everywhere
    q_pos, k_pos = torch.tensor([7]), torch.arange(8)
    logits = pe.relative_logits(torch.zeros(1, 1, 1, 8, dtype=torch.float64), q, k, q_pos, k_pos)[
        0, 0, 0
    ]
    torch.testing.assert_close(logits[:6], logits[:1].expand(6))  # offsets 7..2 share row 0
    assert (logits[5] - logits[6]).abs() > 1e-6 and (logits[6] - logits[7]).abs() > 1e-6


@pytest.mark.parametrize(
    ("config", "error", "match"),
    [
        ({"max_distance": 0}, ValueError, "max_distance must be an integer >= 1, got 0"),
        ({"max_distance": 2.5}, TypeError, "max_distance must be an int"),
        ({"head_dim": 0}, ValueError, "head_dim must be an integer >= 1"),
        ({"values": "yes"}, TypeError, "values must be a bool"),
    ],
)
def test_bad_config_raises(config: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        posenc.build("shaw", **({"head_dim": 8} | config))


def test_wrong_head_dim_raises() -> None:
    pe = _shaw(head_dim=8)
    q, k, _ = qkv(D=6)
    with pytest.raises(ValueError, match="head_dim=8 features, got 6"):
        pe.relative_logits(q @ k.transpose(-2, -1), q, k, torch.arange(5), torch.arange(5))


def test_relative_values_check_positions() -> None:
    """relative_values refuses positions that do not fit probs (B, H, Tq, Tk) instead of
    broadcasting them."""
    pe = _shaw()
    probs = torch.full((2, 3, 5, 5), 0.2, dtype=torch.float64)
    pos = torch.arange(5)
    with pytest.raises(ValueError, match=r"q_pos must have shape \(T,\) or \(B, T\)"):
        pe.relative_values(probs, pos[None, None], pos)
    with pytest.raises(ValueError, match=r"k_pos must have shape \(5,\) or \(2, 5\), got \(3,\)"):
        pe.relative_values(probs, pos, torch.arange(3))
    with pytest.raises(TypeError, match="q_pos must be an integer tensor"):
        pe.relative_values(probs, pos.double(), pos)
