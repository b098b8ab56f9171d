"""Attention and TinyTransformer with every registered encoding: positions, cache, padding."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

import posenc
from posenc.attention import packed_positions, positions_from_padding
from posenc.models import KVCache

ALL = posenc.names(axes=1)  # sequences; grids: test_grid_attention.py
#: Encodings an encoder can take that tell orders apart: not NoPE, nor Llama 4's NoPE with its
#: temperature (NoPE below floor_scale - 1), nor those computing causal attention from the data
#: (fox, stick_breaking, path: no encoder form).
ORDERED = [
    n
    for n in ALL
    if n not in ("nope", "nope_temperature") and not posenc.info(n).cls.capabilities.attention_form
]


def _model(
    name: str, *, causal: bool = True, n_kv_heads: int | None = None, **kw
) -> posenc.TinyTransformer:  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    model = posenc.TinyTransformer(
        vocab_size=23,
        pe=name,
        d_model=32,
        n_heads=4,
        n_kv_heads=n_kv_heads,
        causal=causal,
        max_len=64,
        **kw,
    ).double()
    # larger weights than the 0.02 init so position effects are far above rounding
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(10.0 if p.ndim > 1 else 1.0)
    return model.eval()


def _tokens(B: int = 2, T: int = 12) -> torch.Tensor:
    return torch.randint(0, 23, (B, T), generator=torch.Generator().manual_seed(5))


def test_encoder_without_positions_is_permutation_equivariant() -> None:
    model, idx = _model("nope", causal=False), _tokens()
    perm = torch.randperm(idx.shape[1], generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(model(idx[:, perm]), model(idx)[:, perm])


@pytest.mark.parametrize("name", ORDERED)
def test_encoder_with_positions_is_not_permutation_equivariant(name: str) -> None:
    model, idx = _model(name, causal=False), _tokens()
    perm = torch.randperm(idx.shape[1], generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        err = (model(idx[:, perm]) - model(idx)[:, perm]).abs().max().item()
    assert err > 1e-3, f"{name}: output unchanged by permutation ({err:.2e})"


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("n_kv_heads", [None, 2])
def test_kv_cache_decoding_equals_full_forward(name: str, n_kv_heads: int | None) -> None:
    model, idx = _model(name, n_kv_heads=n_kv_heads), _tokens()
    with torch.no_grad():
        full = model(idx)
        cache = model.new_cache()
        steps = [model(idx[:, :5], cache=cache)]
        steps += [model(idx[:, t : t + 1], cache=cache) for t in range(5, idx.shape[1])]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-10, rtol=1e-10)
    assert len(cache[0]) == idx.shape[1]


@pytest.mark.parametrize("name", ALL)
def test_explicit_default_positions_equal_none(name: str) -> None:
    model, idx = _model(name), _tokens()
    with torch.no_grad():
        torch.testing.assert_close(model(idx, torch.arange(12)), model(idx))
        torch.testing.assert_close(model(idx, torch.arange(12).expand(2, 12)), model(idx))


@pytest.mark.parametrize("name", ALL)
def test_left_padded_batch_equals_unpadded_rows(name: str) -> None:
    model, idx = _model(name), _tokens()
    lengths = [12, 7]
    padded = torch.zeros(2, 12, dtype=torch.long)
    mask = torch.zeros(2, 12, dtype=torch.bool)
    for b, n in enumerate(lengths):
        padded[b, 12 - n :], mask[b, 12 - n :] = idx[b, :n], True
    pos = positions_from_padding(mask)
    with torch.no_grad():
        out = model(padded, pos, padding_mask=mask)
        for b, n in enumerate(lengths):
            torch.testing.assert_close(out[b, 12 - n :], model(idx[b : b + 1, :n])[0])
    assert torch.isfinite(out).all()


def test_positions_from_padding_gives_padding_position_zero_on_either_side() -> None:
    """As documented: real tokens count from 0, every padding token (left, right or between)
    gets position 0."""
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 0, 0], [0, 1, 0, 1, 1]], dtype=torch.bool)
    assert positions_from_padding(mask).tolist() == [
        [0, 0, 0, 1, 2],
        [0, 1, 2, 0, 0],
        [0, 0, 0, 1, 2],
    ]


@pytest.mark.parametrize("name", ALL)
def test_packed_sequences_equal_separate_sequences(name: str) -> None:
    model, idx = _model(name), _tokens(B=1, T=12)
    segments = torch.tensor([[0, 0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 2]])
    pos = packed_positions(segments)
    assert pos.tolist() == [[0, 1, 2, 3, 4, 0, 1, 2, 0, 1, 2, 3]]
    with torch.no_grad():
        packed = model(idx, pos, segment_ids=segments)
        for lo, hi in [(0, 5), (5, 8), (8, 12)]:
            torch.testing.assert_close(packed[:, lo:hi], model(idx[:, lo:hi]))


@pytest.mark.parametrize("name", ALL)
def test_offset_positions_decode_like_a_continuation(name: str) -> None:
    """Decoding after a prefix: position ids advance by one from the prefix length (seed 002)."""
    model, idx = _model(name), _tokens(B=1, T=10)
    cache = model.new_cache()
    with torch.no_grad():
        model(idx[:, :6], cache=cache)
        step = model(idx[:, 6:7], posenc.decode_positions(6, 1), cache=cache)
        torch.testing.assert_close(step, model(idx[:, :7])[:, 6:7])


def test_attention_sdpa_path_equals_explicit_formula_with_gqa() -> None:
    torch.manual_seed(0)
    rope = posenc.build("rope", head_dim=8)
    attn = posenc.Attention(32, 4, pe=rope, causal=True, n_kv_heads=2).double()
    x = torch.randn(2, 6, 32, dtype=torch.float64)
    pos = torch.arange(6)
    q, k, v = attn.qkv(x).split([32, 16, 16], dim=-1)
    q = q.view(2, 6, 4, 8).transpose(1, 2)
    k = k.view(2, 6, 2, 8).transpose(1, 2).repeat_interleave(2, dim=1)
    v = v.view(2, 6, 2, 8).transpose(1, 2).repeat_interleave(2, dim=1)
    q, k = rope.rotate(q, k, pos, pos)
    scores = q @ k.transpose(-2, -1) / math.sqrt(8)
    scores = scores.masked_fill(torch.ones(6, 6, dtype=torch.bool).triu(1), float("-inf"))
    expected = attn.proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(2, 6, 32))
    torch.testing.assert_close(attn(x, pos), expected)


@pytest.mark.parametrize("name", ALL)
def test_gradients_reach_every_parameter(name: str) -> None:
    model = posenc.TinyTransformer(vocab_size=23, pe=name, d_model=32, n_heads=4, max_len=64)
    model.train()
    idx = _tokens()
    model.loss(idx[:, :-1], idx[:, 1:]).backward()
    for pname, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, f"{name}: no gradient for {pname}"


@pytest.mark.slow
@pytest.mark.parametrize("name", ALL)
def test_torch_compile_runs(name: str) -> None:
    model = _model(name).float()
    idx = _tokens()
    compiled = torch.compile(model)
    with torch.no_grad():
        torch.testing.assert_close(compiled(idx), model(idx), atol=1e-4, rtol=1e-4)


def test_torch_compile_runs_rope_quick() -> None:
    """One compiled forward+backward in the default suite (the per-encoding sweep is slow)."""
    model = posenc.TinyTransformer(vocab_size=23, pe="rope", d_model=32, n_heads=4, n_layers=1)
    idx = _tokens()
    compiled = torch.compile(model)
    out = compiled(idx)
    out.sum().backward()
    torch.testing.assert_close(out, model(idx))


def test_attention_bad_inputs() -> None:
    rope = posenc.build("rope", head_dim=8)
    with pytest.raises(ValueError, match="d_model must be divisible by n_heads, got 30 and 4"):
        posenc.Attention(30, 4, pe=rope, causal=True)
    with pytest.raises(ValueError, match="n_heads must be divisible by n_kv_heads"):
        posenc.Attention(32, 4, pe=rope, causal=True, n_kv_heads=3)
    with pytest.raises(TypeError, match="pe must be a PositionalEncoding, got str"):
        posenc.Attention(32, 4, pe="rope", causal=True)  # type: ignore[arg-type]
    attn = posenc.Attention(32, 4, pe=rope, causal=True)
    x = torch.randn(2, 5, 32)
    with pytest.raises(ValueError, match=r"x must have shape \(B, T, C\)"):
        attn(x[0])
    with pytest.raises(ValueError, match="x must have C = d_model = 32 features, got 16"):
        attn(x[..., :16])
    with pytest.raises(TypeError, match="pos must be an integer tensor"):
        attn(x, torch.arange(5.0))
    with pytest.raises(ValueError, match=r"pos must have shape \(5,\) or \(2, 5\), got \(4,\)"):
        attn(x, torch.arange(4))
    with pytest.raises(ValueError, match="padding_mask must be a bool tensor of shape"):
        attn(x, padding_mask=torch.ones(2, 5))


def test_absolute_encodings_bad_inputs() -> None:
    learned = posenc.build("learned", dim=8, max_len=16)
    x = torch.zeros(1, 4, 8)
    with pytest.raises(ValueError, match=r"position 16 is past the learned table \(max_len=16"):
        learned.embed(x, torch.arange(13, 17))
    with pytest.raises(ValueError, match="must be >= 0 for an absolute encoding, got min -1"):
        learned.embed(x, torch.arange(-1, 3))
    sinus = posenc.build("sinusoidal", dim=8)
    with pytest.raises(ValueError, match="must be >= 0 for an absolute encoding"):
        sinus.embed(x, torch.arange(-2, 2))
    with pytest.raises(ValueError, match="x must have C = dim = 8 features, got 6"):
        sinus.embed(torch.zeros(1, 4, 6), torch.arange(4))
    with pytest.raises(ValueError, match="dim must be an integer >= 1, got 0"):
        posenc.build("sinusoidal", dim=0)  # (an odd dim is allowed: a last sine column)


def test_absolute_encodings_match_reference() -> None:
    from tests.reference.absolute import sinusoidal as ref

    x = torch.zeros(2, 5, 16, dtype=torch.float64)
    pos = torch.tensor([[0, 1, 2, 3, 4], [10, 20, 30, 40, 50]])
    out = posenc.build("sinusoidal", dim=16, base=100.0).embed(x, pos)
    table = torch.from_numpy(ref(51, 16, 100.0))
    torch.testing.assert_close(out, table[pos])
    scaled = posenc.build("sinusoidal", dim=16, base=100.0, scale=0.02).embed(x, pos)
    torch.testing.assert_close(scaled, 0.02 * table[pos])
    with pytest.raises(ValueError, match=r"scale must be a finite number > 0, got 0\.0"):
        posenc.build("sinusoidal", dim=16, scale=0.0)
    learned = posenc.build("learned", dim=16, max_len=64).double()
    torch.testing.assert_close(learned.embed(x, pos), learned.weight[pos])
    assert 0.01 < learned.weight.std().item() < 0.03  # GPT-2 init N(0, 0.02^2)


def test_kv_cache_fed_another_dtype_raises_naming_both() -> None:
    """Keys of another dtype would be cast silently into the cache, which then fails inside
    attention (query and key dtypes differ): the cache names the mismatch instead."""
    torch.manual_seed(0)
    attn = posenc.Attention(32, 4, pe=posenc.build("rope", head_dim=8), causal=True)
    x = torch.randn(2, 5, 32)
    cache = KVCache()
    attn(x, cache=cache)
    expected = r"KVCache holds torch\.float32 keys/values; new ones are torch\.float64"
    with pytest.raises(TypeError, match=expected):
        attn.double()(x[:, :1].double(), cache=cache)
    assert len(cache) == 5


class _DistanceBias(posenc.PositionalEncoding):
    """A test-only score bias, -slope_h * |i - j| + 0.1 * j, to exercise the bias path."""

    def __init__(self, n_heads: int) -> None:
        super().__init__()
        self.slopes = torch.linspace(0.1, 1.0, n_heads, dtype=torch.float64)

    def bias(self, q_pos: torch.Tensor, k_pos: torch.Tensor, **_: Any) -> torch.Tensor:
        dist = (q_pos[..., :, None] - k_pos[..., None, :]).abs().double().unsqueeze(-3)
        out = -self.slopes[:, None, None] * dist + 0.1 * k_pos[..., None, None, :]
        return out if out.ndim == 4 else out[None]  # (B|1, H, Tq, Tk)


@pytest.mark.parametrize("causal", [True, False])
def test_blockwise_bias_equals_whole_bias(causal: bool) -> None:
    torch.manual_seed(0)
    pe = _DistanceBias(4)
    whole = posenc.Attention(32, 4, pe=pe, causal=causal, n_kv_heads=2, block_size=1024).double()
    blocks = posenc.Attention(32, 4, pe=pe, causal=causal, n_kv_heads=2, block_size=3).double()
    blocks.load_state_dict(whole.state_dict())
    x = torch.randn(2, 11, 32, dtype=torch.float64)
    pos = torch.tensor(
        [[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10], [5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]]
    )
    torch.testing.assert_close(blocks(x, pos), whole(x, pos))
    mask = torch.ones(2, 11, dtype=torch.bool)
    mask[1, :4] = False
    got, want = blocks(x, pos, padding_mask=mask), whole(x, pos, padding_mask=mask)
    torch.testing.assert_close(got[mask], want[mask])  # padding queries' outputs are unused
    # explicit formula: softmax(q k^T / sqrt(d) + bias) over allowed keys
    q, k, v = whole.qkv(x).split([32, 16, 16], dim=-1)
    q = q.view(2, 11, 4, 8).transpose(1, 2)
    k = k.view(2, 11, 2, 8).transpose(1, 2).repeat_interleave(2, dim=1)
    v = v.view(2, 11, 2, 8).transpose(1, 2).repeat_interleave(2, dim=1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(8) + pe.bias(pos, pos)
    if causal:
        scores = scores.masked_fill(torch.ones(11, 11, dtype=torch.bool).triu(1), float("-inf"))
    expected = whole.proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(2, 11, 32))
    torch.testing.assert_close(blocks(x, pos), expected)


def test_blockwise_bias_with_kv_cache_prefill_and_decode() -> None:
    torch.manual_seed(0)
    attn = posenc.Attention(32, 4, pe=_DistanceBias(4), causal=True, block_size=4).double()
    x = torch.randn(1, 13, 32, dtype=torch.float64)
    full = attn(x)
    cache = KVCache()
    parts = [attn(x[:, :9], cache=cache)] + [
        attn(x[:, t : t + 1], cache=cache) for t in range(9, 13)
    ]
    torch.testing.assert_close(torch.cat(parts, dim=1), full)
    cache = KVCache()
    attn(x[:, :2], cache=cache)
    torch.testing.assert_close(attn(x[:, 2:], cache=cache), full[:, 2:])  # 11 queries, offset 2


@pytest.mark.parametrize("name", ["shaw", "transformer_xl", "cope"])
@pytest.mark.parametrize("causal", [True, False])
def test_explicit_attention_by_query_blocks_equals_whole(name: str, causal: bool) -> None:
    """Relative-term encodings attend one query block at a time (causal blocks stop at their
    last query's keys): outputs and every gradient equal the one-block computation, with
    per-row positions, padding and packed segments."""
    from posenc.registry import build_for_model

    torch.manual_seed(0)
    pe = build_for_model(name, dim=32, n_heads=4, max_len=64).double()
    whole = posenc.Attention(32, 4, pe=pe, causal=causal, n_kv_heads=2, block_size=1024).double()
    blocks = posenc.Attention(32, 4, pe=pe, causal=causal, n_kv_heads=2, block_size=3).double()
    blocks.load_state_dict(whole.state_dict())
    x = torch.randn(2, 11, 32, dtype=torch.float64, requires_grad=True)
    pos = torch.stack([torch.arange(11), torch.arange(11) + 5])
    mask = torch.ones(2, 11, dtype=torch.bool)
    mask[1, :4] = False
    segments = torch.tensor([[0] * 6 + [1] * 5, [0] * 11])
    for kwargs in ({}, {"padding_mask": mask}, {"segment_ids": segments}):
        got, want = blocks(x, pos, **kwargs), whole(x, pos, **kwargs)
        keep = kwargs.get("padding_mask", torch.ones(2, 11, dtype=torch.bool))
        torch.testing.assert_close(got[keep], want[keep])
    weights = torch.randn(2, 11, 32, dtype=torch.float64)
    grads = []
    for layer in (blocks, whole):
        x.grad = None
        pe.zero_grad(set_to_none=True)
        (layer(x, pos) * weights).sum().backward()
        grads.append([x.grad.clone(), *(p.grad.clone() for p in pe.parameters())])
    for got_grad, want_grad in zip(*grads, strict=True):
        torch.testing.assert_close(got_grad, want_grad)


@pytest.mark.parametrize("name", ["shaw", "transformer_xl", "cope"])
def test_explicit_attention_by_blocks_with_kv_cache(name: str) -> None:
    from posenc.registry import build_for_model

    torch.manual_seed(0)
    pe = build_for_model(name, dim=32, n_heads=4, max_len=64).double()
    attn = posenc.Attention(32, 4, pe=pe, causal=True, block_size=4).double()
    x = torch.randn(1, 13, 32, dtype=torch.float64)
    full = attn(x)
    cache = KVCache()
    parts = [attn(x[:, :9], cache=cache)] + [
        attn(x[:, t : t + 1], cache=cache) for t in range(9, 13)
    ]
    torch.testing.assert_close(torch.cat(parts, dim=1), full)


@pytest.mark.parametrize("name", ALL)
def test_empty_sequence_gives_empty_logits_and_leaves_the_cache_right(name: str) -> None:
    model, tokens = _model(name), _tokens(2, 5)
    assert model(tokens[:, :0]).shape == (2, 0, 23)
    cache = model.new_cache()
    model(tokens[:, :0], cache=cache)  # an empty step: nothing cached
    step = torch.cat([model(tokens[:, :3], cache=cache), model(tokens[:, 3:], cache=cache)], 1)
    torch.testing.assert_close(step, model(tokens))


@pytest.mark.parametrize(
    ("name", "config", "message"),
    [
        ("alibi", {"n_heads": 4}, "has n_heads=4, attention has 8 heads"),
        ("fire", {"n_heads": 4}, "has n_heads=4, attention has 8 heads"),
        ("rope", {"head_dim": 32}, "has head_dim=32, attention's heads have d_model / n_heads = 8"),
    ],
)
def test_encoding_built_for_other_heads_is_refused_at_construction(
    name: str, config: dict[str, int], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        posenc.Attention(64, 8, pe=posenc.build(name, **config), causal=True)
    shared = posenc.build(name, **{**config, "n_heads": 1}) if "n_heads" in config else None
    if shared is not None:  # one set of biases shared by all heads stays allowed
        posenc.Attention(64, 8, pe=shared, causal=True)


@pytest.mark.parametrize(
    ("name", "config"),
    [
        ("sinusoidal", {}),
        ("learned", {}),
        ("randomized", {"base_encoding": "sinusoidal", "max_len": 64}),
        ("sincos_2d", {}),
    ],
)
def test_additive_encoding_in_a_bare_layer_is_refused_not_ignored(
    name: str, config: dict[str, Any]
) -> None:
    """A layer never calls ``embed``: around an additive encoding it would equal NoPE, so it
    refuses unless told the input holds the embedding (what the models do)."""
    pe = posenc.build(name, dim=64, **config)
    with pytest.raises(ValueError, match="an additive encoding is applied to token embeddings"):
        posenc.Attention(64, 8, pe=pe, causal=True)
    layer = posenc.Attention(64, 8, pe=pe, causal=True, embedded=True)
    assert layer.embedded
    with pytest.raises(TypeError, match="embedded must be a bool"):
        posenc.Attention(64, 8, pe=pe, causal=True, embedded=1)  # type: ignore[arg-type]


def test_layers_of_other_encodings_and_models_with_additive_ones_are_built() -> None:
    rotary = posenc.build("randomized", base_encoding="rope", head_dim=8, max_len=64)
    posenc.Attention(64, 8, pe=rotary, causal=True)  # rotates only: nothing to embed
    posenc.Attention(64, 8, pe=posenc.build("alibi", n_heads=8), causal=True)
    model = _model("sinusoidal")  # the model embeds, then hands the encoding to its layers
    assert all(block.attn.embedded for block in model.blocks)
    idx = _tokens()
    nope = _model("nope")
    nope.load_state_dict(model.state_dict())
    with torch.no_grad():
        assert (model(idx) - nope(idx)).abs().max() > 1e-3  # the table reaches the logits


def _explicit_reference(attn: posenc.Attention, x: torch.Tensor, pos: torch.Tensor) -> Any:
    """softmax(rotate(q)·rotate(k)/√D + bias, causal mask, relative logits) by hand, from the
    layer's projections and the encoding's hooks; weights (B, H, T, T)."""
    q, k, _ = attn._project(x)
    q, k = attn.pe.rotate(q, k, pos, pos)
    k = k.repeat_interleave(attn.n_heads // attn.n_kv_heads, dim=1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(attn.head_dim)
    bias = attn.pe.bias(pos, pos)
    scores = scores if bias is None else scores + bias
    T = x.shape[1]
    scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), -math.inf)
    scores = attn.pe.relative_logits(scores, q, k, pos, pos)
    return torch.softmax(scores, dim=-1)


@pytest.mark.parametrize("name", ["nope", "rope", "alibi", "t5", "fire", "shaw", "cope"])
def test_return_weights_are_the_softmax_of_the_explicit_scores(name: str) -> None:
    """``return_weights=True``: (y, weights (B, H, T, T)); the weights equal the softmax of the
    scores written out here, y equals the default (fast path) output and weights @ v (plus
    the relative values) projected."""
    torch.manual_seed(0)
    pe = posenc.build_for_model(name, dim=32, n_heads=4, max_len=64)
    attn = posenc.Attention(32, 4, pe=pe, causal=True, n_kv_heads=2).double().eval()
    x = torch.randn(2, 70, 32, dtype=torch.float64)  # 70² bias entries: Toeplitz/fused paths
    pos = torch.arange(70) % 64 if name == "cope" else torch.arange(70)
    with torch.no_grad():
        y, weights = attn(x, pos, return_weights=True)
        fast = attn(x, pos)
        want = _explicit_reference(attn, x, pos)
        _, _, v = attn._project(x)
        out = weights @ v.repeat_interleave(2, dim=1)
        extra = pe.relative_values(weights, pos, pos)
        out = out if extra is None else out + extra
    assert weights.shape == (2, 4, 70, 70)
    torch.testing.assert_close(weights, want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(y, fast, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(attn.proj(out.transpose(1, 2).reshape(2, 70, 32)), y)


def test_return_weights_with_a_cache_cover_every_key_seen() -> None:
    torch.manual_seed(0)
    attn = posenc.Attention(32, 4, pe=posenc.build("rope", head_dim=8), causal=True).double()
    x = torch.randn(1, 7, 32, dtype=torch.float64)
    with torch.no_grad():
        _, full = attn(x, return_weights=True)
        cache = KVCache()
        attn(x[:, :6], cache=cache)
        _, last = attn(x[:, 6:], cache=cache, return_weights=True)
    assert last.shape == (1, 4, 1, 7)
    torch.testing.assert_close(last[:, :, 0], full[:, :, 6])


@pytest.mark.parametrize("kernel", ["eager", "cpp"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", ["rope", "rope_2d"])
def test_inference_rotates_fresh_projections_in_place(
    name: str, dtype: torch.dtype, kernel: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without autograd the layers rotate their own q and k in place (no new tensors), and the
    logits are the out-of-place path's (autograd on) bit for bit."""
    torch.manual_seed(0)
    model = posenc.TinyTransformer(
        vocab_size=23, pe=name, pe_config={"kernel": kernel}, d_model=32, n_heads=4, n_layers=2
    )
    model = model.to(dtype).eval()
    seen: list[bool] = []
    rotate = type(model.pe).rotate

    def spy(self: Any, *args: Any, inplace: bool = False, **kwargs: Any) -> Any:
        seen.append(inplace)
        return rotate(self, *args, inplace=inplace, **kwargs)

    monkeypatch.setattr(type(model.pe), "rotate", spy)
    idx = _tokens()
    grid = torch.stack(torch.meshgrid(torch.arange(3), torch.arange(4), indexing="ij"), -1)
    pos = grid.reshape(12, 2) if name == "rope_2d" else None  # (T, 2) grid positions
    out_of_place = model(idx, pos)
    assert seen == [False, False]
    seen.clear()
    with torch.no_grad():
        in_place = model(idx, pos)
    assert seen == [True, True]
    assert torch.equal(in_place, out_of_place)
