"""The Flax EncoderDecoder equals torch's with converted weights, and its cached decoding (a
preallocated self-attention cache, the memory computed once) equals its full forward, under
nnx.jit: every sequence encoding (two by default, the others with -m slow)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

import posenc
from posenc.models import EncoderDecoder, LayerSchedule

jax = pytest.importorskip("jax", reason="the [jax] extra is not installed")
nnx = pytest.importorskip("flax.nnx", reason="the [jax] extra is not installed")
import jax.numpy as jnp  # noqa: E402

import posenc.flax as pfx  # noqa: E402

SV, TV = 11, 13
SLOW = pytest.mark.slow
#: Encodings computing causal attention from the data: no encoder form (torch refuses them too).
CAUSAL_ONLY = sorted(n for n, cls in pfx.ENCODINGS.items() if issubclass(cls, pfx.DataDependent))
#: (encoding, cross_rotation): every other encoding, and RoPE rotating cross-attention too.
VARIANTS = [
    (n, False) for n in posenc.names(axes=1) if n in pfx.ENCODINGS and n not in CAUSAL_ONLY
] + [("rope", True)]
#: Run by default: a bias in its encoder form, and rotation of self- and cross-attention (the
#: Flax TinyTransformer's tests cover each hook kind); the others with -m slow.
FAST = {("t5", False), ("rope", True)}
NAMES = [
    pytest.param(*v, id=f"{v[0]}{'-cross' if v[1] else ''}", marks=[] if v in FAST else [SLOW])
    for v in VARIANTS
]


def twins(name: str, **kw: Any) -> tuple[EncoderDecoder, Any]:
    """A torch model (learned position parameters moved off their near-zero init) and its Flax
    twin holding the same weights."""
    torch.manual_seed(0)
    config = {
        "src_vocab_size": SV,
        "tgt_vocab_size": TV,
        "pe": name,
        "d_model": 16,
        "n_heads": 4,
        "n_kv_heads": 2,
        "n_encoder_layers": 1,
        "n_decoder_layers": 2,
        "max_len": 32,
    } | kw
    tm = EncoderDecoder(**config).eval()
    with torch.no_grad():
        for key, p in tm.named_parameters():
            if key.startswith(("encoder_pe", "decoder_pe")):
                p.uniform_(-1.0, 0.0) if key.endswith("delta") else p.normal_(std=0.5)
    fm = pfx.EncoderDecoder(**config, rngs=nnx.Rngs(0))
    fm.eval()
    pfx.load_torch_state_dict(fm, tm.state_dict())
    return tm, fm


def _full_and_cached(fm: Any, src: Any, tgt: Any, mask: Any) -> tuple[Any, Any]:
    """The full forward's logits, and the decoder's: a 3-token prefill then one token at a time
    through a preallocated cache, over the memory computed once."""
    full = fm(src, tgt, src_padding_mask=mask)
    memory = fm.memory(src, src_padding_mask=mask)
    cache = fm.new_cache(capacity=tgt.shape[1])
    steps = [fm.decode(tgt[:, :3], memory, cache=cache)]
    steps += [fm.decode(tgt[:, t : t + 1], memory, cache=cache) for t in range(3, tgt.shape[1])]
    return full, jnp.concatenate(steps, axis=1)


_jitted = nnx.jit(_full_and_cached)


@pytest.mark.parametrize(("name", "cross_rotation"), NAMES)
def test_flax_equals_torch_and_cached_decoding_equals_the_full_forward(
    name: str, cross_rotation: bool
) -> None:
    tm, fm = twins(name, cross_rotation=cross_rotation)
    src = np.random.default_rng(0).integers(0, SV, (2, 7))
    tgt = np.random.default_rng(1).integers(0, TV, (2, 5))
    mask = np.ones((2, 7), dtype=bool)
    mask[1, 5:] = False  # right padding
    with torch.no_grad():
        want = tm(
            torch.from_numpy(src), torch.from_numpy(tgt), src_padding_mask=torch.from_numpy(mask)
        )
    run = _jitted if fm.encoder_pe.jittable and fm.decoder_pe.jittable else _full_and_cached
    full, cached = run(fm, jnp.asarray(src), jnp.asarray(tgt), jnp.asarray(mask))
    np.testing.assert_allclose(np.asarray(full), want.numpy(), rtol=1e-4, atol=3e-5)
    np.testing.assert_allclose(np.asarray(cached), np.asarray(full), rtol=1e-5, atol=1e-5)


@SLOW  # 22 s (a jit compile of 5 layers) at load 12 on the 2-core machine
def test_a_schedule_per_stack_equals_torch() -> None:
    """Per-layer encodings and sliding windows in both stacks (the encoder's bidirectional),
    a learned bias among them: the Flax twin equals torch, its cached decoding the forward."""
    schedule = LayerSchedule(pe=("t5", "rope", "nope_temperature"), window=(3, None))
    tm, fm = twins(schedule, n_encoder_layers=2, n_decoder_layers=3)  # type: ignore[arg-type]
    assert [b.attn.window for b in fm.encoder] == [3, None]
    kinds = [type(b.attn.pe).__name__ for b in fm.decoder]
    assert kinds == ["T5Bias", "RoPE", "NoPETemperature"]
    src = np.random.default_rng(2).integers(0, SV, (2, 7))
    tgt = np.random.default_rng(3).integers(0, TV, (2, 6))
    mask = np.ones((2, 7), dtype=bool)
    mask[0, 6:] = False
    with torch.no_grad():
        want = tm(
            torch.from_numpy(src), torch.from_numpy(tgt), src_padding_mask=torch.from_numpy(mask)
        )
    full, cached = _jitted(fm, jnp.asarray(src), jnp.asarray(tgt), jnp.asarray(mask))
    np.testing.assert_allclose(np.asarray(full), want.numpy(), rtol=1e-4, atol=3e-5)
    np.testing.assert_allclose(np.asarray(cached), np.asarray(full), rtol=1e-5, atol=1e-5)


def test_each_encoding_sits_where_torch_puts_it() -> None:
    small = {"src_vocab_size": 5, "tgt_vocab_size": 5, "d_model": 8, "n_heads": 2}
    small |= {"n_encoder_layers": 1, "n_decoder_layers": 1, "d_ff": 8}
    rope = pfx.EncoderDecoder(pe="rope", cross_rotation=True, **small)
    assert rope.cross_pe is rope.decoder_pe and rope.decoder[0].cross_attn.pe is rope.decoder_pe
    t5 = pfx.EncoderDecoder(pe="t5", **small)
    assert t5.encoder_pe.bidirectional and not t5.decoder_pe.bidirectional
    assert isinstance(t5.cross_pe, pfx.NoPE) and not t5.decoder[0].cross_attn.causal
    shared = pfx.build("alibi", n_heads=2)
    one = pfx.EncoderDecoder(pe=shared, share_embeddings=True, **small)
    assert one.encoder_pe is shared and one.decoder_pe is shared and one.src_tok is one.tgt_tok
    with pytest.raises(ValueError, match="only rotates"):
        pfx.EncoderDecoder(pe="alibi", cross_rotation=True, **small)
    with pytest.raises(TypeError, match="pair"):
        pfx.EncoderDecoder(pe=(shared,), **small)
    grid = pfx.build_for_model("rope_2d", dim=8, n_heads=2, max_len=16)
    with pytest.raises(ValueError, match="the decoder needs a sequence encoding"):
        pfx.EncoderDecoder(pe=(shared, grid), **small)


@pytest.mark.parametrize("name", CAUSAL_ONLY)
def test_an_encoding_of_causal_attention_forms_is_refused_as_torch_refuses_it(name: str) -> None:
    config = {"src_vocab_size": SV, "tgt_vocab_size": TV, "pe": name, "d_model": 16}
    with pytest.raises(ValueError, match="bidirectional layer") as torch_error:
        EncoderDecoder(**config)
    with pytest.raises(ValueError, match="bidirectional layer") as flax_error:
        pfx.EncoderDecoder(**config, rngs=nnx.Rngs(0))
    assert str(flax_error.value) == str(torch_error.value)
