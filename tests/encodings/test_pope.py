"""PoPE (Gopalakrishnan et al. 2025): polar scores vs the paper's formula and x-transformers."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import posenc
from posenc import Attention
from posenc import functional as PF
from posenc.encodings.pope import PoPE
from tests.encodings._helpers import causal_mask, heads_of, merge_heads, qkv, softmax_attention
from tests.reference import families as ref


def _pope(head_dim: int = 8, n_heads: int = 3, **kw) -> posenc.PositionalEncoding:  # type: ignore[no-untyped-def]
    pe = posenc.build("pope", head_dim=head_dim, n_heads=n_heads, **kw).double()
    if pe.delta is not None:
        with torch.no_grad():  # some values outside [-2π, 0] to exercise the clamp
            pe.delta.uniform_(-8.0, 1.0, generator=torch.Generator().manual_seed(2))
    return pe


def _delta(pe: posenc.PositionalEncoding) -> np.ndarray | None:
    return None if pe.delta is None else np.clip(pe.delta.detach().numpy(), -2 * math.pi, 0.0)


@pytest.mark.parametrize("phase_bias", [True, False])
@pytest.mark.parametrize("head_dim", [8, 5])  # D frequencies: an odd head_dim is fine
def test_scores_equal_reference(phase_bias: bool, head_dim: int) -> None:
    pe = _pope(head_dim, phase_bias=phase_bias)
    q, k, _ = qkv(B=2, H=3, Tq=4, Tk=6, D=head_dim)
    q_pos, k_pos = torch.tensor([[2, 3, 4, 5], [40, 41, 42, 43]]), torch.tensor([0, 1, 2, 3, 4, 5])
    pq, pk = pe.rotate(q, k, q_pos, k_pos)
    assert pq.shape == (2, 3, 4, 2 * head_dim) and pk.shape == (2, 3, 6, 2 * head_dim)
    got = (pq @ pk.transpose(-2, -1)).detach().numpy()
    delta = _delta(pe)
    for b, h, i, j in np.ndindex(2, 3, 4, 6):
        want = ref.pope_score(
            q[b, h, i].numpy(),
            k[b, h, j].numpy(),
            int(q_pos[b, i]),
            int(k_pos[j]),
            None if delta is None else delta[h],
        )
        assert got[b, h, i, j] == pytest.approx(want, rel=1e-12, abs=1e-12)


def test_attention_layer_scales_by_head_dim() -> None:
    """q and k widen to 2D, yet the logits are divided by sqrt(D) (as in the paper's code)."""
    torch.manual_seed(0)
    pe = _pope(head_dim=8, n_heads=3)
    attn = Attention(24, 3, pe=pe, causal=True).double()
    x = torch.randn(2, 5, 24, dtype=torch.float64)
    q, k, v = heads_of(attn, x)
    delta = _delta(pe)
    logits = np.zeros((2, 3, 5, 5))
    for b, h, i, j in np.ndindex(2, 3, 5, 5):
        logits[b, h, i, j] = ref.pope_score(q[b, h, i], k[b, h, j], i, j, delta[h]) / math.sqrt(8)
    want = merge_heads(attn, softmax_attention(logits + causal_mask(5, 5), v))
    with torch.no_grad():
        got = attn(x)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-10, atol=1e-12)


def test_scores_depend_only_on_distance() -> None:
    pe = _pope()
    q, k, _ = qkv(H=3)
    pos = torch.arange(5)
    a = [
        (lambda x, y: x @ y.transpose(-2, -1))(*pe.rotate(q, k, pos + s, pos + s)) for s in (0, 777)
    ]
    torch.testing.assert_close(a[0], a[1], rtol=1e-10, atol=1e-10)


def test_grouped_key_heads() -> None:
    """The bias sits on the query heads, so fewer key heads (GQA) need no repetition."""
    pe = _pope(head_dim=8, n_heads=4)
    q, k, _ = qkv(H=4)
    pq, pk = pe.rotate(q, k[:, :2], torch.arange(5), torch.arange(5))
    full_q, full_k = pe.rotate(
        q, k[:, :2].repeat_interleave(2, dim=1), torch.arange(5), torch.arange(5)
    )
    torch.testing.assert_close(pq, full_q)
    torch.testing.assert_close(pk.repeat_interleave(2, dim=1), full_k)


@pytest.mark.parametrize(
    ("config", "error", "match"),
    [
        ({"head_dim": 0}, ValueError, "head_dim must be an integer >= 1, got 0"),
        ({"n_heads": 0}, ValueError, "n_heads must be an integer >= 1, got 0"),
        ({"base": 0.0}, ValueError, "base must be a finite number > 0, got 0.0"),
        ({"phase_bias": 1}, TypeError, "phase_bias must be a bool, got int"),
    ],
)
def test_bad_config_raises(config: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        posenc.build("pope", **({"head_dim": 8, "n_heads": 2} | config))


def test_wrong_shapes_raise() -> None:
    pe = _pope(head_dim=8, n_heads=3)
    q, k, _ = qkv(H=3, D=6)
    with pytest.raises(ValueError, match="head_dim=8 features, got 6"):
        pe.rotate(q, k, torch.arange(5), torch.arange(5))
    q, k, _ = qkv(H=2, D=8)
    with pytest.raises(ValueError, match="n_heads=3 heads, got 2"):
        pe.rotate(q, k, torch.arange(5), torch.arange(5))


def _count_tables(monkeypatch: pytest.MonkeyPatch, share: bool = True) -> list[int]:
    """Count the cos/sin tables of pos·θ PoPE makes (``PF.rope_cos_sin``); ``share=False``
    makes every layer compute its own, as without a state (``rotate`` called without ctx)."""
    calls = [0]
    rope_cos_sin = posenc.functional.rope_cos_sin

    def counted(*args):  # type: ignore[no-untyped-def]
        calls[0] += 1
        return rope_cos_sin(*args)

    monkeypatch.setattr(posenc.functional, "rope_cos_sin", counted)
    if not share:
        rotate = PoPE.rotate

        def alone(self, q, k, q_pos, k_pos, *, ctx=None):  # type: ignore[no-untyped-def]
            return rotate(self, q, k, ctx.q_pos, ctx.k_pos)

        monkeypatch.setattr(PoPE, "rotate", alone)
    return calls


@pytest.mark.parametrize("phase_bias", [True, False])
def test_model_forward_makes_tables_once(phase_bias: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 2-layer forward makes cos/sin of pos·θ once (the context), each layer applying its δ;
    the logits equal every layer computing its own tables."""
    torch.manual_seed(0)
    model = posenc.TinyTransformer(
        vocab_size=11, pe="pope", d_model=16, n_heads=2, pe_config={"phase_bias": phase_bias}
    ).double()
    if model.pe.delta is not None:
        with torch.no_grad():
            model.pe.delta.uniform_(-7.0, 0.5)
    idx = torch.randint(0, 11, (2, 6))
    with torch.no_grad():
        calls = _count_tables(monkeypatch)
        shared = model(idx)
        assert calls[0] == 1  # one state, queries and keys at the same positions
        monkeypatch.undo()
        calls = _count_tables(monkeypatch, share=False)
        unshared = model(idx)
        assert calls[0] == 4  # 2 layers x (queries, keys)
    torch.testing.assert_close(shared, unshared, rtol=0, atol=0)


def test_rotate_with_context_equals_without() -> None:
    pe = _pope(head_dim=8, n_heads=3)
    q, k, _ = qkv(B=2, H=3, Tq=4, Tk=6, D=8)
    q_pos, k_pos = torch.tensor([[2, 3, 4, 5], [9, 10, 11, 12]]), torch.arange(6)
    ctx = pe.prepare(q_pos, k_pos)
    with_ctx = pe.rotate(q, k, q_pos, k_pos, ctx=ctx)
    assert not ctx.keys_are_queries  # the queries' cos, sin and the keys' own
    torch.testing.assert_close(ctx.k_cos_sin[0], PF.rope_cos_sin(k_pos, pe.inv_freq)[0])
    for got, want in zip(with_ctx, pe.rotate(q, k, q_pos, k_pos), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
