"""``posenc.eval.passkey``: the needle sits at the requested depth of the longest prompt that
fits, the answer is parsed, and an oracle that reads the needle scores 1 while random models
score what they score (text form for tokenizers, token form for vocabularies)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import torch

import posenc
from posenc.eval import CausalLM, TokenVocab, load_model, passkey
from posenc.eval.passkey import FILLER, INSTRUCTION, NEEDLE, text_prompt


class Oracle(CausalLM):
    """Answers with what follows the needle's first marker: the key, read from the prompt
    (text: the digits after "The pass key is"; tokens: the ids after the first marker)."""

    def __init__(self, model: Any, tokenizer: Any = None, marker: int | None = None) -> None:
        super().__init__(model, tokenizer=tokenizer, name="oracle")
        self.marker, self.prompts = marker, []

    def greedy(self, ids: torch.Tensor, n: int) -> torch.Tensor:
        prompt = ids[0].tolist()
        self.prompts.append(prompt)
        if self.marker is not None:
            start = prompt.index(self.marker) + 1
            return torch.tensor([prompt[start : start + n]])
        key = re.search(r"pass key is (\d+)", self.tokenizer.decode(prompt)).group(1)
        return torch.tensor([self.tokenizer.encode(f" {key}.")[1:]])  # without BOS


def test_the_needle_sits_at_its_depth_in_the_longest_prompt_that_fits(llama_dir: Path) -> None:
    lm = load_model(llama_dir)
    oracle = Oracle(lm.model, lm.tokenizer)
    depths = [0.0, 0.3, 1.0]
    result = passkey(oracle, lengths=[400, 700], depths=depths, trials=2, seed=3)
    assert result.form == "text" and result.accuracy == [[1.0, 1.0]] * 3
    tok = lm.tokenizer
    for trial, prompt in zip(result.trials, oracle.prompts, strict=True):
        text = tok.decode(prompt)
        assert prompt[0] == 1 and len(prompt) == trial.tokens <= trial.length  # BOS first
        n = text.count(FILLER)
        longer = text_prompt(trial.key, n + 1, trial.depth)[1]
        assert len(tok.encode(longer)) > trial.length  # no room for one more sentence
        before = text[: text.index(NEEDLE.format(key=trial.key))]
        assert before.startswith(INSTRUCTION) and before.count(FILLER) == round(trial.depth * n)
        assert tok.decode(prompt[trial.needle_at :]).startswith(f"The pass key is {trial.key}.")
        assert trial.answer.strip() == f"{trial.key}." and trial.correct


def test_a_random_model_answers_and_its_answers_are_parsed(llama_dir: Path) -> None:
    result = passkey(load_model(llama_dir), lengths=[300], depths=[0.5], trials=2, digits=3)
    assert [len(t.key) for t in result.trials] == [3, 3]
    for t in result.trials:
        found = re.search(r"\d+", t.answer)
        assert t.correct == (found is not None and found.group() == t.key)
    assert result.accuracy == [[sum(t.correct for t in result.trials) / 2]]


def test_token_form_for_models_without_a_tokenizer() -> None:
    torch.manual_seed(0)
    tiny = posenc.TinyTransformer(vocab_size=24, pe="rope", d_model=32, n_layers=1).eval()
    vocab = TokenVocab(24)
    marker, keys, filler = vocab._resolved
    assert (marker, keys, filler) == (23, tuple(range(13, 23)), tuple(range(13)))
    oracle = Oracle(tiny, marker=marker)
    result = passkey(oracle, vocab, lengths=[40, 80], depths=[0.0, 0.5, 1.0], trials=2, digits=4)
    assert result.form == "tokens" and result.accuracy == [[1.0, 1.0]] * 3
    for trial, prompt in zip(result.trials, oracle.prompts, strict=True):
        key = [int(k) for k in trial.key.split()]
        n_filler = trial.length - 4 - 3
        assert len(prompt) == trial.length and prompt[-1] == marker
        assert trial.needle_at == round(trial.depth * n_filler)
        assert prompt[trial.needle_at : trial.needle_at + 6] == [marker, *key, marker]
        assert set(key) <= set(keys) and prompt.count(marker) == 3
    plain = passkey(tiny, lengths=[40], depths=[0.5], trials=2, digits=4)  # TokenVocab(24)
    assert plain.form == "tokens" and 0.0 <= plain.accuracy[0][0] <= 1.0


def test_lab_lm_models_take_the_text_form(lab_checkpoint: Path) -> None:
    result = passkey(load_model(lab_checkpoint), lengths=[300], depths=[0.5], trials=1)
    assert result.form == "text" and result.trials[0].tokens <= 300


def test_bad_arguments_are_refused(llama_dir: Path) -> None:
    lm = load_model(llama_dir)
    with pytest.raises(ValueError, match="depths must lie in"):
        passkey(lm, lengths=[300], depths=[1.5])
    with pytest.raises(ValueError, match="shorter than the passkey prompt without filler"):
        passkey(lm, lengths=[100], depths=[0.5], trials=1)
    with pytest.raises(ValueError, match="all distinct"):
        TokenVocab(10, keys=(1, 2), filler=(2, 3))
    with pytest.raises(ValueError, match=r"must lie in 0\.\.9"):
        TokenVocab(10, marker=12)
    with pytest.raises(ValueError, match="shorter than the token passkey prompt"):
        passkey(lm, 99, lengths=[5], depths=[0.5], digits=5)
