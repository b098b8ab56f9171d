"""T5 buckets and bias against transformers' T5Attention and x-transformers."""

from __future__ import annotations

import pytest
import torch

import posenc
from posenc import functional as PF

CONFIGS = [(32, 128), (16, 64), (8, 16), (64, 256), (32, 939), (24, 2058), (6, 5)]


@pytest.mark.anchor
@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize(("num_buckets", "max_distance"), CONFIGS)
def test_buckets_match_hugging_face(
    bidirectional: bool, num_buckets: int, max_distance: int
) -> None:
    from transformers.models.t5.modeling_t5 import T5Attention

    rel = torch.arange(-5000, 5000)
    expected = T5Attention._relative_position_bucket(rel, bidirectional, num_buckets, max_distance)
    torch.testing.assert_close(
        PF.t5_relative_bucket(
            rel, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
        ),
        expected,
    )


@pytest.mark.anchor
@pytest.mark.parametrize("is_decoder", [False, True])
def test_bias_matches_hugging_face_compute_bias(is_decoder: bool) -> None:
    from transformers import T5Config
    from transformers.models.t5.modeling_t5 import T5Attention

    config = T5Config(d_model=32, d_kv=8, num_heads=4, is_decoder=is_decoder)
    theirs = T5Attention(config, has_relative_attention_bias=True)
    torch.nn.init.normal_(theirs.relative_attention_bias.weight)
    ours = posenc.build("t5", n_heads=4, bidirectional=not is_decoder)
    ours.weight.data.copy_(theirs.relative_attention_bias.weight.data)  # same (buckets, H) layout
    Tq, Tk, past = 5, 300, 295  # decoding at an offset: queries 295..299 over keys 0..299
    expected = theirs.compute_bias(Tq, Tk, past_seen_tokens=past)
    got = ours.bias(torch.arange(past, past + Tq), torch.arange(Tk))
    torch.testing.assert_close(got, expected)


@pytest.mark.anchor
@pytest.mark.parametrize("causal", [False, True])
def test_bias_matches_x_transformers(causal: bool) -> None:
    xt = pytest.importorskip("x_transformers.x_transformers")
    theirs = xt.RelativePositionBias(
        scale=1.0, causal=causal, num_buckets=16, max_distance=40, heads=3
    )
    ours = posenc.build("t5", n_heads=3, num_buckets=16, max_distance=40, bidirectional=not causal)
    ours.weight.data.copy_(theirs.relative_attention_bias.weight.data)
    i, j = 7, 90  # x-transformers places the i queries at the last positions j - i .. j - 1
    got = ours.bias(torch.arange(j - i, j), torch.arange(j))[0]
    torch.testing.assert_close(got, theirs(i, j))
    rel = torch.arange(-500, 500)
    expected = xt.RelativePositionBias._relative_position_bucket(rel, causal, 16, 40)
    torch.testing.assert_close(
        PF.t5_relative_bucket(rel, bidirectional=not causal, num_buckets=16, max_distance=40),
        expected,
    )
