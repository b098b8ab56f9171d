"""The Flax twins of the encodings computing attention from the data (FoX, stick-breaking,
PaTH) equal torch's: logits, padding and packing, cached decoding (growing, and a preallocated
cache under nnx.jit, whose new keys sit mid-buffer) equal to the full forward; the layers they
cannot be are refused."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from posenc.models import TinyTransformer

jax = pytest.importorskip("jax", reason="the [jax] extra is not installed")
nnx = pytest.importorskip("flax.nnx", reason="the [jax] extra is not installed")
import jax.numpy as jnp  # noqa: E402

import posenc.flax as pfx  # noqa: E402

V, C, H, T = 13, 16, 4, 9
VARIANTS: list[tuple[str, dict[str, Any], int | None]] = [
    ("fox", {}, None),
    ("fox", {}, 2),
    ("stick_breaking", {}, None),
    ("stick_breaking", {"attend_current": True, "remainder": False}, 2),
    ("path", {}, None),
    ("path", {"forget_gate": True}, 2),
]
IDS = [f"{n}-{i}" for i, (n, *_) in enumerate(VARIANTS)]
SLOW = pytest.mark.slow
#: One variant per encoding in the default suite (each compiles for seconds); the others -m slow.
CASES = pytest.mark.parametrize(
    ("name", "config", "n_kv"),
    [
        pytest.param(*v, id=i, marks=[] if v[0] not in {w[0] for w in VARIANTS[:j]} else [SLOW])
        for j, (v, i) in enumerate(zip(VARIANTS, IDS, strict=True))
    ],
)
forward = nnx.jit(lambda m, idx, **kw: m(idx, **kw))


def twins(name: str, config: dict[str, Any], n_kv: int | None) -> tuple[TinyTransformer, Any]:
    """A torch model of 2 layers and its Flax twin holding the same (converted) weights."""
    torch.manual_seed(0)
    kw = {
        "vocab_size": V,
        "pe": name,
        "d_model": C,
        "n_layers": 2,
        "n_heads": H,
        "n_kv_heads": n_kv,
        "max_len": 32,
        "pe_config": config,
    }
    tm = TinyTransformer(**kw).eval()
    fm = pfx.TinyTransformer(**kw, rngs=nnx.Rngs(0))
    fm.eval()
    pfx.load_torch_state_dict(fm, tm.state_dict())
    return tm, fm


def tokens(shape: tuple[int, int] = (2, T)) -> np.ndarray:
    return np.random.default_rng(0).integers(0, V, size=shape)


def close(got: Any, expected: Any, atol: float = 3e-5) -> None:
    want = expected.detach().numpy() if isinstance(expected, torch.Tensor) else expected
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=atol)


def test_every_torch_encoding_has_a_flax_twin() -> None:
    from posenc.registry import names

    assert {"fox", "stick_breaking", "path"} <= set(pfx.ENCODINGS)
    assert set(pfx.ENCODINGS) == set(names())
    layers = [block.attn.pe for block in twins("fox", {}, None)[1].blocks]
    assert layers[0] is not layers[1]  # one per layer: each gate reads its layer's input


@CASES
def test_logits_and_cached_decoding_equal_torch(
    name: str, config: dict[str, Any], n_kv: int | None
) -> None:
    tm, fm = twins(name, config, n_kv)
    idx = tokens()
    with torch.no_grad():
        full = tm(torch.from_numpy(idx))
        t_cache = tm.new_cache()
        prefix = tm(torch.from_numpy(idx[:, :5]), cache=t_cache)
        steps = [tm(torch.from_numpy(idx[:, i : i + 1]), cache=t_cache) for i in range(5, T)]
    close(forward(fm, jnp.asarray(idx)), full)
    cache = fm.new_cache()  # growing: one compile per length
    close(fm(jnp.asarray(idx[:, :5]), cache=cache), prefix)
    for i, want in zip(range(5, T), steps, strict=True):
        close(fm(jnp.asarray(idx[:, i : i + 1]), cache=cache), want)
    close(np.concatenate([prefix, *steps], axis=1), full)  # torch's cache: the full forward


@CASES
def test_preallocated_cache_under_jit_equals_the_full_forward(
    name: str, config: dict[str, Any], n_kv: int | None
) -> None:
    """A preallocated cache holds the new keys at its offset, mid-buffer (later slots are
    unwritten): one compiled step decodes every token as the full forward."""
    _, fm = twins(name, config, n_kv)
    idx = jnp.asarray(tokens())
    full = forward(fm, idx)
    cache = fm.new_cache(capacity=16)
    step = nnx.jit(lambda m, c, x: m(x, cache=c))
    got = [step(fm, cache, idx[:, :3])]
    got += [step(fm, cache, idx[:, i : i + 1]) for i in range(3, T)]
    close(jnp.concatenate(got, axis=1), full)
    assert int(cache[0].offset()) == T


@CASES
def test_padding_and_packing_equal_torch(
    name: str, config: dict[str, Any], n_kv: int | None
) -> None:
    tm, fm = twins(name, config, n_kv)
    idx = tokens()
    mask = np.ones((2, T), dtype=bool)
    mask[0, :3] = False  # row 0: left padding
    segments = np.array([[0] * T, [0] * 6 + [1] * 3])  # row 1: two packed sequences
    args = {"padding_mask": mask, "segment_ids": segments}
    with torch.no_grad():
        want = tm(torch.from_numpy(idx), **{k: torch.from_numpy(v) for k, v in args.items()})
    got = forward(fm, jnp.asarray(idx), **{k: jnp.asarray(v) for k, v in args.items()})
    close(np.asarray(got)[mask], want[torch.from_numpy(mask)])


@pytest.mark.parametrize("name", ["fox", pytest.param("path", marks=SLOW)])
def test_gradients_equal_torch(name: str) -> None:
    tm, fm = twins(name, {"forget_gate": True} if name == "path" else {}, 2)
    idx = tokens()
    inputs, targets = torch.from_numpy(idx[:, :-1]), torch.from_numpy(idx[:, 1:])
    want = tm.loss(inputs, targets)
    want.backward()
    loss_and_grad = nnx.jit(nnx.value_and_grad(lambda m, i, t: m.loss(i, t)))
    loss, grads = loss_and_grad(fm, jnp.asarray(idx[:, :-1]), jnp.asarray(idx[:, 1:]))
    assert abs(float(loss) - want.item()) < 1e-5
    holder = nnx.clone(fm)
    nnx.update(holder, grads)  # gradients laid out as parameters, named as torch's
    got = pfx.to_torch_state_dict(holder)
    for key, p in tm.named_parameters():
        assert p.grad is not None, key
        np.testing.assert_allclose(
            got[key].numpy(), p.grad.numpy(), rtol=1e-3, atol=1e-6, err_msg=key
        )


@pytest.mark.parametrize(
    ("config", "match"),
    [
        ({"causal": False}, "bidirectional layer"),
        ({"causal": True, "window": 4}, "sliding window or chunk"),
        ({"causal": True, "dropout": 0.1}, "attention dropout"),
    ],
)
def test_attention_refuses_what_the_forms_cannot_be(config: dict[str, Any], match: str) -> None:
    pe = pfx.build("fox", dim=16, n_heads=4)
    with pytest.raises(ValueError, match=match):
        pfx.Attention(16, 4, pe=pe, rngs=nnx.Rngs(0), **config)


def test_no_weights_to_return() -> None:
    layer = pfx.Attention(16, 4, pe=pfx.build("stick_breaking"), causal=True, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="no softmax weights"):
        layer(jnp.zeros((1, 3, 16)), return_weights=True)
