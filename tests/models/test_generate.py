"""generate(): equal to a step-by-step reference that recomputes the full forward for every
token (every encoding, left padding, sampling, end tokens), the sampling filter against its
float64 definition, reproducibility with a generator, and input checks."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

import posenc
from posenc.attention import positions_from_padding
from posenc.models import EncoderDecoder, Sampling, TinyTransformer
from posenc.models.generate import PROGRESS_MIN_TOKENS
from tests.reference import sampling as ref

ALL = posenc.names(axes=1)  # sequence encodings
V = 13
SAMPLED = {"temperature": 0.9, "top_k": 8, "top_p": 0.9}


def decoder(name: str) -> TinyTransformer:
    torch.manual_seed(0)
    m = TinyTransformer(vocab_size=V, pe=name, d_model=16, n_heads=4, n_kv_heads=2, max_len=32)
    with torch.no_grad():  # weights well above the init: outputs far from uniform
        for p in m.parameters():
            p.mul_(10.0 if p.ndim > 1 else 1.0)
    return m.double().eval()


def seq2seq(name: str) -> EncoderDecoder:
    torch.manual_seed(0)
    # fox, stick_breaking, path compute causal attention: the decoder's, NoPE the encoder's
    pe = ("nope", name) if posenc.info(name).cls.capabilities.attention_form else name
    m = EncoderDecoder(src_vocab_size=V, tgt_vocab_size=V, pe=pe, d_model=16, n_heads=4, max_len=32)
    with torch.no_grad():
        for p in m.parameters():
            p.mul_(10.0 if p.ndim > 1 else 1.0)
    return m.double().eval()


def left_padded() -> tuple[torch.Tensor, torch.Tensor]:
    """Three prompts of lengths 5, 3 and 2, left-padded to 5 (pad id 0)."""
    prompt = torch.randint(1, V, (3, 5), generator=torch.Generator().manual_seed(7))
    mask = torch.arange(5)[None] >= torch.tensor([[0], [2], [3]])
    return prompt.masked_fill(~mask, 0), mask


def reference(
    logits_of: Any,
    prompt: torch.Tensor,
    mask: torch.Tensor,
    n: int,
    sampling: Sampling,
    end_token: int | None = None,
    pad_token: int = 0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """The slow loop: every step recomputes ``logits_of(tokens, positions, mask)`` over the
    whole sequence so far (no cache), positions counting each row's real tokens."""
    tokens, finished, out = prompt, torch.zeros(len(prompt), dtype=torch.bool), []
    for _ in range(n):
        logits = logits_of(tokens, positions_from_padding(mask), mask)[:, -1]
        token = sampling.choose(logits, generator).masked_fill(finished, pad_token)
        out.append(token)
        if end_token is not None:
            finished |= token == end_token
            if finished.all():
                break
        tokens = torch.cat([tokens, token[:, None]], dim=1)
        mask = torch.cat([mask, torch.ones(len(mask), 1, dtype=torch.bool)], dim=1)
    return torch.stack(out, dim=1)


@pytest.mark.parametrize("name", ALL)
def test_decoder_generate_equals_the_full_forward_loop(name: str) -> None:
    """Left-padded prompts, top-k/top-p sampling with a generator: the same tokens as the loop
    recomputing the full forward each step (same draws from the same generator)."""
    m, (prompt, mask) = decoder(name), left_padded()
    got = m.generate(
        prompt, 6, padding_mask=mask, generator=torch.Generator().manual_seed(3), **SAMPLED
    )
    with torch.no_grad():
        want = reference(
            lambda t, p, k: m(t, p, padding_mask=k),
            prompt,
            mask,
            6,
            Sampling(**SAMPLED),
            generator=torch.Generator().manual_seed(3),
        )
    assert torch.equal(got, want)


@pytest.mark.parametrize("name", ALL)
def test_each_left_padded_row_continues_as_if_alone(name: str) -> None:
    """Padding does not shift positions: greedy continuation of each row of a left-padded batch
    is the row's continuation generated alone."""
    m, (prompt, mask) = decoder(name), left_padded()
    batch = m.generate(prompt, 5, padding_mask=mask)
    for row in range(3):
        alone = m.generate(prompt[row : row + 1, mask[row]], 5)
        assert torch.equal(batch[row : row + 1], alone), f"row {row}"


@pytest.mark.parametrize("name", ALL)
def test_encoder_decoder_generate_equals_the_full_forward_loop(name: str) -> None:
    """Source padded on the left of one row (positions counting real tokens), the decoder from
    a start token: the tokens of the loop recomputing model(src, target so far)."""
    m, (src, src_mask) = seq2seq(name), left_padded()
    src_pos = positions_from_padding(src_mask)
    got = m.generate(
        src,
        5,
        start_token=1,
        src_padding_mask=src_mask,
        generator=torch.Generator().manual_seed(4),
        **SAMPLED,
    )
    start = torch.ones(3, 1, dtype=torch.long)
    with torch.no_grad():
        want = reference(
            lambda t, p, k: m(src, t, src_pos, p, src_padding_mask=src_mask),
            start,
            torch.ones(3, 1, dtype=torch.bool),
            5,
            Sampling(**SAMPLED),
            generator=torch.Generator().manual_seed(4),
        )
    assert torch.equal(got, want)


def test_end_token_stops_each_row_and_pads_it() -> None:
    m, (prompt, mask) = decoder("rope"), left_padded()
    free = m.generate(prompt, 8, padding_mask=mask)
    end = int(free[0, 2])  # row 0 emits it at step 2 (maybe others earlier or later)
    got = m.generate(prompt, 8, padding_mask=mask, end_token=end, pad_token=V - 1)
    want = free.clone()
    for row in range(3):
        hits = (free[row] == end).nonzero()
        if len(hits):
            want[row, int(hits[0]) + 1 :] = V - 1
    done = [int((free[r] == end).nonzero()[0]) if (free[r] == end).any() else 8 for r in range(3)]
    assert torch.equal(got, want[:, : min(max(done) + 1, 8)])
    with torch.no_grad():
        slow = reference(
            lambda t, p, k: m(t, p, padding_mask=k), prompt, mask, 8, Sampling(), end, V - 1
        )
    assert torch.equal(got, slow)


def test_generation_stops_early_when_every_row_has_ended() -> None:
    m = decoder("alibi")
    prompt = torch.randint(1, V, (2, 4), generator=torch.Generator().manual_seed(0))
    first = m.generate(prompt, 1)[:, 0]
    if first[0] != first[1]:  # make both rows start the same way
        prompt[1] = prompt[0]
        first = m.generate(prompt, 1)[:, 0]
    out = m.generate(prompt, 10, end_token=int(first[0]))
    assert out.shape == (2, 1) and torch.equal(out[:, 0], first)


def test_a_generator_makes_draws_reproducible() -> None:
    m = decoder("rope")
    prompt = torch.randint(0, V, (2, 3), generator=torch.Generator().manual_seed(1))

    def draw(seed: int) -> torch.Tensor:
        gen = torch.Generator().manual_seed(seed)
        return m.generate(prompt, 20, temperature=1.5, generator=gen)

    assert torch.equal(draw(5), draw(5))
    assert not torch.equal(draw(5), draw(6))


@pytest.mark.parametrize(
    ("temperature", "top_k", "top_p"),
    [(1.0, None, None), (0.5, 4, None), (1.0, None, 0.5), (2.0, 6, 0.8), (1.0, 30, 0.999)],
)
def test_filter_keeps_the_defined_sets(
    temperature: float, top_k: int | None, top_p: float | None
) -> None:
    """Kept tokens and their probabilities: the float64 definitions (tests/reference)."""
    logits = torch.randn(5, 20, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    z = Sampling(temperature=temperature, top_k=top_k, top_p=top_p).filter(logits)
    for row in range(5):
        probs, keep = ref.allowed(logits[row].numpy(), temperature, top_k, top_p)
        assert np.array_equal(torch.isfinite(z[row]).numpy(), keep)
        np.testing.assert_allclose(z[row].softmax(-1).numpy(), probs, rtol=1e-12, atol=1e-15)


def test_draws_follow_the_filtered_distribution() -> None:
    """20 000 draws of one row: frequencies within 0.015 of the reference probabilities, and
    never a token outside the top-k/top-p set."""
    logits = torch.tensor([[2.0, 1.5, 1.0, 0.5, 0.0, -1.0, -3.0]]).expand(20_000, 7)
    sampling = Sampling(temperature=0.8, top_k=5, top_p=0.85)
    tokens = sampling.choose(logits, torch.Generator().manual_seed(0))
    freq = torch.bincount(tokens, minlength=7).double() / len(tokens)
    probs, keep = ref.allowed(logits[0].numpy(), 0.8, 5, 0.85)
    assert (freq.numpy()[~keep] == 0).all()
    np.testing.assert_allclose(freq.numpy(), probs, atol=0.015)


def test_greedy_is_argmax_and_ignores_top_k_and_top_p() -> None:
    logits = torch.randn(4, 9, generator=torch.Generator().manual_seed(0))
    for kw in ({}, {"top_k": 2}, {"top_p": 0.1}):
        assert torch.equal(Sampling(**kw).choose(logits), logits.argmax(-1))


def test_progress_bar_leaves_the_tokens_unchanged(capsys: pytest.CaptureFixture[str]) -> None:
    m = decoder("nope")
    prompt = torch.randint(0, V, (1, 2), generator=torch.Generator().manual_seed(0))
    quiet = m.generate(prompt, 4, progress=False)
    assert torch.equal(m.generate(prompt, 4, progress=True), quiet)
    assert PROGRESS_MIN_TOKENS > 4 and capsys.readouterr().out == ""  # stdout stays clean


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"temperature": -1.0}, ValueError, "temperature"),
        ({"temperature": float("nan")}, ValueError, "temperature"),
        ({"temperature": "hot"}, TypeError, "temperature"),
        ({"top_k": 0}, ValueError, "top_k"),
        ({"top_p": 0.0}, ValueError, "top_p"),
        ({"top_p": 1.5}, ValueError, "top_p"),
        ({"max_new_tokens": 0}, ValueError, "max_new_tokens"),
        ({"end_token": V}, ValueError, "end_token must be a token id < vocab size 13"),
        ({"pad_token": -1}, ValueError, "pad_token"),
        ({"progress": "yes"}, TypeError, "progress"),
        ({"padding_mask": torch.tensor([[True, False]])}, ValueError, "left padding"),
        ({"padding_mask": torch.ones(1, 3, dtype=torch.bool)}, ValueError, "padding_mask"),
        ({"prompt": torch.zeros(1, 2)}, TypeError, "integer"),
        ({"prompt": torch.zeros(1, 0, dtype=torch.long)}, ValueError, "T >= 1"),
    ],
)
def test_bad_options_are_named(kwargs: dict[str, Any], error: type, match: str) -> None:
    m = decoder("rope")
    args = {"prompt": torch.zeros(1, 2, dtype=torch.long), "max_new_tokens": 3} | kwargs
    with pytest.raises(error, match=match):
        m.generate(**args)


def test_an_encoder_and_a_bad_start_token_are_refused() -> None:
    encoder = TinyTransformer(vocab_size=5, pe="rope", d_model=16, causal=False)
    with pytest.raises(ValueError, match="causal=True"):
        encoder.generate(torch.zeros(1, 2, dtype=torch.long), 3)
    m = seq2seq("t5")
    with pytest.raises(ValueError, match="start_token must be < tgt_vocab_size"):
        m.generate(torch.zeros(1, 2, dtype=torch.long), 3, start_token=V)
