"""Encoders get each bias in its published bidirectional form, and every attention backend
computes it as the explicit path does; decoders (KV cache) are unaffected.

ALiBi -m·|i - j| (bidirectional ALiBi models), T5's bidirectional buckets (T5's encoder),
Kerple's kernels of |i - j| (the same in both forms), FIRE normalised by ψ(max(L, i, j))
(posenc's encoder form: the paper defines the causal one).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import posenc
from posenc.attention import backends
from posenc.kernels.fire_fused import KERNEL
from posenc.kernels.flex import flex_bias_attention
from posenc.kernels.toeplitz import toeplitz_bias_attention
from tests.encodings.bias_helpers import fire_reference
from tests.reference import bias as ref

NAMES = ["alibi", "t5", "kerple", "fire"]
OFFSET_ONLY = ["alibi", "t5", "kerple"]


def _encoder_pe(name: str, **config: Any) -> posenc.PositionalEncoding:
    """The encoding an encoder built by name gets: TinyTransformer(causal=False)'s."""
    torch.manual_seed(0)
    model = posenc.TinyTransformer(
        vocab_size=8, pe=name, d_model=32, n_heads=4, causal=False, pe_config=config or None
    )
    pe = model.pe
    with torch.no_grad():  # learned parameters away from their small init
        if name == "t5":
            torch.nn.init.normal_(pe.weight)
        if name == "fire":
            pe.mlp_in.weight.normal_(0.0, 3.0)
            pe.mlp_in.bias.uniform_(-1.5, 1.5)
            pe.mlp_out.weight.normal_(0.0, 2.0)
    return pe


def _reference(name: str, pe: Any, q_pos: torch.Tensor, k_pos: torch.Tensor) -> np.ndarray:
    """The float64 bias (B, H, Tq, Tk) written from the papers (``tests.reference.bias``)."""
    q, k = q_pos.numpy(), k_pos.numpy()
    if name == "alibi":
        return ref.alibi(q, k, ref.alibi_slopes(pe.n_heads), pe.bidirectional)
    if name == "t5":
        table = pe.weight.detach().double().numpy()
        return ref.t5(q, k, table, pe.bidirectional, pe.max_distance)
    if name == "kerple":
        r1, r2 = (t.detach().double().tolist() for t in pe.kernel_parameters())
        return ref.kerple(q, k, r1, r2, pe.variant)
    return fire_reference(pe, q_pos, k_pos)


@pytest.mark.parametrize("name", NAMES)
def test_an_encoder_gets_the_published_form_and_a_decoder_the_causal_one(name: str) -> None:
    """Keys on both sides of the queries (positions 20..25 against 0..44): the bias of an
    encoder's encoding equals the float64 formula of its bidirectional form; ALiBi's, Kerple's
    and FIRE's are symmetric (T5's buckets tell left from right)."""
    pe = _encoder_pe(name)
    assert getattr(pe, "bidirectional", True)  # Kerple has no other form
    q_pos, k_pos = torch.arange(20, 26), torch.arange(45)
    got = pe.bias(q_pos, k_pos).double()  # float32 bias
    expected = torch.from_numpy(_reference(name, pe, q_pos, k_pos))
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    if name in ("alibi", "kerple", "fire"):  # one function of the distance on both sides
        square = pe.bias(torch.arange(30), torch.arange(30))
        torch.testing.assert_close(square, square.transpose(-2, -1), rtol=0, atol=0)
    decoder = posenc.TinyTransformer(vocab_size=8, pe=name, d_model=32, n_heads=4, causal=True)
    assert not getattr(decoder.pe, "bidirectional", False)


@pytest.mark.parametrize("name", ["alibi", "t5", "fire"])
def test_the_causal_form_in_an_encoder_is_a_named_variant(name: str) -> None:
    from posenc.lab.config import run_label

    pe = _encoder_pe(name, bidirectional=False)
    assert not pe.bidirectional
    assert run_label(name, "offset", {"bidirectional": False}) == f"{name} (causal form)"
    assert run_label(name, "offset", {"bidirectional": True}) == name
    assert run_label(name, "offset", {}) == name
    assert run_label(name, "copy", {"bidirectional": False}) == name  # a decoder: its own form


def _explicit(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor
) -> torch.Tensor:
    """float64 softmax(q kᵀ/√D + bias) v with the (B|1, H, T, L) bias whole (no causal mask)."""
    groups = q.shape[1] // k.shape[1]
    k, v = (t.double().repeat_interleave(groups, dim=1) for t in (k, v))
    scores = q.double() @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) + bias.double()
    return torch.softmax(scores, dim=-1) @ v


def _qkv(T: int, L: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(T + L)
    return (
        torch.randn(2, 4, T, 8, generator=g),
        torch.randn(2, 2, L, 8, generator=g),
        torch.randn(2, 2, L, 8, generator=g),
    )


@pytest.mark.parametrize("name", OFFSET_ONLY)
@pytest.mark.parametrize(("T", "L", "a", "b"), [(40, 40, 0, 0), (17, 60, 30, 5), (9, 9, 1000, 996)])
def test_offset_backends_equal_the_explicit_path(name: str, T: int, L: int, a: int, b: int) -> None:
    """Offsets of both signs (keys before and after the queries): the per-offset table read as
    a Toeplitz view and by flex's score_mod (eager form) reproduce the dense symmetric bias."""
    pe = _encoder_pe(name)
    q, k, v = _qkv(T, L)
    q_pos, k_pos = torch.arange(a, a + T), torch.arange(b, b + L)
    with torch.no_grad():
        expected = _explicit(q, k, v, pe.bias(q_pos, k_pos))
        table = backends.offset_table_for(pe, q_pos, k_pos, 4)
        assert table is not None
        toeplitz = toeplitz_bias_attention(q, k, v, table, q_pos, k_pos, causal=False)
        flex = flex_bias_attention(q, k, v, table, q_pos, k_pos, causal=False, compiled=False)
    assert toeplitz is not None and flex is not None
    torch.testing.assert_close(toeplitz.double(), expected, atol=2e-6, rtol=1e-5)
    torch.testing.assert_close(flex.double(), expected, atol=2e-6, rtol=1e-5)


@pytest.mark.skipif(not KERNEL.available(), reason="no C++ toolchain: FIRE runs by blocks")
@pytest.mark.parametrize(
    ("threshold", "a", "b", "fused"),
    [
        (512.0, 0, 0, True),  # every position below L: the normaliser is ψ(L) throughout
        (512.0, 300, 280, True),
        (24.0, 40, 10, True),  # keys 10..39 not past the first query
        (24.0, 0, 0, False),  # keys 25..29 past L = 24 and every query before them
        (24.0, 40, 20, False),
    ],
)
def test_fire_kernel_takes_the_encoder_form_only_where_it_is_exact(
    threshold: float, a: int, b: int, fused: bool
) -> None:
    """The kernel normalises by the query's ψ(max(L, i)): the encoder form's ψ(max(L, i, j))
    agrees when no key lies past max(L, first query), else the kernel declines."""
    pe = _encoder_pe("fire", init_threshold=threshold)
    T, L = 20, 30
    q, k, v = _qkv(T, L)
    q_pos, k_pos = torch.arange(a, a + T), torch.arange(b, b + L)
    with torch.no_grad():
        got = backends.fire_attention(q, k, v, pe, q_pos, k_pos, causal=False, scale=8**-0.5)
    assert (got is not None) == fused
    if got is not None:
        expected = _explicit(q, k, v, torch.from_numpy(fire_reference(pe, q_pos, k_pos)))
        torch.testing.assert_close(got.double(), expected, atol=2e-5, rtol=0)


@pytest.mark.parametrize("name", NAMES)
def test_attention_backends_equal_the_explicit_path(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Attention(causal=False)`` with the encoder form: "auto" (the Toeplitz view for offset
    biases at 256 x 256, FIRE's kernel in inference) and "blocks" (SDPA by query blocks of 64)
    equal the explicit float64 attention; the fast path really ran."""
    ran: list[str] = []

    def spying(run: Any) -> Any:
        def spy(layer: Any, call: Any) -> Any:
            out = run(layer, call)
            if out is not None:
                ran.append(run.__name__)
            return out

        return spy

    spied = [(applies, spying(run)) for applies, run in backends.BACKENDS]
    monkeypatch.setattr(backends, "BACKENDS", spied)
    pe = _encoder_pe(name, init_threshold=512.0) if name == "fire" else _encoder_pe(name)
    auto = posenc.Attention(32, 4, pe=pe, causal=False, n_kv_heads=2)
    blocks = posenc.Attention(
        32, 4, pe=pe, causal=False, n_kv_heads=2, block_size=64, bias_backend="blocks"
    )
    blocks.load_state_dict(auto.state_dict())
    x = torch.randn(2, 256, 32, generator=torch.Generator().manual_seed(1))
    pos = torch.arange(100, 356)
    with torch.no_grad():
        qkv = auto.qkv(x)
        q, k, v = qkv.split([32, 16, 16], dim=-1)
        q, k, v = (t.view(2, 256, -1, 8).transpose(1, 2) for t in (q, k, v))  # (B, H, T, D)
        out = _explicit(q, k, v, pe.bias(pos, pos)).transpose(1, 2).reshape(2, 256, 32)
        expected = auto.proj(out.float())
        got_auto, got_blocks = auto(x, pos), blocks(x, pos)
    torch.testing.assert_close(got_auto, expected, atol=3e-5, rtol=1e-4)
    torch.testing.assert_close(got_blocks, expected, atol=3e-5, rtol=1e-4)
    fast = "_toeplitz" if name in OFFSET_ONLY else "_fused"
    if name == "fire" and not KERNEL.available():
        fast = "_sdpa_blocks"
    assert ran == [fast, "_sdpa_blocks"]


@pytest.mark.parametrize("name", NAMES)
def test_decoders_are_unaffected_and_decode_equals_the_full_forward(name: str) -> None:
    """A decoder with the encoder form set explicitly still decodes token by token as its full
    forward; for ALiBi, Kerple and FIRE it is the causal form itself (they agree on keys j <= i;
    T5's bidirectional buckets split the table, so they differ)."""
    config = {} if name == "kerple" else {"bidirectional": True}

    def model(**kw: Any) -> posenc.TinyTransformer:
        torch.manual_seed(0)
        m = posenc.TinyTransformer(vocab_size=29, pe=name, d_model=32, n_heads=4, **kw)
        return m.double().eval()

    both, causal = model(pe_config=config or None), model()
    idx = torch.randint(0, 29, (2, 11), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        full = both(idx)
        cache = both.new_cache()
        steps = [both(idx[:, :4], cache=cache)] + [
            both(idx[:, t : t + 1], cache=cache) for t in range(4, 11)
        ]
        torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-10, atol=1e-10)
        if name != "t5":
            torch.testing.assert_close(full, causal(idx), rtol=1e-10, atol=1e-10)


def test_one_sided_and_bidirectional_alibi_attend_differently() -> None:
    """The old encoder ALiBi (causal form, bias +m·j per row) and the published one attend
    differently: with equal scores, the one-sided form favours the last key, the bidirectional
    form the query's neighbours."""
    q_pos = k_pos = torch.arange(9)
    scores = torch.zeros(1, 1, 9, 9)
    for bidirectional, expected in ((False, 8), (True, 4)):
        pe = posenc.build("alibi", n_heads=1, bidirectional=bidirectional)
        probs = F.softmax(scores + pe.bias(q_pos, k_pos), dim=-1)
        assert int(probs[0, 0, 4].argmax()) == expected  # query 4's favourite key
