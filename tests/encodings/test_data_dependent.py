"""The registry encodings fox, stick_breaking and path (``posenc.encodings.data_dependent``):
an ``Attention`` layer equals the float64 references written from the papers
(``tests.reference.data_position``) on the layer's own projections; cached decoding equals the
full forward; left padding, padding inside a row and packed sequences attend as if run apart;
what the forms cannot take is refused by name."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import posenc
from posenc.attention import Attention, CrossAttention
from posenc.attention.positions import positions_from_padding
from posenc.encodings.base import AttentionInputs, PositionalEncoding
from posenc.models import EncoderDecoder, TinyTransformer
from posenc.models.kv_cache import KVCache
from tests.reference import data_position as ref

NAMES = ["fox", "stick_breaking", "path"]
C, H, Hkv, T = 16, 4, 2, 7


def layer(name: str, **config: object) -> Attention:
    sizes = {"dim": C, "n_heads": H, "max_len": 64}
    if name == "path":
        config = {"n_kv_heads": Hkv, **config}
    pe = posenc.build_for_model(name, **sizes, **config)  # type: ignore[arg-type]
    return Attention(C, H, pe=pe, causal=True, n_kv_heads=Hkv).double()


def expected(attn: Attention, x: torch.Tensor) -> torch.Tensor:
    """The reference of each paper on the layer's own q, k, v and projections of x."""
    pe = attn.pe
    q, k, v = (t.detach().numpy() for t in attn._project(x))
    B, _, L, D = k.shape
    with torch.no_grad():
        if pe.name == "fox":
            log_f = F.logsigmoid(pe.gate(x)).transpose(1, 2).numpy()  # (B, H, T)
            out = ref.forgetting(q, k, v, log_f)
        elif pe.name == "path":
            w = F.normalize(pe.w_proj(x).view(B, L, Hkv, D), dim=-1).transpose(1, 2).numpy()
            beta = (2 * torch.sigmoid(pe.beta_proj(x))).transpose(1, 2).numpy()
            log_f = None
            if pe.gate is not None:
                log_f = F.logsigmoid(pe.gate(x)).transpose(1, 2).numpy()
            out = ref.path(q, k, v, w, beta, log_f)
        else:
            out, rem = ref.stick_breaking(q, k, v, attend_current=pe.attend_current)
            if pe.remainder:
                out = out + rem[..., None] * np.repeat(v, H // Hkv, axis=1)
        y = torch.from_numpy(out).transpose(1, 2).reshape(B, L, C)
        return attn.proj(y)


@pytest.mark.parametrize(
    ("name", "config"),
    [
        ("fox", {}),
        ("stick_breaking", {}),
        ("stick_breaking", {"attend_current": True, "remainder": False}),
        ("path", {}),
        ("path", {"forget_gate": True}),
    ],
)
def test_layer_equals_the_papers_reference(name: str, config: dict[str, object]) -> None:
    torch.manual_seed(0)
    attn = layer(name, **config)
    x = torch.randn(2, T, C, dtype=torch.float64)
    with torch.no_grad():
        got = attn(x)
    torch.testing.assert_close(got, expected(attn, x), rtol=1e-10, atol=1e-10)


def test_registry_entries_compute_attention_from_the_data() -> None:
    for name in NAMES:
        entry = posenc.info(name)
        assert entry.family == "data_dependent"
        assert entry.cls.capabilities.attention_form
        assert not entry.cls.capabilities.only_rotates
    assert posenc.build("stick_breaking").remainder
    fox = posenc.build("fox", dim=8, n_heads=2)
    assert fox.gate.weight.shape == (2, 8)


def model(name: str, **kw: object) -> TinyTransformer:
    torch.manual_seed(1)
    config: dict[str, object] = {"n_layers": 2, "n_heads": H, "n_kv_heads": Hkv, **kw}
    m = TinyTransformer(vocab_size=13, pe=name, d_model=C, **config)  # type: ignore[arg-type]
    return m.double().eval()


@pytest.mark.parametrize("name", NAMES)
def test_each_layer_has_its_own_projections(name: str) -> None:
    m = model(name, n_layers=3)
    assert len({id(pe) for pe in m.layer_pes}) == 3
    assert len({id(block.attn.pe) for block in m.blocks}) == 3


@pytest.mark.parametrize("name", NAMES)
def test_cached_decode_equals_the_full_forward(name: str) -> None:
    m = model(name)
    idx = torch.randint(0, 13, (2, 11), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        full = m(idx)
        cache = m.new_cache()
        steps = [m(idx[:, a:b], cache=cache) for a, b in ((0, 5), (5, 6), (6, 9), (9, 11))]
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-10, atol=1e-10)
    assert cache[0].terms is not None and cache[0].terms.shape[:2] == (2, 11)


@pytest.mark.parametrize("name", NAMES)
def test_left_padding_attends_as_the_unpadded_row(name: str) -> None:
    m = model(name)
    idx = torch.randint(0, 13, (2, 8), generator=torch.Generator().manual_seed(3))
    mask = torch.ones(2, 8, dtype=torch.bool)
    mask[1, :3] = False  # row 1: three pads, then 5 real tokens
    with torch.no_grad():
        padded = m(idx, positions_from_padding(mask), padding_mask=mask)
        alone = m(idx[1:, 3:])
        row0 = m(idx[:1])
    torch.testing.assert_close(padded[1, 3:], alone[0], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(padded[0], row0[0], rtol=1e-10, atol=1e-10)
    with torch.no_grad():
        got = m.generate(idx, 4, padding_mask=mask)
        want = m.generate(idx[1:, 3:], 4)
    assert torch.equal(got[1], want[0])


@pytest.mark.parametrize("name", NAMES)
def test_padding_inside_a_row_changes_nothing(name: str) -> None:
    """Right padding, then decoding after it: the pads' gates are 1 and their transforms the
    identity, so the continuation equals the unpadded sequence's."""
    m = model(name)
    idx = torch.randint(0, 13, (1, 6), generator=torch.Generator().manual_seed(4))
    mask = torch.tensor([[True] * 4 + [False] * 2])
    with torch.no_grad():
        cache = m.new_cache()
        m(idx, padding_mask=mask, cache=cache)
        after = m(idx[:, 4:], cache=cache)  # the two tokens the pads held, now real
        want = m(idx)[:, 4:]
    torch.testing.assert_close(after, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("name", NAMES)
def test_packed_sequences_attend_as_if_run_apart(name: str) -> None:
    m = model(name)
    idx = torch.randint(0, 13, (1, 9), generator=torch.Generator().manual_seed(5))
    segments = torch.tensor([[0, 0, 0, 0, 1, 1, 1, 1, 1]])
    with torch.no_grad():
        packed = m(idx, segment_ids=segments)
        first, second = m(idx[:, :4]), m(idx[:, 4:])
    torch.testing.assert_close(packed, torch.cat([first, second], 1), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("name", NAMES)
def test_gradients_reach_the_projections_through_cached_decoding(name: str) -> None:
    m = model(name).train()
    idx = torch.randint(0, 13, (2, 6), generator=torch.Generator().manual_seed(6))
    cache = m.new_cache()
    loss = m(idx[:, :4], cache=cache).sum() + m(idx[:, 4:], cache=cache).sum()
    loss.backward()
    full = model(name).train()
    full(idx).sum().backward()
    for (n, p), q in zip(m.named_parameters(), full.parameters(), strict=True):
        assert p.grad is not None and q.grad is not None, n
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-9, atol=1e-9, msg=n)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda pe: Attention(C, H, pe=pe, causal=False), "causal"),
        (lambda pe: Attention(C, H, pe=pe, causal=True, window=4), "sliding window"),
        (lambda pe: Attention(C, H, pe=pe, causal=True, sink_logits=True), "sink logits"),
        (lambda pe: Attention(C, H, pe=pe, causal=True, dropout=0.1), "dropout"),
    ],
)
def test_layers_the_forms_cannot_be_are_refused(make, match: str) -> None:
    for name in NAMES:
        pe = posenc.build_for_model(name, dim=C, n_heads=H, max_len=8)
        with pytest.raises(ValueError, match=f"{name}' computes attention itself.*{match}"):
            make(pe)


@pytest.mark.parametrize("name", NAMES)
def test_calls_the_forms_cannot_take_are_refused(name: str) -> None:
    pe = posenc.build_for_model(name, dim=C, n_heads=H, max_len=8)
    attn = Attention(C, H, pe=pe, causal=True)
    x = torch.randn(1, 3, C)
    with pytest.raises(ValueError, match="no softmax weights"):
        attn(x, return_weights=True)
    with pytest.raises(ValueError, match="a stream"):
        attn(x, cache=KVCache(window=4, sinks=1))
    with pytest.raises(ValueError, match=r"keep=None"):
        attn(x, cache=KVCache(keep=2))
    assert not hasattr(attn, "cross")  # cross-attention is the sibling, which refuses it:
    with pytest.raises(ValueError, match=r"computes attention itself.*causal"):  # causal only
        CrossAttention(C, H, pe=pe)
    with pytest.raises(ValueError, match="causal"):
        EncoderDecoder(src_vocab_size=5, tgt_vocab_size=5, pe=name, d_model=C, n_heads=H)


def test_path_built_for_other_key_heads_says_so() -> None:
    pe = posenc.build_for_model("path", dim=C, n_heads=H, max_len=8)  # n_kv_heads = H
    attn = Attention(C, H, pe=pe, causal=True, n_kv_heads=Hkv)
    with pytest.raises(ValueError, match="build it with the attention's n_kv_heads"):
        attn(torch.randn(1, 3, C))
    with pytest.raises(ValueError, match="n_kv_heads must divide n_heads"):
        posenc.build("path", dim=C, n_heads=4, head_dim=4, n_kv_heads=3)


class _SoftmaxForm(PositionalEncoding):
    """A user's encoding through the hook: causal softmax attention with no gate (log f = 0),
    which is NoPE's attention; its capabilities come from defining ``attention_form``."""

    name = "softmax_form"

    def attention_form(self, inputs: AttentionInputs) -> tuple[torch.Tensor, torch.Tensor]:
        B, H, _, _ = inputs.q.shape
        L = inputs.k.shape[2]
        log_f = inputs.q.new_zeros(B, H, L)
        out = posenc.functional.forgetting_attention(
            inputs.q, inputs.k, inputs.v, log_f, scale=inputs.scale, segment_ids=inputs.segment_ids
        )
        return out, inputs.x.new_zeros(B, L, 0)


def test_the_hook_serves_an_encoding_of_ones_own() -> None:
    assert _SoftmaxForm.capabilities.attention_form  # widened from the hook it defines
    torch.manual_seed(0)
    mine = Attention(C, H, pe=_SoftmaxForm(), causal=True, n_kv_heads=Hkv).double()
    nope = Attention(C, H, pe=posenc.build("nope"), causal=True, n_kv_heads=Hkv).double()
    nope.load_state_dict(mine.state_dict())
    x = torch.randn(2, T, C, dtype=torch.float64)
    mask = torch.ones(2, T, dtype=torch.bool)
    mask[0, :2] = False  # left padding
    with torch.no_grad():
        torch.testing.assert_close(mine(x), nope(x), rtol=1e-10, atol=1e-10)
        got = mine(x, padding_mask=mask)[0, 2:]
        torch.testing.assert_close(got, nope(x, padding_mask=mask)[0, 2:], rtol=1e-10, atol=1e-10)
        cache = KVCache()
        steps = torch.cat([mine(x[:, :3], cache=cache), mine(x[:, 3:], cache=cache)], 1)
    torch.testing.assert_close(steps, nope(x), rtol=1e-10, atol=1e-10)
    with pytest.raises(NotImplementedError, match="does not compute attention itself"):
        posenc.build("nope").attention_form(None)  # type: ignore[arg-type]
