"""Review: bad input to the public torch API raises a ValueError/TypeError saying what was
expected, instead of a silent broadcast, garbage, NaN, or an error from deep inside
(RuntimeError, IndexError, AttributeError, ZeroDivisionError). One case per defect found."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

import posenc
import posenc.functional as PF
from posenc import extension as X
from posenc.attention import CachedKeys, packed_positions, positions_from_padding
from posenc.models import KVCache

B, H, T, D = 2, 4, 5, 8
POS = torch.arange(T)


def _qk(heads: int = H, kv_heads: int = H, dim: int = D) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(B, heads, T, dim), torch.randn(B, kv_heads, T, dim)


def _relative_logits(name: str, scores: torch.Tensor, kv_heads: int = H) -> Any:
    cfg = {"shaw": {"head_dim": D}, "transformer_xl": {"dim": H * D, "n_heads": H}}[name]
    q, k = _qk(kv_heads=kv_heads)
    return posenc.build(name, **cfg).relative_logits(scores, q, k, POS, POS)


def _inv_freq() -> torch.Tensor:
    return PF.rope_inv_freq(D, xp=PF.torch_xp)  # (4,) float64


def _attention(**kw: Any) -> posenc.Attention:
    return posenc.Attention(
        H * D, H, pe=posenc.build("rope", head_dim=D), **({"causal": True} | kw)
    )


def _attention_call(**kw: Any) -> Any:
    return _attention()(torch.randn(B, T, H * D), POS, **kw)


def _entry(
    T: int = 1, B: int = B, heads: int = 2, dim: int = D, pos_batch: int | None = None
) -> Any:
    pos = torch.arange(T)[None].expand(B if pos_batch is None else pos_batch, T)
    return CachedKeys(
        torch.randn(B, 2, T, D),
        torch.randn(B, heads, T, dim),
        pos,
        torch.ones(B, T, dtype=torch.bool),
        torch.zeros(B, T, dtype=torch.long),
    )


def _second_append(**kw: Any) -> Any:
    cache = KVCache()
    cache.append(_entry(T=3))
    return cache.append(_entry(**kw))


CASES: dict[str, tuple[Callable[[], Any], type[Exception], str]] = {
    # relative_logits: scores of another shape were broadcast against the (B, H, Tq, Tk) terms
    "shaw scores (H, Tq, Tk) broadcast": (
        lambda: _relative_logits("shaw", torch.randn(H, T, T)),
        ValueError,
        "scores",
    ),
    "shaw scores B=1 broadcast": (
        lambda: _relative_logits("shaw", torch.randn(1, H, T, T)),
        ValueError,
        "scores",
    ),
    "shaw scores wrong Tk RuntimeError": (
        lambda: _relative_logits("shaw", torch.randn(B, H, T, T + 1)),
        ValueError,
        "scores",
    ),
    "transformer_xl scores H=1 broadcast": (
        lambda: _relative_logits("transformer_xl", torch.randn(B, 1, T, T)),
        ValueError,
        "scores",
    ),
    "transformer_xl k with Hkv heads RuntimeError": (
        lambda: _relative_logits("transformer_xl", torch.randn(B, H, T, T), kv_heads=2),
        ValueError,
        "heads",
    ),
    "shaw relative_values int probs": (
        lambda: posenc.build("shaw", head_dim=D).relative_values(
            torch.ones(B, H, T, T, dtype=torch.long), POS, POS
        ),
        TypeError,
        "probs",
    ),
    # additive embeds cast their table to an integer/bool x: zeros added silently
    "sinusoidal embed int x": (
        lambda: posenc.build("sinusoidal", dim=D).embed(torch.ones(B, T, D, dtype=torch.long), POS),
        TypeError,
        "floating",
    ),
    "learned embed bool x": (
        lambda: posenc.build("learned", dim=D).embed(torch.ones(B, T, D, dtype=torch.bool), POS),
        TypeError,
        "floating",
    ),
    # PoPE wrote its polar features back into integer q/k
    "pope rotate int q, k": (
        lambda: posenc.build("pope", head_dim=D, n_heads=H).rotate(
            *(t.long() for t in _qk()), POS, POS
        ),
        TypeError,
        "floating",
    ),
    "PF.pope_polar complex x": (
        lambda: PF.pope_polar(
            torch.ones(T, D, dtype=torch.complex64), torch.ones(T, D), torch.ones(T, D)
        ),
        TypeError,
        "floating",
    ),
    "PF.apply_rope int tables": (
        lambda: PF.apply_rope(
            torch.randn(T, D),
            torch.ones(T, 4, dtype=torch.long),
            torch.zeros(T, 4, dtype=torch.long),
        ),
        TypeError,
        "cos",
    ),
    "PF.rotary_dim negative head_dim": (lambda: PF.rotary_dim(-8, 1.0), ValueError, "head_dim"),
    "PF.rotary_dim float head_dim": (lambda: PF.rotary_dim(8.0, 1.0), TypeError, "head_dim"),
    # relative offsets: fractional, 0-d, bool or unbroadcastable positions
    "PF.relative_offsets float positions": (
        lambda: PF.relative_offsets(POS.float() + 0.5, POS),
        TypeError,
        "integer",
    ),
    "PF.alibi_bias bool positions RuntimeError": (
        lambda: PF.alibi_bias(POS > 0, POS > 0, torch.ones(H)),
        TypeError,
        "integer",
    ),
    "PF.relative_offsets 0-d IndexError": (
        lambda: PF.relative_offsets(torch.tensor(1), POS),
        ValueError,
        "q_pos",
    ),
    "PF.relative_offsets batch mismatch RuntimeError": (
        lambda: PF.relative_offsets(POS[None].expand(2, T), POS[None].expand(3, T)),
        ValueError,
        "batch",
    ),
    "PF.relative_value_output index (1, Tk) broadcast over Tq": (
        lambda: PF.relative_value_output(
            torch.rand(B, H, T, T), torch.randn(5, D), torch.zeros(1, T, dtype=torch.long)
        ),
        ValueError,
        "index",
    ),
    "PF.relative_key_logits index B mismatch RuntimeError": (
        lambda: PF.relative_key_logits(
            torch.randn(B, H, T, D), torch.randn(5, D), torch.zeros(3, T, T, dtype=torch.long)
        ),
        ValueError,
        "index",
    ),
    # extension's pure functions: NaN frequencies or ZeroDivisionError on bad parameters
    "X.linear factor 0 NaN": (lambda: X.linear(_inv_freq(), factor=0.0), ValueError, "factor"),
    "X.ntk factor -2 NaN": (lambda: X.ntk(_inv_freq(), factor=-2.0), ValueError, "factor"),
    "X.dynamic L 0 ZeroDivisionError": (
        lambda: X.dynamic(_inv_freq(), factor=2.0, original_max_position_embeddings=0, seq_len=10),
        ValueError,
        "original_max_position_embeddings",
    ),
    "X.yarn beta_fast 0 ZeroDivisionError": (
        lambda: X.yarn(_inv_freq(), factor=4.0, original_max_position_embeddings=64, beta_fast=0.0),
        ValueError,
        "beta_fast",
    ),
    "X.yarn beta_fast < beta_slow silent": (
        lambda: X.yarn(
            _inv_freq(),
            factor=4.0,
            original_max_position_embeddings=64,
            beta_fast=1.0,
            beta_slow=32.0,
        ),
        ValueError,
        "beta_fast",
    ),
    "X.llama3 low_freq_factor 0 ZeroDivisionError": (
        lambda: X.llama3(
            _inv_freq(),
            factor=8.0,
            low_freq_factor=0.0,
            high_freq_factor=4.0,
            original_max_position_embeddings=64,
        ),
        ValueError,
        "low_freq_factor",
    ),
    "X.longrope zero factor inf": (
        lambda: X.longrope(
            _inv_freq(),
            short_factor=[0.0] * 4,
            long_factor=[1.0] * 4,
            original_max_position_embeddings=64,
            factor=4.0,
        ),
        ValueError,
        "short_factor",
    ),
    "rope longrope scaling L=1 ZeroDivisionError": (
        lambda: posenc.build(
            "rope",
            head_dim=D,
            scaling={
                "rope_type": "longrope",
                "factor": 4.0,
                "original_max_position_embeddings": 1,
                "short_factor": [1.0] * 4,
                "long_factor": [1.0] * 4,
            },
        ),
        ValueError,
        "original_max_position_embeddings",
    ),
    # Attention / TinyTransformer / KVCache / position helpers
    "Attention causal='no' truthy": (lambda: _attention(causal="no"), TypeError, "causal"),
    "Attention bias='no' truthy": (lambda: _attention(bias="no"), TypeError, "bias"),
    "Attention cache list AttributeError": (
        lambda: _attention_call(cache=[KVCache()]),
        TypeError,
        "KVCache",
    ),
    "Attention segment_ids numpy AttributeError": (
        lambda: _attention_call(segment_ids=np.zeros((B, T), np.int64)),
        TypeError,
        "segment_ids",
    ),
    "Attention segment_ids complex silent": (
        lambda: _attention_call(segment_ids=torch.zeros(B, T, dtype=torch.complex64)),
        ValueError,
        "segment_ids",
    ),
    "packed_positions numpy AttributeError": (
        lambda: packed_positions(np.zeros((B, T), np.int64)),
        TypeError,
        "segment_ids",
    ),
    "positions_from_padding list AttributeError": (
        lambda: positions_from_padding([[True, False]]),
        TypeError,
        "padding_mask",
    ),
    "TinyTransformer float idx RuntimeError": (
        lambda: posenc.TinyTransformer(vocab_size=10, pe="rope", d_model=32)(torch.zeros(B, T)),
        TypeError,
        "idx",
    ),
    "KVCache first append pos (T,) IndexError": (
        lambda: KVCache().append(_entry()._replace(pos=torch.arange(1))),
        ValueError,
        "pos",
    ),
    "KVCache append pos batch 1 broadcast": (
        lambda: _second_append(pos_batch=1),
        ValueError,
        "pos",
    ),
    "KVCache append values heads RuntimeError": (
        lambda: _second_append(heads=3),
        ValueError,
        "values",
    ),
    "randomized seed float RuntimeError": (
        lambda: posenc.build("randomized", max_len=32, head_dim=D, seed=1.5),
        TypeError,
        "seed",
    ),
    "randomized sample_in_eval='no' truthy": (
        lambda: posenc.build("randomized", max_len=32, head_dim=D, sample_in_eval="no"),
        TypeError,
        "sample_in_eval",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_raises_a_clear_error(case: str) -> None:
    fn, error, says = CASES[case]
    with pytest.raises(error, match=says):
        fn()


def test_valid_neighbours_of_the_bad_cases_still_work() -> None:
    """The new checks leave valid calls alone: GQA keys in Shaw (unused there), bool segment
    ids, factor 1, dynamic NTK at its boundary, uint8 offsets, a (Tq, Tk) relative index."""
    q, k = _qk(kv_heads=2)
    scores = torch.randn(B, H, T, T)
    assert (
        posenc.build("shaw", head_dim=D).relative_logits(scores, q, k, POS, POS).shape
        == scores.shape
    )
    assert _attention_call(segment_ids=torch.zeros(B, T, dtype=torch.bool)).shape == (B, T, H * D)
    torch.testing.assert_close(X.linear(_inv_freq(), factor=1.0).inv_freq, _inv_freq())
    for L in (1000, 4096, 777):
        for factor in (1.1, 3.3, 7.7):
            got = X.dynamic(
                _inv_freq(), factor=factor, original_max_position_embeddings=L, seq_len=L
            )
            torch.testing.assert_close(got.inv_freq, _inv_freq())
    u8 = torch.tensor([0, 3], dtype=torch.uint8)
    assert PF.relative_offsets(u8, u8).tolist() == [[0, -3], [3, 0]]
    index = PF.shaw_relative_index(POS, POS, max_distance=2)
    out = PF.relative_value_output(torch.rand(B, H, T, T), torch.randn(5, D), index)
    assert out.shape == (B, H, T, D)
    assert PF.relative_offsets(np.arange(3), np.arange(2)).shape == (3, 2)
