"""EncoderDecoder: encodings placed per paper, cross-attention against a float64 reference
(query and key lengths apart, source padding, GQA, rotation at target/source positions), cached
decoding equal to the full forward for every encoding, padding, gradients, input checks."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

import posenc
from posenc.attention import Attention, CrossAttention, Memory
from posenc.encodings.nope import NoPE
from posenc.models import EncoderDecoder
from tests.reference.rotary import rope as rope_reference

#: Sequence encodings (grid encoders: test_grid_encoder); those computing causal attention from
#: the data (fox, stick_breaking, path) have no encoder: they serve the decoder of a pair.
CAUSAL_ONLY = [n for n in posenc.names(axes=1) if posenc.info(n).cls.capabilities.attention_form]
ALL = [n for n in posenc.names(axes=1) if n not in CAUSAL_ONLY] + [("nope", n) for n in CAUSAL_ONLY]
SV, TV = 11, 13  # source and target vocabularies


def model(name: Any, *, n_kv_heads: int | None = 2, **kw: Any) -> EncoderDecoder:
    """A float64 model in eval mode with weights ten times the 0.02 init (position effects well
    above rounding) and learned position parameters moved off their near-zero init."""
    torch.manual_seed(0)
    m = EncoderDecoder(
        src_vocab_size=SV,
        tgt_vocab_size=TV,
        pe=name,
        d_model=16,
        n_heads=4,
        n_kv_heads=n_kv_heads,
        n_encoder_layers=1,
        n_decoder_layers=2,
        max_len=32,
        **kw,
    ).double()
    with torch.no_grad():
        for key, p in m.named_parameters():
            if "_pe." in key or key.startswith(("encoder_pe", "decoder_pe")):
                p.normal_(std=0.5) if not key.endswith("delta") else p.uniform_(-1.0, 0.0)
            elif p.ndim > 1:
                p.mul_(10.0)
    return m.eval()


def tokens(B: int, T: int, V: int, seed: int) -> torch.Tensor:
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("name", ALL)
def test_cached_decoding_equals_the_full_forward(name: Any) -> None:
    """Source encoded once (padded rows, positions counting real tokens); target prefilled in
    a chunk, then one token at a time through the self-attention cache: the logits of one
    forward over the whole target, to float64 rounding."""
    m = model(name)
    src, tgt = tokens(2, 7, SV, 1), tokens(2, 6, TV, 2)
    src_mask = torch.ones(2, 7, dtype=torch.bool)
    src_mask[1, 5:] = False  # right padding
    src_pos = posenc.positions_from_padding(src_mask)
    with torch.no_grad():
        full = m(src, tgt, src_pos, src_padding_mask=src_mask)
        memory = m.memory(src, src_pos, src_padding_mask=src_mask)
        cache = m.new_cache()
        steps = [m.decode(tgt[:, :3], memory, cache=cache)]
        steps += [m.decode(tgt[:, t : t + 1], memory, cache=cache) for t in range(3, 6)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("name", ALL)
def test_source_padding_changes_nothing_and_gradients_reach_every_parameter(name: Any) -> None:
    """A right-padded source row gives the logits of the unpadded source; training on it sends
    a gradient to every parameter (both encodings, both embeddings, cross-attention)."""
    m = model(name)
    src, tgt = tokens(1, 5, SV, 3), tokens(1, 4, TV, 4)
    padded = torch.cat([src, torch.zeros(1, 3, dtype=torch.long)], dim=1)
    mask = torch.tensor([[True] * 5 + [False] * 3])
    with torch.no_grad():
        want = m(src, tgt)
        got = m(padded, tgt, src_padding_mask=mask)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
    m.train()
    m.loss(padded, tgt[:, :-1], tgt[:, 1:], src_padding_mask=mask).backward()
    for key, p in m.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, f"{name}: {key} got no gradient"


def test_each_encoding_sits_where_its_paper_puts_it() -> None:
    t5 = EncoderDecoder(src_vocab_size=5, tgt_vocab_size=5, pe="t5", d_model=16, n_heads=2)
    assert t5.encoder_pe.bidirectional and not t5.decoder_pe.bidirectional  # Raffel et al.
    assert all(a.attn.causal is False for a in t5.encoder)
    for block in t5.decoder:
        assert block.attn.causal and block.attn.pe is t5.decoder_pe
        assert not block.cross_attn.causal and isinstance(block.cross_attn.pe, NoPE)
    learned = EncoderDecoder(src_vocab_size=5, tgt_vocab_size=5, pe="learned", d_model=16)
    assert learned.encoder_pe is not learned.decoder_pe  # one table per stack
    rope = EncoderDecoder(src_vocab_size=5, tgt_vocab_size=5, pe="rope", cross_rotation=True)
    assert all(b.cross_attn.pe is rope.decoder_pe for b in rope.decoder)
    shared = posenc.build("alibi", n_heads=4)
    one = EncoderDecoder(src_vocab_size=5, tgt_vocab_size=5, pe=shared)
    assert one.encoder_pe is shared and one.decoder_pe is shared


@pytest.mark.parametrize("name", ["sinusoidal", "learned"])
def test_tables_are_added_to_both_embeddings(name: str) -> None:
    """Vaswani et al. 2017: the position table joins the source and the target embeddings.
    Changing the positions changes the encoder states and the decoder's logits."""
    m = model(name)
    src, tgt = tokens(1, 4, SV, 5), tokens(1, 3, TV, 6)
    assert m.encoder_pe.capabilities.embeds and m.decoder_pe.capabilities.embeds
    with torch.no_grad():
        assert not torch.allclose(m.encode(src), m.encode(src, torch.arange(3, 7)))
        memory = m.memory(src)
        assert not torch.allclose(m.decode(tgt, memory), m.decode(tgt, memory, torch.arange(2, 5)))
    nope = model("nope")  # the control: without a table, positions change nothing
    with torch.no_grad():
        torch.testing.assert_close(nope.encode(src), nope.encode(src, torch.arange(3, 7)))


def test_share_embeddings_ties_the_tables() -> None:
    m = EncoderDecoder(src_vocab_size=9, tgt_vocab_size=9, pe="nope", share_embeddings=True)
    assert m.src_tok is m.tgt_tok
    with pytest.raises(ValueError, match="src_vocab_size == tgt_vocab_size"):
        EncoderDecoder(src_vocab_size=9, tgt_vocab_size=8, pe="nope", share_embeddings=True)


def _cross_reference(
    layer: Attention, x: torch.Tensor, mem: torch.Tensor, valid: torch.Tensor, rotate: Any = None
) -> np.ndarray:
    """softmax(q kᵀ / √D) v over valid keys, then the projection, in float64 NumPy from the
    layer's weights: q = x W_q, k = m W_k, v = m W_v (rows of qkv), key heads shared by
    groups of query heads; ``rotate(q, k)`` applied to (B, H, T, D) and (B, Hkv, S, D)."""
    W = layer.qkv.weight.detach().numpy()
    C, H, Hkv, D = layer.d_model, layer.n_heads, layer.n_kv_heads, layer.head_dim
    xs, ms = x.numpy(), mem.numpy()
    B, T, S = xs.shape[0], xs.shape[1], ms.shape[1]
    q = (xs @ W[:C].T).reshape(B, T, H, D).transpose(0, 2, 1, 3)
    k = (ms @ W[C : C + Hkv * D].T).reshape(B, S, Hkv, D).transpose(0, 2, 1, 3)
    v = (ms @ W[C + Hkv * D :].T).reshape(B, S, Hkv, D).transpose(0, 2, 1, 3)
    if rotate is not None:
        q, k = rotate(q, k)
    out = np.zeros((B, H, T, D))
    for b in range(B):
        for h in range(H):
            g = h // (H // Hkv)
            s = q[b, h] @ k[b, g].T / np.sqrt(D)  # (T, S)
            s = np.where(valid[b].numpy()[None, :], s, -np.inf)
            p = np.exp(s - s.max(-1, keepdims=True))
            out[b, h] = (p / p.sum(-1, keepdims=True)) @ v[b, g]
    return out.transpose(0, 2, 1, 3).reshape(B, T, C) @ layer.proj.weight.detach().numpy().T


@pytest.mark.parametrize(("T", "S"), [(1, 9), (5, 3), (4, 4)])
def test_cross_attention_equals_the_formula_for_any_query_and_key_lengths(T: int, S: int) -> None:
    """Queries from the decoder, keys and values from the memory (lengths apart either way),
    one row's source padded, 4 query heads on 2 key/value heads: the float64 formula."""
    torch.manual_seed(0)
    layer = CrossAttention(16, 4, pe=NoPE(), n_kv_heads=2).double()
    x, mem = torch.randn(2, T, 16, dtype=torch.float64), torch.randn(2, S, 16, dtype=torch.float64)
    valid = torch.ones(2, S, dtype=torch.bool)
    if S > 1:
        valid[0, -1] = False  # one padded source token
    memory = layer.project_memory(mem, torch.arange(S), valid)
    got = layer(x, memory).detach().numpy()  # forward: cross
    np.testing.assert_allclose(got, _cross_reference(layer, x, mem, valid), rtol=1e-10, atol=1e-12)


def test_cross_rotation_turns_queries_at_target_and_keys_at_source_positions() -> None:
    """cross_rotation: q rotated at its target position, k at its source position (RoPE,
    Su et al. eq. 13-15, the float64 reference); so scores depend on their difference only."""
    torch.manual_seed(0)
    m = EncoderDecoder(
        src_vocab_size=SV, tgt_vocab_size=TV, pe="rope", d_model=16, n_heads=2, cross_rotation=True
    ).double()
    layer = m.decoder[0].cross_attn
    x, mem = torch.randn(2, 3, 16, dtype=torch.float64), torch.randn(2, 5, 16, dtype=torch.float64)
    tgt_pos, src_pos = torch.tensor([4, 5, 6]), torch.tensor([[0, 1, 2, 3, 4], [2, 3, 4, 5, 6]])
    got = layer.cross(x, layer.project_memory(mem, src_pos), tgt_pos).detach().numpy()

    def rotate(q: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return rope_reference(q, tgt_pos.numpy()), rope_reference(k, src_pos.numpy())

    valid = torch.ones(2, 5, dtype=torch.bool)
    want = _cross_reference(layer, x, mem, valid, rotate)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    shifted = layer.cross(x, layer.project_memory(mem, src_pos + 7), tgt_pos + 7)
    np.testing.assert_allclose(shifted.detach().numpy(), got, rtol=1e-9, atol=1e-12)
    plain = EncoderDecoder(src_vocab_size=SV, tgt_vocab_size=TV, pe="rope", d_model=16, n_heads=2)
    plain.load_state_dict(m.state_dict())
    plain_layer = plain.double().decoder[0].cross_attn
    unrotated = plain_layer.cross(x, plain_layer.project_memory(mem, src_pos), tgt_pos)
    np.testing.assert_allclose(
        unrotated.detach().numpy(), _cross_reference(layer, x, mem, valid), rtol=1e-10, atol=1e-12
    )


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"pe": "alibi", "cross_rotation": True}, ValueError, "only rotates"),
        ({"pe": "randomized", "cross_rotation": True}, ValueError, "only rotates"),
        ({"pe": "rope", "cross_rotation": 1}, TypeError, "cross_rotation"),
        ({"pe": "rope", "n_decoder_layers": 0}, ValueError, "n_decoder_layers"),
        ({"pe": "rope", "src_vocab_size": 2.0}, TypeError, "src_vocab_size"),
        ({"pe": ("rope",)}, TypeError, "pair"),
        ({"pe": posenc.build("nope"), "pe_config": {"a": 1}}, ValueError, "pe_config"),
        ({"pe": "rope", "d_model": 30, "n_heads": 4}, ValueError, "divisible"),
    ],
)
def test_bad_arguments_are_named(kwargs: dict[str, Any], error: type, match: str) -> None:
    args = {"src_vocab_size": 5, "tgt_vocab_size": 5} | kwargs
    with pytest.raises(error, match=match):
        EncoderDecoder(**args)


def test_bad_inputs_are_named() -> None:
    m = EncoderDecoder(src_vocab_size=5, tgt_vocab_size=5, pe="rope", d_model=16, n_heads=2)
    src = torch.randint(0, 5, (2, 4))
    memory = m.memory(src)
    with pytest.raises(TypeError, match="src must be an integer tensor"):
        m.memory(src.float())
    with pytest.raises(ValueError, match="memory must hold 2 decoder layers"):
        m.decode(src, memory[:1])
    with pytest.raises(ValueError, match="the memory's B = 2"):
        m.decode(src[:1], memory)
    with pytest.raises(TypeError, match="memory must be a Memory"):
        m.decoder[0].cross_attn.cross(torch.randn(2, 3, 16), memory[0].keys)  # type: ignore[arg-type]
    assert not hasattr(m.decoder[0].attn, "cross")  # self-attention: its sibling cross-attends
    with pytest.raises(ValueError, match="memory must have C"):
        m.decoder[0].cross_attn.project_memory(torch.randn(2, 4, 8), torch.arange(4))
    assert isinstance(memory[0], Memory)


@pytest.mark.parametrize("grid", ["rope_2d", "sincos_2d"])
def test_grid_encoder_with_a_sequence_decoder(grid: str) -> None:
    """An image encoder (2-D positions, (S, 2)) under a text decoder, as in captioning: the
    memory keeps the grid positions, cached decoding equals the full forward, and another grid
    layout changes the encoder states (the encoding is in use)."""
    size = {"dim": 16, "n_heads": 4, "max_len": 32}
    pe = (posenc.build_for_model(grid, **size), posenc.build_for_model("rope", **size))
    torch.manual_seed(0)
    m = EncoderDecoder(src_vocab_size=SV, tgt_vocab_size=TV, pe=pe, d_model=16).double().eval()
    src, tgt = tokens(2, 6, SV, 8), tokens(2, 4, TV, 9)
    grid_pos = posenc.grid_positions(2, 3)  # (6, 2)
    with torch.no_grad():
        memory = m.memory(src, grid_pos)
        assert memory[0].keys.pos.shape == (2, 6, 2)
        full = m.decode(tgt, memory)
        cache = m.new_cache()
        steps = [m.decode(tgt[:, t : t + 1], memory, cache=cache) for t in range(4)]
        torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-10, atol=1e-10)
        transposed = grid_pos[:, [1, 0]]  # the same cells on a 3 x 2 grid: other offsets
        assert not torch.allclose(m.encode(src, grid_pos), m.encode(src, transposed))
    with pytest.raises(ValueError, match="pass pos of shape"):
        m.memory(src)  # a grid has no default positions
    with pytest.raises(ValueError, match="the decoder needs a sequence encoding"):
        EncoderDecoder(src_vocab_size=SV, tgt_vocab_size=TV, pe=(pe[1], pe[0]), d_model=16)
    with pytest.raises(ValueError, match="cross_rotation needs a sequence encoding"):
        EncoderDecoder(src_vocab_size=SV, tgt_vocab_size=TV, pe=pe, d_model=16, cross_rotation=True)


def test_attention_and_cross_attention_are_siblings() -> None:
    """Neither derives from the other: self-attention has no ``cross``, cross-attention's
    forward is ``cross`` (never causal), and the two share the weights' layout (a cross layer's
    state dict loads into a self-attention layer of the same widths)."""
    assert not issubclass(Attention, CrossAttention) and not issubclass(CrossAttention, Attention)
    self_attn = Attention(16, 4, pe=NoPE(), causal=False, n_kv_heads=2)
    cross = CrossAttention(16, 4, pe=NoPE(), n_kv_heads=2)
    assert not hasattr(self_attn, "cross") and not hasattr(cross, "new_context")
    assert not cross.causal
    self_attn.load_state_dict(cross.state_dict())
    x = torch.randn(2, 5, 16)
    memory = cross.project_memory(x, torch.arange(5))
    torch.testing.assert_close(cross(x, memory), self_attn(x), rtol=1e-6, atol=1e-6)
    with pytest.raises(TypeError, match="pe must be a PositionalEncoding, got str"):
        CrossAttention(16, 4, pe="rope")  # type: ignore[arg-type]
