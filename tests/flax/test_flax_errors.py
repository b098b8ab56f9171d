"""posenc.flax: bad input raises ValueError/TypeError saying what was expected; the core package
never imports JAX."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

jax = pytest.importorskip("jax", reason="the [jax] extra is not installed")
nnx = pytest.importorskip("flax.nnx", reason="the [jax] extra is not installed")
import jax.numpy as jnp  # noqa: E402

import posenc.flax as pfx  # noqa: E402
from posenc import functional as PF  # noqa: E402
from posenc.models import TinyTransformer  # noqa: E402


def test_core_import_never_imports_jax() -> None:
    code = (
        "import sys, posenc, posenc.functional, posenc.attention, posenc.encodings\n"
        "from posenc.registry import build; build('rope', head_dim=8)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'flax'))\n"
        "assert not bad, bad"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_flax_without_jax_says_how_to_install() -> None:
    code = (
        "import sys; sys.modules['jax'] = None\n"  # as if JAX were not installed
        "try:\n    import posenc.flax\nexcept ImportError as e:\n    print(e)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert "pip install 'posenc[jax]'" in done.stdout, done.stdout + done.stderr


def test_registry_names_match_torch_and_build_validates_keys() -> None:
    from posenc.registry import names

    assert set(pfx.ENCODINGS) == set(names()), "every torch encoding has a Flax twin"
    with pytest.raises(ValueError, match="unknown Flax encoding 'nope2'"):
        pfx.build("nope2")
    with pytest.raises(ValueError, match=r"unknown keys \['heads'\]"):
        pfx.build("alibi", heads=4)
    assert isinstance(pfx.build("rope", head_dim=8, rngs=nnx.Rngs(0)), pfx.RoPE)


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: pfx.Sinusoidal(dim=0), ValueError, "dim must be an integer >= 1, got 0"),
        (lambda: pfx.Learned(dim=4, max_len=0), ValueError, "max_len must be an integer >= 1"),
        (lambda: pfx.RoPE(head_dim=8, layout="twisted"), ValueError, "layout must be one of"),
        (lambda: pfx.RoPE(head_dim=8, kv_policy="x"), ValueError, "kv_policy must be one of"),
        (lambda: pfx.ALiBi(n_heads=2, slopes=[0.5]), ValueError, "n_heads=2 values, got 1"),
        (lambda: pfx.ALiBi(n_heads=2, bidirectional=1), TypeError, "bidirectional must be a bool"),
        (lambda: pfx.T5Bias(n_heads=2, max_distance=4), ValueError, "max_distance must be > 16"),
        (lambda: pfx.Kerple(n_heads=2, variant="exp"), ValueError, "variant must be one of"),
        (lambda: pfx.Kerple(n_heads=2, variant="power", init_r2=3.0), ValueError, r"\(0, 2.0\]"),
        (lambda: pfx.FIRE(n_heads=2, hidden=0), ValueError, "hidden must be an integer >= 1"),
        (lambda: pfx.Shaw(head_dim=4, values=1), TypeError, "values must be a bool"),
        (lambda: pfx.TransformerXL(dim=7, n_heads=1), ValueError, "positive even integer"),
        (lambda: pfx.XPos(head_dim=8, gamma=0.0), ValueError, "gamma must be a finite number"),
        (lambda: pfx.PoPE(head_dim=8, n_heads=2, phase_bias=0), TypeError, "phase_bias must"),
        (lambda: pfx.CoPE(head_dim=8, n_positions=1), ValueError, "n_positions must be an"),
        (
            lambda: pfx.Attention(6, 4, pe=pfx.NoPE(), causal=True, rngs=nnx.Rngs(0)),
            ValueError,
            "d_model must be divisible by n_heads",
        ),
        (
            lambda: pfx.Attention(8, 4, pe="rope", causal=True, rngs=nnx.Rngs(0)),
            TypeError,
            "pe must be a posenc.flax PositionalEncoding, got str",
        ),
    ],
)
def test_constructor_errors(make: object, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        make()  # type: ignore[operator]


def test_position_errors() -> None:
    x = jnp.zeros((2, 3, 4))
    with pytest.raises(TypeError, match="integer array, got dtype float32"):
        pfx.Sinusoidal(dim=4).embed(x, jnp.zeros(3))
    with pytest.raises(ValueError, match=r"shape \(3,\) or \(2, 3\), got \(4,\)"):
        pfx.Sinusoidal(dim=4).embed(x, jnp.arange(4))
    with pytest.raises(ValueError, match="must be >= 0 for an absolute encoding"):
        pfx.Sinusoidal(dim=4).embed(x, jnp.array([-1, 0, 1]))
    with pytest.raises(ValueError, match="position 9 is past the learned table"):
        pfx.Learned(dim=4, max_len=8).embed(x, jnp.array([7, 8, 9]))
    with pytest.raises(ValueError, match=r"must agree on B"):
        pfx.ALiBi(n_heads=2).bias(jnp.zeros((2, 3), int), jnp.zeros((3, 3), int))


def test_dynamic_rope_scaling_under_jit_says_why() -> None:
    dynamic = {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 4}
    pe = pfx.RoPE(head_dim=4, scaling=dynamic)
    q = jnp.ones((1, 1, 3, 4))
    pe.rotate(q, q, jnp.arange(3), jnp.arange(3))  # eager: fine
    with pytest.raises(ValueError, match="needs concrete positions"):
        jax.jit(lambda p: pe.rotate(q, q, p, p))(jnp.arange(3))


def test_transformer_xl_under_jit_says_why() -> None:
    pe = pfx.TransformerXL(dim=8, n_heads=2)
    q, scores = jnp.ones((1, 2, 3, 4)), jnp.zeros((1, 2, 3, 3))
    with pytest.raises(ValueError, match="needs concrete positions"):
        jax.jit(lambda p: pe.relative_logits(scores, q, q, p, p))(jnp.arange(3))


def test_attention_mask_errors() -> None:
    attn = pfx.Attention(8, 2, pe=pfx.NoPE(), causal=True, rngs=nnx.Rngs(0))
    x = jnp.zeros((2, 3, 8))
    with pytest.raises(ValueError, match="padding_mask must be a bool array of shape"):
        attn(x, padding_mask=jnp.ones((2, 3)))
    with pytest.raises(ValueError, match="segment_ids must be an integer array of shape"):
        attn(x, segment_ids=jnp.zeros((2, 4), int))
    with pytest.raises(ValueError, match=r"x must have shape \(B, T, C\)"):
        attn(jnp.zeros((3, 8)))


def test_conversion_errors_name_the_key() -> None:
    kw = {"vocab_size": 5, "pe": "learned", "d_model": 8, "n_layers": 1, "n_heads": 2}
    fm = pfx.TinyTransformer(**kw, max_len=4)
    sd = TinyTransformer(**kw, max_len=4).state_dict()
    with pytest.raises(ValueError, match=r"'blocks\.3\.attn\.qkv\.weight'"):
        pfx.load_torch_state_dict(fm, {**sd, "blocks.3.attn.qkv.weight": sd["head.weight"]})
    with pytest.raises(ValueError, match=r"'pe.weight': torch shape \(5, 8\)"):
        pfx.load_torch_state_dict(fm, {**sd, "pe.weight": torch.zeros(5, 8)})
    with pytest.raises(ValueError, match=r"sets no value for Flax parameters \['head\.weight'\]"):
        pfx.load_torch_state_dict(fm, {k: v for k, v in sd.items() if k != "head.weight"})
    pfx.load_torch_state_dict(fm, sd)
    np.testing.assert_array_equal(np.asarray(fm.head.kernel[...]), sd["head.weight"].numpy().T)


def test_shaw_relative_values_check_positions() -> None:
    pe = pfx.Shaw(head_dim=4, max_distance=2)
    probs, pos = jnp.full((2, 1, 3, 3), 1 / 3), jnp.arange(3)
    with pytest.raises(ValueError, match=r"q_pos must have shape \(T,\) or \(B, T\)"):
        pe.relative_values(probs, pos[None, None], pos)
    with pytest.raises(ValueError, match=r"k_pos must have shape \(3,\) or \(2, 3\), got \(2,\)"):
        pe.relative_values(probs, pos, jnp.arange(2))


@pytest.mark.parametrize(
    ("pe", "match"),
    [
        (lambda: pfx.ALiBi(n_heads=2), r"pe 'alibi' has n_heads=2, attention has 4 heads"),
        (lambda: pfx.T5Bias(n_heads=8), r"pe 't5' has n_heads=8, attention has 4 heads"),
        (lambda: pfx.RoPE(head_dim=8), r"pe 'rope' has head_dim=8, attention's heads have .* 4"),
    ],
)
def test_attention_rejects_an_encoding_of_another_size(pe: object, match: str) -> None:
    """As torch's Attention: a clear ValueError at construction, not a broadcasting error."""
    with pytest.raises(ValueError, match=match):
        pfx.Attention(16, 4, pe=pe(), causal=True, rngs=nnx.Rngs(0))  # type: ignore[operator]
    shared = pfx.Attention(16, 4, pe=pfx.ALiBi(n_heads=1), causal=True, rngs=nnx.Rngs(0))
    assert shared(jnp.zeros((2, 3, 16))).shape == (2, 3, 16)  # one set shared by all heads


def test_preallocated_cache_overflow_under_jit_raises() -> None:
    """Past the capacity inside jax.jit (length traced): an error naming the capacity, not a
    write clamped onto the last slot; the cache keeps its length."""
    fm = pfx.TinyTransformer(vocab_size=5, pe="rope", d_model=8, n_layers=1, n_heads=2)
    step = nnx.jit(lambda m, c, x: m(x, cache=c))
    cache = fm.new_cache(capacity=3)
    x = jnp.zeros((2, 1), dtype=jnp.int32)
    for _ in range(3):
        step(fm, cache, x)
    with pytest.raises(Exception, match="KVCache capacity 3 exceeded: 3 cached \\+ 1 new"):
        jax.block_until_ready(step(fm, cache, x))
    assert len(cache[0]) == 3


def test_xpos_past_float32_range_raises_as_torch() -> None:
    pe = pfx.XPos(head_dim=64)
    q = jnp.ones((1, 2, 3, 64), jnp.float32)
    pos = jnp.arange(3) + PF.xpos_max_position(64, float(np.finfo(np.float32).max))
    with pytest.raises(ValueError, match="overflows float32"):
        pe.rotate(q, q, pos, pos)


@pytest.mark.parametrize("name", ["sinusoidal", "learned"])
def test_attention_refuses_an_additive_encoding_it_would_ignore(name: str) -> None:
    """As torch's: the layer never calls ``embed``, so a bare layer around an additive table
    would equal NoPE; ``embedded=True`` (the models') says the input holds it."""
    pe = pfx.build_for_model(name, dim=16, n_heads=4, max_len=32)
    with pytest.raises(ValueError, match="an additive encoding is applied to token embeddings"):
        pfx.Attention(16, 4, pe=pe, causal=True, rngs=nnx.Rngs(0))
    assert pfx.Attention(16, 4, pe=pe, causal=True, embedded=True, rngs=nnx.Rngs(0)).embedded
    wrapped = pfx.build("randomized", base_encoding=name, dim=16, max_len=32)
    with pytest.raises(ValueError, match="is additive"):
        pfx.Attention(16, 4, pe=wrapped, causal=True, rngs=nnx.Rngs(0))
