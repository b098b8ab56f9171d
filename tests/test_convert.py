"""posenc.convert.qk_layout: the permutation of transformers' Llama conversion script, its
inverse, partial rotary, grouped kv heads, biases, and models whose logits it preserves."""

from __future__ import annotations

import pytest
import torch

import posenc
from posenc.convert import qk_layout, qk_permutation
from posenc.functional import apply_rope


def _meta_to_hf(w: torch.Tensor, n_heads: int, dim1: int, dim2: int) -> torch.Tensor:
    """transformers' models/llama/convert_llama_weights_to_hf.py ``permute`` (Meta's
    interleaved pairs -> Hugging Face's halves), as the script writes it."""
    return w.view(n_heads, dim1 // n_heads // 2, 2, dim2).transpose(1, 2).reshape(dim1, dim2)


@pytest.mark.parametrize(("n_heads", "n_kv_heads", "head_dim"), [(4, 4, 8), (8, 2, 16), (6, 1, 4)])
def test_equals_the_llama_conversion_script(n_heads: int, n_kv_heads: int, head_dim: int) -> None:
    dim = n_heads * head_dim
    wq, wk = torch.randn(dim, dim), torch.randn(n_kv_heads * head_dim, dim)
    ours = qk_layout(wq, n_heads=n_heads, head_dim=head_dim, src="interleaved", dst="half")
    assert torch.equal(ours, _meta_to_hf(wq, n_heads, dim, dim))
    ours = qk_layout(wk, n_heads=n_kv_heads, head_dim=head_dim, src="interleaved", dst="half")
    assert torch.equal(ours, _meta_to_hf(wk, n_kv_heads, n_kv_heads * head_dim, dim))


@pytest.mark.parametrize("rotary_dim", [None, 8, 4])
def test_inverse_round_trips_and_partial_rotary_keeps_the_rest(rotary_dim: int | None) -> None:
    w, b = torch.randn(3 * 12, 5), torch.randn(3 * 12)
    kw = {"n_heads": 3, "head_dim": 12, "rotary_dim": rotary_dim}
    for x in (w, b):
        half = qk_layout(x, src="interleaved", dst="half", **kw)
        assert torch.equal(qk_layout(half, src="half", dst="interleaved", **kw), x)
        assert torch.equal(qk_layout(x, src="half", dst="half", **kw), x)
        r = 12 if rotary_dim is None else rotary_dim
        heads, moved = x.view(3, 12, -1), half.view(3, 12, -1)
        assert torch.equal(moved[:, r:], heads[:, r:])  # pass-through features stay
        assert not torch.equal(moved[:, :r], heads[:, :r])
    assert qk_permutation(n_heads=1, head_dim=6, src="half", dst="interleaved").tolist() == [
        0,
        3,
        1,
        4,
        2,
        5,
    ]


@pytest.mark.parametrize("rotary_dim", [16, 8])
def test_scores_with_biases_are_the_same_under_the_other_layout(rotary_dim: int) -> None:
    """q·k after RoPE: interleaved weights and biases, or their conversion rotated in halves
    (grouped kv heads: 4 query heads, 2 key heads)."""
    D, x = 16, torch.randn(5, 32, dtype=torch.float64)
    wq, bq = torch.randn(4 * D, 32, dtype=torch.float64), torch.randn(4 * D, dtype=torch.float64)
    wk, bk = torch.randn(2 * D, 32, dtype=torch.float64), torch.randn(2 * D, dtype=torch.float64)
    angles = torch.arange(5.0, dtype=torch.float64)[:, None] * 10000.0 ** (
        -torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim
    )
    cos, sin = angles.cos(), angles.sin()  # (T, P)

    def scores(wq: torch.Tensor, bq: torch.Tensor, wk: torch.Tensor, bk: torch.Tensor, layout: str):
        q = (x @ wq.T + bq).view(5, 4, D).transpose(0, 1)  # (H, T, D)
        k = (x @ wk.T + bk).view(5, 2, D).transpose(0, 1).repeat_interleave(2, 0)
        q, k = apply_rope(q, cos, sin, layout=layout), apply_rope(k, cos, sin, layout=layout)
        return q @ k.transpose(-1, -2)  # (H, T, T)

    kw = {"head_dim": D, "src": "interleaved", "dst": "half", "rotary_dim": rotary_dim}
    converted = (
        qk_layout(wq, n_heads=4, **kw),
        qk_layout(bq, n_heads=4, **kw),
        qk_layout(wk, n_heads=2, **kw),
        qk_layout(bk, n_heads=2, **kw),
    )
    expected = scores(wq, bq, wk, bk, "interleaved")
    torch.testing.assert_close(scores(*converted, "half"), expected, rtol=1e-12, atol=1e-10)
    assert not torch.allclose(scores(wq, bq, wk, bk, "half"), expected)  # conversion needed


def test_a_model_gives_the_same_logits_under_the_other_layout() -> None:
    """A TinyTransformer trained with interleaved RoPE (partial, grouped kv heads), its q/k
    rows converted, runs with half-layout RoPE to the same logits."""
    d_model, n_heads, n_kv, D = 64, 4, 2, 16

    def tiny(layout: str) -> posenc.TinyTransformer:
        pe = posenc.build("rope", head_dim=D, layout=layout, partial=0.5)
        return posenc.TinyTransformer(
            vocab_size=50, pe=pe, d_model=d_model, n_heads=n_heads, n_kv_heads=n_kv
        )

    torch.manual_seed(0)
    interleaved, half = tiny("interleaved"), tiny("half")
    state = interleaved.state_dict()
    kw = {"head_dim": D, "src": "interleaved", "dst": "half", "rotary_dim": D // 2}
    for block in range(2):
        key = f"blocks.{block}.attn.qkv.weight"
        q, k, v = state[key].split([d_model, n_kv * D, n_kv * D])
        state[key] = torch.cat(
            [qk_layout(q, n_heads=n_heads, **kw), qk_layout(k, n_heads=n_kv, **kw), v]
        )
    half.load_state_dict(state)
    idx = torch.randint(0, 50, (2, 20))
    with torch.no_grad():
        torch.testing.assert_close(half(idx), interleaved(idx), atol=1e-5, rtol=1e-5)


def test_bad_inputs_raise() -> None:
    w = torch.randn(32, 8)
    kw = {"n_heads": 4, "head_dim": 8}
    with pytest.raises(ValueError, match=r"n_heads·head_dim = 2·8 = 16 rows, got shape \(32, 8\)"):
        qk_layout(w, n_heads=2, head_dim=8, src="interleaved", dst="half")
    with pytest.raises(ValueError, match="got shape"):
        qk_layout(torch.randn(32, 8, 1), src="interleaved", dst="half", **kw)
    with pytest.raises(ValueError, match="src must be one of"):
        qk_layout(w, src="meta", dst="half", **kw)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="rotary_dim <= head_dim"):
        qk_layout(w, src="interleaved", dst="half", rotary_dim=10, **kw)
    with pytest.raises(ValueError, match="must be even"):
        qk_layout(torch.randn(28, 8), n_heads=4, head_dim=7, src="interleaved", dst="half")
    with pytest.raises(TypeError, match="n_heads must be an int"):
        qk_layout(w, n_heads=4.0, head_dim=8, src="half", dst="half")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"weight must be a torch\.Tensor"):
        qk_layout(w.numpy(), src="half", dst="half", **kw)  # type: ignore[arg-type]
