"""``posenc.eval.perplexity`` against independent computations: one full forward, and the
transformers sliding-window recipe with transformers' own loss (labels -100 outside the scored
tokens)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import posenc
from posenc.eval import load_model, perplexity
from tests.eval.conftest import TEXT


@pytest.fixture(scope="module")
def lm(llama_dir: Path):  # type: ignore[no-untyped-def]
    return load_model(llama_dir)


@pytest.fixture(scope="module")
def tokens(lm) -> list[int]:  # type: ignore[no-untyped-def]
    return lm.tokenizer.encode(TEXT)


def test_one_window_equals_the_full_forward_loss_and_its_buckets_average_to_it(lm, tokens) -> None:  # type: ignore[no-untyped-def]
    L = 64
    result = perplexity(lm, tokens[:L], lengths=[L], buckets=[0, 5, 20, 40])
    r = result.lengths[0]
    ids = torch.tensor([tokens[:L]])
    with torch.no_grad():
        logits = lm.model(ids).logits[0, :-1]
    want = F.cross_entropy(logits, ids[0, 1:], reduction="none")  # (L-1,)
    assert (r.windows, r.tokens) == (1, L - 1)
    assert r.loss == pytest.approx(float(want.mean()), rel=1e-6)
    assert r.ppl == pytest.approx(float(want.mean().exp()), rel=1e-6)
    assert [(b.start, b.end, b.count) for b in r.buckets] == [
        (0, 5, 5),
        (5, 20, 15),
        (20, 40, 20),
        (40, 63, 23),
    ]
    for b in r.buckets:
        assert b.loss == pytest.approx(float(want[b.start : b.end].mean()), rel=1e-6)
    weighted = sum(b.loss * b.count for b in r.buckets) / sum(b.count for b in r.buckets)
    assert weighted == pytest.approx(r.loss, rel=1e-6)


def hf_recipe(model, ids: torch.Tensor, L: int, stride: int) -> tuple[float, int]:  # type: ignore[no-untyped-def]
    """The transformers docs' sliding-window perplexity: mean NLL of each token once, scored by
    transformers' own loss on labels with -100 outside each window's new tokens."""
    nll_sum, counted, prev_end, n = 0.0, 0, 0, ids.numel()
    for begin in range(0, n, stride):
        end = min(begin + L, n)
        window = ids[begin:end][None]
        labels = window.clone()
        labels[:, : -(end - prev_end)] = -100
        valid = int((labels[:, 1:] != -100).sum())  # the model shifts labels by one
        with torch.no_grad():
            nll_sum += float(model(window, labels=labels).loss) * valid
        counted += valid
        prev_end = end
        if end == n:
            break
    return nll_sum / counted, counted


@pytest.mark.parametrize(("L", "stride"), [(64, 64), (64, 16), (100, 37)])
def test_sliding_windows_equal_the_transformers_recipe(lm, tokens, L: int, stride: int) -> None:  # type: ignore[no-untyped-def]
    ids = torch.tensor(tokens[:300])
    result = perplexity(lm, ids, lengths=[L], stride=stride).lengths[0]
    loss, counted = hf_recipe(lm.model, ids, L, stride)
    assert result.tokens == counted
    if stride < L:  # every token but the first, once (disjoint windows skip each window's first)
        assert counted == 299
    assert result.loss == pytest.approx(loss, rel=1e-6)


def test_buckets_average_every_prediction_of_every_window(lm, tokens) -> None:  # type: ignore[no-untyped-def]
    L, stride = 48, 20
    ids = torch.tensor(tokens[:200])
    r = perplexity(lm, ids, lengths=[L], stride=stride, buckets=3).lengths[0]
    by_position: list[list[float]] = [[] for _ in range(L - 1)]
    for begin in range(0, 200, stride):
        window = ids[begin : begin + L]
        with torch.no_grad():
            logp = lm.model(window[None]).logits[0, :-1].log_softmax(-1)
        for p, target in enumerate(window[1:].tolist()):
            by_position[p].append(-float(logp[p, target]))
        if begin + L >= 200:
            break
    assert [(b.start, b.end) for b in r.buckets] == [(0, 16), (16, 31), (31, 47)]
    for b in r.buckets:
        values = [v for p in range(b.start, b.end) for v in by_position[p]]
        assert b.count == len(values)
        assert b.loss == pytest.approx(float(np.mean(values)), rel=1e-5)


def test_posenc_and_lab_models(lab_checkpoint: Path) -> None:
    torch.manual_seed(0)
    tiny = posenc.TinyTransformer(vocab_size=50, pe="alibi", d_model=32, n_layers=1).eval()
    ids = torch.randint(0, 50, (40,), generator=torch.Generator().manual_seed(0))
    r = perplexity(tiny, ids, lengths=[40]).lengths[0]
    with torch.no_grad():
        assert r.loss == pytest.approx(float(tiny.loss(ids[None, :-1], ids[None, 1:])), rel=1e-6)
    lab = load_model(lab_checkpoint)
    chars = lab.tokenizer.encode(TEXT)
    r = perplexity(lab, chars, lengths=[32, 128], max_windows=2)
    assert [x.windows for x in r.lengths] == [2, 2] and all(np.isfinite(x.ppl) for x in r.lengths)
    assert lab.tokenizer.decode(chars) == TEXT


def test_bad_arguments_are_refused(lm, tokens) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=r"length 400 is longer than the text \(30 tokens\)"):
        perplexity(lm, tokens[:30], lengths=[400])
    with pytest.raises(ValueError, match="stride must be <= the length 16"):
        perplexity(lm, tokens[:30], lengths=[16], stride=20)
    with pytest.raises(TypeError, match="integer token ids"):
        perplexity(lm, [0.5, 1.5, 2.5], lengths=[2])
    with pytest.raises(ValueError, match="bucket edges must increase from 0"):
        perplexity(lm, tokens[:30], lengths=[16], buckets=[0, 8, 4])
    with pytest.raises(ValueError, match="length must be an integer >= 2"):
        perplexity(lm, tokens[:30], lengths=[1])
    with pytest.raises(TypeError, match="transformers causal LM, a TinyTransformer"):
        perplexity(torch.nn.Linear(2, 2), tokens[:30], lengths=[16])
