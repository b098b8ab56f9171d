"""A tiny transformers Llama with a character tokenizer, saved like a downloaded model, and a
tiny lab checkpoint: what ``posenc eval`` reads, built offline with random weights."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
import torch

CHARS = ["\n", *(chr(c) for c in range(32, 127))]
SPECIALS = ["<unk>", "<s>", "</s>"]
#: Sentences to score: long enough for windows of 256 characters.
TEXT = " ".join(
    f"Line {i}: the quick brown fox jumps over the lazy dog {i * 7 % 13} times." for i in range(40)
)


def char_tokenizer() -> Any:
    """A transformers fast tokenizer with one token per character and BOS first."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate([*SPECIALS, *CHARS])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )


def tiny_llama(**config: Any) -> Any:
    """LlamaForCausalLM with 2 layers of width 32 (random weights, seed 0), scaled up so that
    positions change the logits well above rounding."""
    import transformers

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=len(SPECIALS) + len(CHARS), hidden_size=32, intermediate_size=64,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=512, bos_token_id=1, eos_token_id=2, **config,
    )  # fmt: skip
    model = transformers.LlamaForCausalLM(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(4.0 if p.ndim > 1 else 1.0)
    return model.eval()


@pytest.fixture(scope="session")
def llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("transformers")
    path = tmp_path_factory.mktemp("tiny-llama")
    tiny_llama().save_pretrained(path)
    char_tokenizer().save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def lab_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """OUT/checkpoints/KEY.pt of an untrained rope model of the lab's ``lm`` task, with its run
    in OUT/results.sqlite (as ``posenc lab`` leaves them)."""
    from posenc.lab.config import ModelConfig, RunConfig, TaskConfig
    from posenc.lab.store import ResultStore
    from posenc.lab.train import RunResult, build_model, save_checkpoint

    out = tmp_path_factory.mktemp("lab")
    cfg = RunConfig(
        encoding="rope", task=TaskConfig(name="lm"), model=ModelConfig(d_model=32, n_layers=1)
    )
    model, _ = build_model(cfg)
    path = save_checkpoint(model.state_dict(), out / "checkpoints", cfg.key())
    with ResultStore(out / "results.sqlite") as store:
        store.add(RunResult(cfg.key(), asdict(cfg), [], checkpoint=path), sweep="test")
    return Path(str(path))
