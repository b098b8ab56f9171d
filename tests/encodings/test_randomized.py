"""Randomized positions (Ruoss et al. 2023): sampling properties, eval = base, reproducibility."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import posenc
from tests.encodings._helpers import qkv
from tests.reference import absolute as ref_absolute
from tests.reference import rotary as ref_rotary


def _randomized(base: str = "rope", max_len: int = 50, **kw) -> posenc.PositionalEncoding:  # type: ignore[no-untyped-def]
    return posenc.build("randomized", base_encoding=base, max_len=max_len, dim=16, head_dim=8, **kw)


def test_training_positions_are_sorted_unique_and_in_range() -> None:
    pe = _randomized(max_len=40).train()
    for _ in range(20):
        pos = pe.transform(torch.arange(12), 3)  # (B, T)
        assert pos.shape == (3, 12) and pos.dtype == torch.int64
        assert (pos[:, 1:] > pos[:, :-1]).all()  # strictly increasing: sorted and unique
        assert pos.min() >= 0 and pos.max() < 40


def test_training_samples_cover_the_range_uniformly() -> None:
    """Each of L positions is picked with probability T / L."""
    pe = _randomized(max_len=20, seed=0).train()
    counts = torch.zeros(20)
    for _ in range(400):
        counts += torch.bincount(pe.transform(torch.arange(5), 1)[0], minlength=20)
    freq = counts / 400
    assert (freq - 5 / 20).abs().max() < 0.08


def test_rows_are_sampled_independently_and_layers_share_a_sample() -> None:
    pe = _randomized().train()
    pos = torch.arange(10)
    first = pe.transform(pos, 2)
    assert not torch.equal(first[0], first[1])
    ctx = pe.prepare(pos)
    drawn = pe.transform(pos, 2, ctx)
    torch.testing.assert_close(pe.transform(pos, 2, ctx), drawn)  # one forward: one draw
    assert not torch.equal(pe.transform(pos, 2, pe.prepare(pos)), drawn)  # next forward: new
    assert not torch.equal(pe.transform(pos, 2), first)  # without a context: new draw


def test_packed_positions_map_consistently() -> None:
    """Positions restarting at 0 (packing) map through the same sorted table."""
    pe = _randomized(max_len=30).train()
    pos = torch.tensor([[0, 1, 2, 0, 1, 2, 3]])
    out = pe.transform(pos, 1)[0]
    torch.testing.assert_close(out[:3], out[3:6])
    assert out[6] > out[5]


@pytest.mark.parametrize("base", ["sinusoidal", "learned"])
def test_training_embeds_the_base_at_sampled_positions(base: str) -> None:
    pe = _randomized(base, max_len=64, seed=3).train().double()
    x = torch.zeros(2, 6, 16, dtype=torch.float64)
    pos = torch.arange(6)
    ctx = pe.prepare(pos)
    out = pe.embed(x, pos, ctx=ctx)
    sampled = pe.transform(pos, 2, ctx)  # the draw embed used (kept by the context)
    if base == "sinusoidal":
        want = ref_absolute.sinusoidal(64, 16)[sampled.numpy()]
    else:
        want = pe.base.weight.detach().numpy()[sampled.numpy()]
    np.testing.assert_allclose(out.detach().numpy(), want, rtol=1e-12, atol=1e-14)


def test_training_rotates_at_sampled_positions() -> None:
    pe = _randomized("rope", max_len=64, seed=1).train()
    q, k, _ = qkv(B=2, H=2, Tq=6, Tk=6, D=8)
    pos = torch.arange(6)
    ctx = pe.prepare(pos)
    rq, rk = pe.rotate(q, k, pos, pos, ctx=ctx)
    sampled = pe.transform(pos, 2, ctx).numpy()
    np.testing.assert_allclose(
        rq.numpy(), ref_rotary.rope(q.numpy(), sampled), rtol=1e-10, atol=1e-12
    )
    np.testing.assert_allclose(
        rk.numpy(), ref_rotary.rope(k.numpy(), sampled), rtol=1e-10, atol=1e-12
    )


@pytest.mark.parametrize("base", ["sinusoidal", "learned", "rope"])
def test_eval_mode_equals_the_base(base: str) -> None:
    pe = _randomized(base, max_len=64).eval()
    plain = posenc.build(
        base,
        **{
            "sinusoidal": {"dim": 16},
            "learned": {"dim": 16, "max_len": 64},
            "rope": {"head_dim": 8},
        }[base],
    )
    plain.load_state_dict(pe.base.state_dict())
    x, pos = torch.randn(2, 9, 16), torch.arange(9)
    torch.testing.assert_close(pe.embed(x, pos), plain.embed(x, pos))
    q, k, _ = qkv(D=8)
    for a, b in zip(
        pe.rotate(q, k, pos[:5], pos[:5]), plain.rotate(q, k, pos[:5], pos[:5]), strict=True
    ):
        torch.testing.assert_close(a, b)


def test_sample_in_eval() -> None:
    pe = _randomized(max_len=30, sample_in_eval=True, seed=0).eval()
    assert not torch.equal(pe.transform(torch.arange(8), 1)[0], torch.arange(8))


def test_seed_reproduces_draws() -> None:
    draws = []
    for _ in range(2):
        pe = _randomized(max_len=100, seed=7).train()
        draws.append(torch.stack([pe.transform(torch.arange(10), 2) for _ in range(3)]))
    torch.testing.assert_close(draws[0], draws[1])
    other = _randomized(max_len=100, seed=8).train().transform(torch.arange(10), 2)
    assert not torch.equal(draws[0][0], other)


def test_global_seed_reproduces_draws_without_own_seed() -> None:
    pe = _randomized(max_len=100).train()
    torch.manual_seed(11)
    a = pe.transform(torch.arange(10), 2)
    torch.manual_seed(11)
    torch.testing.assert_close(pe.transform(torch.arange(10), 2), a)


def test_base_is_a_submodule() -> None:
    pe = _randomized("learned", max_len=64)
    assert "base.weight" in dict(pe.named_parameters())
    assert pe.base.max_len == 64  # the learned table covers the whole random range


def test_sequence_longer_than_range_raises() -> None:
    pe = _randomized(max_len=8).train()
    with pytest.raises(ValueError, match="max_len >= sequence length, got max_len=8 for 9"):
        pe.embed(torch.zeros(1, 9, 16), torch.arange(9))


@pytest.mark.parametrize(
    ("config", "error", "match"),
    [
        ({"base_encoding": "alibi"}, ValueError, r"base_encoding must be one of \('sinusoidal'"),
        ({"max_len": 0}, ValueError, "max_len must be an integer >= 1, got 0"),
        ({"base_config": {"bogus": 1}}, ValueError, r"unknown config key\(s\) \['bogus'\]"),
    ],
)
def test_bad_config_raises(config: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        posenc.build("randomized", **({"max_len": 16, "head_dim": 8} | config))


def test_tiny_transformer_trains_on_fresh_draws_and_evaluates_deterministically() -> None:
    torch.manual_seed(0)
    model = posenc.TinyTransformer(
        vocab_size=13, pe="randomized", d_model=32, n_heads=4, max_len=64
    ).double()
    idx = torch.randint(0, 13, (2, 10), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        model.train()
        a, b = model(idx), model(idx)
        model.eval()
        c, d = model(idx), model(idx)
    assert not torch.allclose(a, b)  # a new sorted subset per forward
    torch.testing.assert_close(c, d)
    assert not torch.allclose(a, c)


def test_each_row_draws_a_subset_of_its_own_length() -> None:
    """A left-padded row of 2 real tokens (positions [0, .., 0, 1]) in a batch with a longer
    row gets a uniform 2-subset of range(L) (Ruoss et al.: one draw of the sequence's length),
    not the 2 smallest of the longer row's subset size."""
    L, T = 100, 40
    pe = _randomized(max_len=L, seed=5).train()
    pos = torch.stack([torch.arange(T), torch.tensor([0] * (T - 1) + [1])])  # (2, T)
    short = torch.stack([pe.transform(pos, 2)[1, -2:] for _ in range(400)])  # (N, 2)
    assert (short[:, 1] > short[:, 0]).all()
    mean = float(short.double().mean())  # each pick uniform on 0..L-1: mean 49.5, std 29 / 28
    assert abs(mean - (L - 1) / 2) < 6, mean


@pytest.mark.parametrize("seed", [None, 3])
@pytest.mark.parametrize("base", ["sinusoidal", "rope"])
def test_training_forward_and_backward_compile_to_one_graph(base: str, seed: int | None) -> None:
    """The training draw has fixed shapes and no host read: ``fullgraph=True`` traces it, and
    from the same RNG state (global, or a seed's draw counter) the compiled model draws what
    eager draws."""
    torch._dynamo.reset()
    model = posenc.TinyTransformer(
        vocab_size=13,
        pe="randomized",
        pe_config={"base_encoding": base, "seed": seed},
        d_model=16,
        n_heads=2,
        n_layers=2,
        max_len=40,  # the random range
    ).train()
    idx = torch.randint(0, 13, (2, 9))
    torch.manual_seed(5)
    model.pe.draws_made.zero_()
    want = model(idx)
    want.square().mean().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    torch.manual_seed(5)
    model.pe.draws_made.zero_()
    got = torch.compile(model, backend="eager", fullgraph=True)(idx)
    got.square().mean().backward()
    torch.testing.assert_close(got, want)
    for n, p in model.named_parameters():
        if n in grads:
            torch.testing.assert_close(p.grad, grads[n], msg=n)
