"""Each Flax nnx model equals the torch model with converted weights: logits (positions given,
offsets, padding, packing), KV-cache decoding, loss and gradients under nnx.jit/nnx.grad."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from posenc.attention import positions_from_padding
from posenc.models import TinyTransformer

jax = pytest.importorskip("jax", reason="the [jax] extra is not installed")
nnx = pytest.importorskip("flax.nnx", reason="the [jax] extra is not installed")
import jax.numpy as jnp  # noqa: E402

import posenc.flax as pfx  # noqa: E402

V, C, H, T = 13, 16, 4, 9
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8}
#: (encoding, pe_config, causal, n_kv_heads): every Flax encoding, variants that change code paths.
VARIANTS: list[tuple[str, dict[str, Any], bool, int | None]] = [
    ("nope", {}, True, None),
    ("sinusoidal", {}, True, None),
    ("learned", {}, True, None),
    ("rope", {}, True, 2),
    ("rope", {"layout": "interleaved", "partial": 0.5, "base": 100.0}, True, None),
    ("rope", {"scaling": YARN}, True, None),
    (
        "rope",
        {
            "scaling": {
                "rope_type": "dynamic",
                "factor": 2.0,
                "original_max_position_embeddings": 6,
            },
            "kv_policy": "rerotate",
        },
        True,
        None,
    ),  # eager only (dynamic scaling reads concrete positions): marked slow
    ("alibi", {}, True, None),
    ("alibi", {"bidirectional": True}, False, None),
    ("t5", {"bidirectional": True}, False, None),
    ("t5", {}, True, 2),
    ("kerple", {}, True, None),
    ("kerple", {"variant": "power"}, True, None),
    ("fire", {}, True, None),
    ("shaw", {"max_distance": 3}, True, None),
    ("shaw", {"values": False}, True, 2),
    ("transformer_xl", {}, True, None),
    ("xpos", {"scale_base": 16.0}, True, None),
    ("pope", {}, True, 2),
    ("cope", {"n_positions": 6}, True, None),
    ("randomized", {"base_encoding": "learned"}, True, None),  # evaluation: the base encoding
    ("nope_temperature", {"floor_scale": 2, "attn_scale": 0.5}, True, None),
    ("p_rope", {"p": 0.5}, True, 2),
    ("randomized", {"base_encoding": "rope"}, True, None),
    ("randomized", {"base_encoding": "sinusoidal"}, True, None),
]
IDS = [f"{n}-{i}" for i, (n, *_) in enumerate(VARIANTS)]
SLOW = pytest.mark.slow


def _eager_only(name: str, config: dict[str, Any]) -> bool:
    """Dynamic RoPE scaling and Transformer-XL read concrete positions: no jax.jit (slow)."""
    return name == "transformer_xl" or config.get("scaling", {}).get("rope_type") == "dynamic"


ALL = pytest.mark.parametrize(
    ("name", "config", "causal", "n_kv"),
    [
        pytest.param(*v, id=i, marks=[SLOW] if _eager_only(*v[:2]) else [])
        for v, i in zip(VARIANTS, IDS, strict=True)
    ],
)


def twins(
    name: str, config: dict[str, Any], causal: bool = True, n_kv: int | None = None, layers: int = 1
) -> tuple[TinyTransformer, Any]:
    """A torch model and its Flax twin holding the same (converted) weights."""
    torch.manual_seed(0)
    kw = {
        "vocab_size": V,
        "pe": name,
        "d_model": C,
        "n_layers": layers,
        "n_heads": H,
        "n_kv_heads": n_kv,
        "causal": causal,
        "max_len": 32,
        "pe_config": config,
    }
    tm = TinyTransformer(**kw).eval()
    with torch.no_grad():
        for key, p in tm.named_parameters():
            if key.endswith("delta"):  # PoPE's phase bias starts at 0: make it matter
                p.uniform_(-1.0, 0.0)
    fm = pfx.TinyTransformer(**kw, rngs=nnx.Rngs(0))
    fm.eval()  # as tm.eval(): randomized positions stop sampling
    pfx.load_torch_state_dict(fm, tm.state_dict())
    return tm, fm


def tokens(shape: tuple[int, int] = (2, T), seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, V, size=shape)


def close(got: Any, expected: torch.Tensor, atol: float = 3e-5) -> None:
    np.testing.assert_allclose(np.asarray(got), expected.detach().numpy(), rtol=1e-4, atol=atol)


#: One variant per encoding (the fast set); the others run with -m slow where marked.
BASE = [v for i, v in enumerate(VARIANTS) if v[0] not in {w[0] for w in VARIANTS[:i]}]
SPLIT = pytest.mark.parametrize(
    ("name", "config", "causal", "n_kv"),
    [
        pytest.param(*v, id=i, marks=[] if v in BASE and not _eager_only(*v[:2]) else [SLOW])
        for v, i in zip(VARIANTS, IDS, strict=True)
    ],
)
#: Gradients: the first decoder variant of each encoding with parameters (``learned`` also
#: covers the model's own), and RoPE's code paths.
_NO_PARAMS = (
    "rope",
    "nope",
    "sinusoidal",
    "alibi",
    "xpos",
    "randomized",
    "nope_temperature",
    "p_rope",
)
_FIRST_DECODER = {n: (n, c, kv) for n, c, causal, kv in reversed(VARIANTS) if causal}
GRAD = [
    pytest.param(n, c, kv, id=n, marks=[SLOW] if _eager_only(n, c) else [])
    for n, c, kv in _FIRST_DECODER.values()
    if n not in _NO_PARAMS
]
GRAD += [pytest.param("rope", {"layout": "interleaved", "partial": 0.5}, None, id="rope")]
#: The Flax forward under nnx.jit: one compile per shape instead of one per op (eager).
forward = nnx.jit(lambda m, idx, pos=None, **kw: m(idx, pos, **kw))


def _forward(fm: Any, config: dict, *args: Any, **kwargs: Any) -> Any:
    """Jitted, except dynamic RoPE scaling, which reads concrete positions (eager only)."""
    assert fm.pe.jittable is not _eager_only(type(fm.pe).name, config)
    return forward(fm, *args, **kwargs) if fm.pe.jittable else fm(*args, **kwargs)


@ALL
def test_logits_and_cached_decoding_equal_torch(
    name: str, config: dict, causal: bool, n_kv: int | None
) -> None:
    tm, fm = twins(name, config, causal, n_kv)
    idx = tokens()
    pos = np.arange(T)[None] + np.array([[0], [3]])  # (B, T), second row offset by 3
    t_cache, f_cache = tm.new_cache(), fm.new_cache()
    with torch.no_grad():
        want = tm(torch.from_numpy(idx[:, :-1]), torch.from_numpy(pos[:, :-1]), cache=t_cache)
        prefix, prefix_pos = jnp.asarray(idx[:, :-1]), jnp.asarray(pos[:, :-1])
        close(_forward(fm, config, prefix, prefix_pos, cache=f_cache), want)
        if causal and (name, config, causal, n_kv) in BASE:  # decode the last token (cached)
            want = tm(torch.from_numpy(idx[:, -1:]), torch.from_numpy(pos[:, -1:]), cache=t_cache)
            close(
                _forward(
                    fm, config, jnp.asarray(idx[:, -1:]), jnp.asarray(pos[:, -1:]), cache=f_cache
                ),
                want,
            )
            assert len(f_cache[0]) == T


@SPLIT
def test_padding_and_packing_equal_torch(
    name: str, config: dict, causal: bool, n_kv: int | None
) -> None:
    tm, fm = twins(name, config, causal, n_kv)
    idx = tokens()
    mask = np.ones((2, T), dtype=bool)
    mask[0, :3] = False  # row 0: left padding
    segments = np.array([[0] * T, [0] * 6 + [1] * 3])  # row 1: two packed sequences
    pos = np.stack(
        [
            positions_from_padding(torch.from_numpy(mask[:1]))[0].numpy(),
            np.r_[np.arange(6), np.arange(3)],
        ]
    )  # (B, T)
    args = {"padding_mask": mask, "segment_ids": segments}
    with torch.no_grad():
        want = tm(
            torch.from_numpy(idx),
            torch.from_numpy(pos),
            **{k: torch.from_numpy(v) for k, v in args.items()},
        )
    jargs = {k: jnp.asarray(v) for k, v in args.items()}
    got = _forward(fm, config, jnp.asarray(idx), jnp.asarray(pos), **jargs)
    close(np.asarray(got)[mask], want[torch.from_numpy(mask)])


@ALL
def test_weights_round_trip(name: str, config: dict, causal: bool, n_kv: int | None) -> None:
    tm, fm = twins(name, config, causal, n_kv)
    want = tm.state_dict()
    back = pfx.to_torch_state_dict(fm)
    assert back.keys() == want.keys()
    for key, value in want.items():
        assert torch.equal(back[key], value), key
    # nnx state -> torch state dict -> a fresh Flax model: the same nnx state
    other = pfx.TinyTransformer(
        vocab_size=V,
        pe=name,
        d_model=C,
        n_layers=1,
        n_heads=H,
        n_kv_heads=n_kv,
        causal=causal,
        max_len=32,
        pe_config=config,
        rngs=nnx.Rngs(7),
    )
    pfx.load_torch_state_dict(other, back)
    same = jax.tree.map(np.array_equal, nnx.state(fm, nnx.Param), nnx.state(other, nnx.Param))
    assert all(jax.tree.leaves(same))


def _torch_grads(tm: TinyTransformer, idx: np.ndarray, tgt: np.ndarray) -> tuple[float, dict]:
    tm.zero_grad()
    loss = tm.loss(torch.from_numpy(idx), torch.from_numpy(tgt))
    loss.backward()
    return loss.item(), {n: p.grad for n, p in tm.named_parameters() if p.grad is not None}


@pytest.mark.parametrize(("name", "config", "n_kv"), GRAD)
def test_jit_and_grad_match_torch_autograd(name: str, config: dict, n_kv: int | None) -> None:
    tm, fm = twins(name, config, n_kv=n_kv)
    idx, tgt = tokens((2, 6), 1), tokens((2, 6), 2)
    tgt[:, :2] = -100
    want_loss, want_grads = _torch_grads(tm, idx, tgt)
    loss_and_grad = nnx.value_and_grad(lambda m, i, t: m.loss(i, t))
    loss_and_grad = loss_and_grad if _eager_only(name, config) else nnx.jit(loss_and_grad)
    loss, grads = loss_and_grad(fm, jnp.asarray(idx), jnp.asarray(tgt))
    assert abs(float(loss) - want_loss) < 1e-5
    holder = nnx.clone(fm)
    nnx.update(holder, grads)  # gradients laid out as parameters, named as torch's
    got = pfx.to_torch_state_dict(holder)
    for key, g in want_grads.items():
        np.testing.assert_allclose(got[key].numpy(), g.numpy(), rtol=1e-3, atol=1e-6, err_msg=key)


def test_eager_equals_jit_and_cached_decoding_equals_full_forward() -> None:
    _, fm = twins("rope", {}, layers=2)
    idx = jnp.asarray(tokens((2, 6)))
    full = fm(idx)  # eager
    np.testing.assert_allclose(forward(fm, idx), full, atol=1e-6)
    cache = fm.new_cache()
    forward(fm, idx[:, :5], cache=cache)
    np.testing.assert_allclose(forward(fm, idx[:, 5:], cache=cache)[:, 0], full[:, 5], atol=1e-5)


def test_attention_module_with_projection_bias_equals_torch() -> None:
    import posenc

    torch.manual_seed(0)
    ta = posenc.Attention(
        C, H, pe=posenc.build("rope", head_dim=4), causal=False, n_kv_heads=2, bias=True
    ).eval()
    fa = pfx.Attention(
        C,
        H,
        pe=pfx.build("rope", head_dim=4),
        causal=False,
        n_kv_heads=2,
        bias=True,
        rngs=nnx.Rngs(0),
    )
    pfx.load_torch_state_dict(fa, ta.state_dict())
    x = np.random.default_rng(0).normal(size=(2, T, C)).astype(np.float32)
    pos = np.arange(T)[None] + np.array([[0], [5]])
    mask = np.ones((2, T), dtype=bool)
    mask[1, -2:] = False  # right padding
    with torch.no_grad():
        want = ta(torch.from_numpy(x), torch.from_numpy(pos), padding_mask=torch.from_numpy(mask))
    got = nnx.jit(lambda m, *a, **k: m(*a, **k))(
        fa, jnp.asarray(x), jnp.asarray(pos), padding_mask=jnp.asarray(mask)
    )
    close(np.asarray(got)[mask], want[torch.from_numpy(mask)])


@pytest.mark.parametrize("name", ["rope", "shaw"])  # rotation; relative logits and values
def test_preallocated_cache_decodes_equal_torch_with_one_compile(name: str) -> None:
    tm, fm = twins(name, {})
    idx = tokens((2, 8))
    traces: list[int] = []

    def step(m: Any, cache: Any, x: Any) -> Any:
        traces.append(x.shape[1])  # runs only while tracing
        return m(x, cache=cache)

    jit_step = nnx.jit(step)
    t_cache, f_cache = tm.new_cache(), fm.new_cache(capacity=12)
    with torch.no_grad():
        for s, e in ((0, 5), (5, 6), (6, 7), (7, 8)):
            want = tm(torch.from_numpy(idx[:, s:e]), cache=t_cache)
            close(jit_step(fm, f_cache, jnp.asarray(idx[:, s:e])), want)
    assert traces == [5, 1], "the prefill and one decoding step compile; later steps reuse it"
    assert len(f_cache[0]) == 8
    with pytest.raises(ValueError, match="KVCache capacity 12 exceeded: 8 cached \\+ 5 new"):
        fm(jnp.asarray(idx[:, :5]), cache=f_cache)


@pytest.mark.parametrize("name", ["learned", "rope", "t5", "shaw"])  # one per hook kind
def test_float64_logits_equal_torch_to_1e_10(name: str) -> None:
    with jax.enable_x64(True):
        tm, fm = twins(name, {})
        tm.double()
        pfx.load_torch_state_dict(fm, tm.state_dict(), dtype=jnp.float64)
        idx = tokens()
        pos = np.arange(T)[None] + np.array([[0], [3]])
        with torch.no_grad():
            want = tm(torch.from_numpy(idx), torch.from_numpy(pos))
        got = forward(fm, jnp.asarray(idx), jnp.asarray(pos))
        assert got.dtype == jnp.float64
        np.testing.assert_allclose(np.asarray(got), want.numpy(), rtol=0, atol=1e-10)


def test_dropout_acts_in_training_and_evaluation_equals_torch() -> None:
    torch.manual_seed(0)
    kw = {"vocab_size": V, "pe": "rope", "d_model": C, "n_layers": 1, "n_heads": H, "dropout": 0.5}
    tm = TinyTransformer(**kw).eval()
    fm = pfx.TinyTransformer(**kw, rngs=nnx.Rngs(0))
    pfx.load_torch_state_dict(fm, tm.state_dict())
    idx = tokens()
    assert not np.allclose(forward(fm, jnp.asarray(idx)), forward(fm, jnp.asarray(idx)))
    fm.eval()  # evaluation: no dropout, as torch's .eval()
    with torch.no_grad():
        close(forward(fm, jnp.asarray(idx)), tm(torch.from_numpy(idx)))
    with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\), got 1.0"):
        pfx.Attention(C, H, pe=pfx.NoPE(), causal=True, dropout=1.0, rngs=nnx.Rngs(0))


@pytest.mark.parametrize(
    ("name", "config"),
    [
        ("alibi", {}),
        ("alibi", {"bidirectional": True}),
        ("t5", {}),
        ("t5", {"bidirectional": True}),
        ("kerple", {}),
        ("fire", {}),
        ("fire", {"bidirectional": True, "init_threshold": 3.0}),  # normaliser ψ(max(L, i, j))
    ],
)
def test_bias_hook_with_mixed_position_shapes_equals_torch(name: str, config: dict) -> None:
    """Causal and encoder forms; keys before and after the queries."""
    import posenc

    torch.manual_seed(0)
    tpe = posenc.build(name, n_heads=H, **config)
    fpe = pfx.build(name, n_heads=H, **config)
    pfx.load_torch_state_dict(fpe, tpe.state_dict())
    q_pos, k_pos = np.array([[4, 5, 6], [0, 1, 2]]), np.arange(7)  # (B, Tq), (Tk,)
    with torch.no_grad():
        want = tpe.bias(torch.from_numpy(q_pos), torch.from_numpy(k_pos))  # (B, H, Tq, Tk)
    got = fpe.bias(jnp.asarray(q_pos), jnp.asarray(k_pos))
    assert got.shape == tuple(want.shape) == (2, H, 3, 7)
    close(got, want, atol=1e-6)


def test_sinusoidal_scale_equals_torch() -> None:
    """The lab presets build sinusoidal with ``scale`` (``lab.presets.PE_CONFIG``): the Flax
    twin takes it and scales the table as torch does."""
    tm, fm = twins("sinusoidal", {"scale": 0.02})
    idx, pos = tokens(), np.arange(T)[None] + np.array([[0], [1000]])
    with torch.no_grad():
        want = tm(torch.from_numpy(idx), torch.from_numpy(pos))
    close(forward(fm, jnp.asarray(idx), jnp.asarray(pos)), want)


def test_transformer_xl_on_an_empty_sequence() -> None:
    _, fm = twins("transformer_xl", {})
    assert fm(jnp.zeros((2, 0), dtype=jnp.int32)).shape == (2, 0, V)


def test_bfloat16_weights_round_trip_bit_exact() -> None:
    """torch bfloat16 -> Flax -> torch keeps every bit (NumPy has no native bfloat16)."""
    tm, fm = twins("t5", {}, n_kv=2)
    tm.to(torch.bfloat16)
    pfx.load_torch_state_dict(fm, tm.state_dict(), dtype=jnp.bfloat16)
    assert fm.head.kernel[...].dtype == jnp.bfloat16
    back = pfx.to_torch_state_dict(fm)
    for key, value in tm.state_dict().items():
        assert back[key].dtype == torch.bfloat16 and torch.equal(back[key], value), key


def test_pope_phase_bias_gradient_at_its_initial_zero_equals_torch() -> None:
    tm, fm = twins("pope", {}, n_kv=2)
    with torch.no_grad():  # back to the init, δ = 0: the clamp's upper end
        tm.pe.delta.zero_()
    pfx.load_torch_state_dict(fm, tm.state_dict())
    idx, tgt = tokens((2, 6), 1), tokens((2, 6), 2)
    _, want = _torch_grads(tm, idx, tgt)
    _, grads = nnx.value_and_grad(lambda m, i, t: m.loss(i, t))(
        fm, jnp.asarray(idx), jnp.asarray(tgt)
    )
    holder = nnx.clone(fm)
    nnx.update(holder, grads)
    got = pfx.to_torch_state_dict(holder)["pe.delta"].numpy()
    assert np.abs(want["pe.delta"].numpy()).max() > 1e-4  # the gradient is not trivially 0
    np.testing.assert_allclose(got, want["pe.delta"].numpy(), rtol=1e-3, atol=1e-7)


@pytest.mark.parametrize(
    ("name", "config", "causal", "n_kv"),
    [pytest.param(*v, id=i) for v, i in zip(VARIANTS, IDS, strict=True) if not _eager_only(*v[:2])],
)
def test_unsigned_positions_equal_signed(
    name: str, config: dict[str, Any], causal: bool, n_kv: int | None
) -> None:
    """uint8 position ids give the logits of int32 ones (differences i - j used to wrap:
    0 - 1 = 255), as torch, which takes positions as int64."""
    _, fm = twins(name, config, causal, n_kv)
    idx, pos = jnp.asarray(tokens()), np.arange(3, 3 + T)
    want = forward(fm, idx, jnp.asarray(pos, dtype=jnp.int32))
    got = forward(fm, idx, jnp.asarray(pos, dtype=jnp.uint8))
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("capacity", [None, 12], ids=["growing", "preallocated-jit"])
def test_decode_after_a_packed_prefill_continues_the_last_document_as_torch(
    capacity: int | None,
) -> None:
    """Steps without segment_ids continue each row's latest segment (they used to join segment
    0, the first document), in a growing cache and in a preallocated one under jax.jit."""
    tm, fm = twins("rope", {})
    idx = tokens((2, 9))
    seg = np.array([[0, 0, 0, 1, 1, 1, 1], [0, 0, 1, 1, 2, 2, 2]])
    pos = np.array([[0, 1, 2, 0, 1, 2, 3], [0, 1, 0, 1, 0, 1, 2]])
    step = nnx.jit(lambda m, c, x, p: m(x, p, cache=c)) if capacity else None
    t_cache, f_cache = tm.new_cache(), fm.new_cache(capacity=capacity)
    with torch.no_grad():
        tm(
            torch.from_numpy(idx[:, :7]),
            torch.from_numpy(pos),
            segment_ids=torch.from_numpy(seg),
            cache=t_cache,
        )
        fm(jnp.asarray(idx[:, :7]), jnp.asarray(pos), segment_ids=jnp.asarray(seg), cache=f_cache)
        for t in (7, 8):
            p = pos[:, -1:] + t - 6  # (B, 1): each row's next position
            want = tm(torch.from_numpy(idx[:, t : t + 1]), torch.from_numpy(p), cache=t_cache)
            x = jnp.asarray(idx[:, t : t + 1])
            got = (
                step(fm, f_cache, x, jnp.asarray(p))
                if step
                else fm(x, jnp.asarray(p), cache=f_cache)
            )
            close(got, want)


@pytest.mark.parametrize("name", ["rope", "alibi", "shaw"])
def test_attention_weights_equal_torch(name: str) -> None:
    """``return_weights=True`` in Flax: the torch layer's weights (B, H, T, T) and output,
    with converted parameters, eager and under nnx.jit."""
    import posenc

    torch.manual_seed(0)
    tpe = posenc.build_for_model(name, dim=C, n_heads=H, max_len=32)
    ta = posenc.Attention(C, H, pe=tpe, causal=True, n_kv_heads=2).eval()
    fpe = pfx.build_for_model(name, dim=C, n_heads=H, max_len=32)
    fa = pfx.Attention(C, H, pe=fpe, causal=True, n_kv_heads=2, rngs=nnx.Rngs(0))
    pfx.load_torch_state_dict(fa, ta.state_dict())
    x = np.random.default_rng(0).normal(size=(2, T, C)).astype(np.float32)
    with torch.no_grad():
        want_y, want_w = ta(torch.from_numpy(x), return_weights=True)
    y, w = fa(jnp.asarray(x), return_weights=True)
    close(w, want_w, atol=1e-5)
    close(y, want_y)
    jy, jw = nnx.jit(lambda m, a: m(a, return_weights=True))(fa, jnp.asarray(x))
    close(jw, want_w, atol=1e-5)
    close(jy, want_y)
    assert w.shape == (2, H, T, T) and np.allclose(np.asarray(w).sum(-1), 1.0, atol=1e-5)


def test_every_registered_flax_encoding_is_compared_with_torch() -> None:
    """torch/Flax agreement is proven over the whole Flax registry: each encoding is a variant
    here (sequences), in ``test_grid_flax.GRIDS`` (grid positions) or in
    ``test_flax_data_dependent.VARIANTS`` (attention from the data)."""
    from importlib.util import module_from_spec, spec_from_file_location
    from pathlib import Path

    covered = {v[0] for v in VARIANTS}
    for name, listed in (("test_grid_flax", "GRIDS"), ("test_flax_data_dependent", "VARIANTS")):
        spec = spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
        assert spec is not None and spec.loader is not None
        module = module_from_spec(spec)
        spec.loader.exec_module(module)
        covered |= {v[0] for v in getattr(module, listed)}
    assert set(pfx.ENCODINGS) <= covered, sorted(set(pfx.ENCODINGS) - covered)
