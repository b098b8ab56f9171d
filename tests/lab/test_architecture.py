"""The lab's encoder-decoder runs (``model.architecture``): validation, the split of a sample
into source and target, equality with ``EncoderDecoder`` itself, unchanged keys of decoder
runs, and both architectures side by side in the store, the report and the table."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from posenc import EncoderDecoder
from posenc.lab.config import ModelConfig, RunConfig, TaskConfig, expand, parse_sweep, stored_label
from posenc.lab.evaluate import eval_batch, evaluate, gate_batches, gate_score
from posenc.lab.executors import LocalExecutor
from posenc.lab.model import LabModel
from posenc.lab.presets import preset, preset_data
from posenc.lab.report import write_report
from posenc.lab.results import load_runs, panels
from posenc.lab.store import ResultStore
from posenc.lab.sweep import run_sweep
from posenc.lab.table import results_markdown
from posenc.lab.tasks import SEP, make_task
from posenc.lab.train import build_model, load_model, train_run

ENC_DEC = ModelConfig(d_model=16, n_layers=1, n_heads=2, architecture="encoder_decoder")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"model": {"architecture": "encoder"}}, "model.architecture must be 'decoder' or"),
        ({"architectures": ["decoder", "x"]}, r"architectures\[1\] must be 'decoder' or"),
        ({"architectures": []}, "architectures must not be empty"),
        (
            {"architectures": ["decoder"], "model": {"architecture": "encoder_decoder"}},
            "give architectures or model.architecture, not both",
        ),
        (
            {"architectures": ["encoder_decoder"], "backend": "jax"},
            "'encoder_decoder' trains with the torch backend only, got backend 'jax'",
        ),
    ],
)
def test_sweep_refuses_bad_architectures(data: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_sweep({"tasks": ["reverse"], **data})


def test_direct_construction_refuses_unknown_architecture_and_jax() -> None:
    with pytest.raises(ValueError, match=r"architecture must be one of \('decoder', 'encoder_"):
        ModelConfig(architecture="encoder")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="torch backend only"):
        RunConfig(encoding="rope", task=TaskConfig(name="reverse"), model=ENC_DEC, backend="jax")


@pytest.mark.parametrize("task", ["ascending_encoder", "offset", "lm"])
def test_encoder_decoder_needs_a_prompt_answer_task(task: str) -> None:
    sweep = parse_sweep(
        {"tasks": [task], "architectures": ["decoder", "encoder_decoder"], "encodings": ["rope"]}
    )
    with pytest.raises(ValueError, match=rf"tasks\[0\]' \({task}\): .*needs a prompt-answer"):
        expand(sweep)
    with pytest.raises(ValueError, match=f"got '{task}'"):
        LabModel(make_task(task), ENC_DEC, "rope")


def test_decoder_keys_and_labels_are_unchanged() -> None:
    # keys as the lab computed them before model.architecture and embed_std existed (the
    # defaults are left out of the digest), with the gate's rule and confirmation (2026-11-28;
    # before: "7fd281aaa24243592ea4", "6a25fc31679bef2e87ae"): stored runs still resume
    run = RunConfig(encoding="rope", task=TaskConfig(name="reverse"))
    assert run.key() == "3e50a55149d8ec058078"
    small = ModelConfig(d_model=16, n_layers=1, n_heads=2)
    task = TaskConfig(name="copy_rep", train_len=(1, 4))
    t5 = RunConfig(encoding="t5", task=task, seed=2, model=small)
    assert t5.key() == "1486b55be374bb249ab2"
    both = expand(parse_sweep({"tasks": ["reverse"], "encodings": ["rope"]}))
    assert [r.key() for r in both] == [run.key()]
    enc_dec = RunConfig(encoding="rope", task=TaskConfig(name="reverse"), model=ENC_DEC)
    assert enc_dec.key() != RunConfig(encoding="rope", task=run.task, model=small).key()
    assert (run.label, enc_dec.label) == ("rope", "rope (encoder-decoder)")
    old = asdict(run)  # a config stored before the field existed
    del old["model"]["architecture"]
    assert stored_label(old) == "rope"


def test_architectures_train_each_cell_side_by_side() -> None:
    sweep = parse_sweep(
        {
            "tasks": ["reverse"],
            "encodings": ["nope", "rope"],
            "seeds": [0, 1],
            "architectures": ["decoder", "encoder_decoder"],
        }
    )
    labels = [r.label for r in expand(sweep)]
    assert labels == [
        *["nope"] * 2,
        *["nope (encoder-decoder)"] * 2,
        *["rope"] * 2,
        *["rope (encoder-decoder)"] * 2,
    ]
    s2s = expand(preset("seq2seq"))
    assert len(s2s) == 5 * 1 * 2 * 3  # encodings x tasks x architectures x seeds
    assert {(r.task.name, r.train.steps) for r in s2s} == {("translate", 1500)}
    both = preset_data("seq2seq") | {"tasks": ["reverse", "translate"]}
    budgets = {(r.task.name, r.train.steps) for r in expand(parse_sweep(both))}
    assert budgets == {("reverse", 2500), ("translate", 1500)}


@pytest.mark.parametrize("encoding", ["t5", "rope", "sinusoidal"])
def test_loss_and_metrics_equal_encoder_decoder_on_the_split_sample(encoding: str) -> None:
    """Loss, evaluation (greedy answers by ``generate``) and gate as ``EncoderDecoder``
    computes them on the split sample, after a few steps so that the metrics are not 0."""
    task = make_task("translate", train_len=(1, 2), eval_lens=(2, 3))
    torch.manual_seed(0)
    model = LabModel(task, ENC_DEC, encoding)
    net = model.net
    assert isinstance(net, EncoderDecoder) and net.tgt_tok is net.src_tok
    batch = task.sample(np.random.default_rng(0), 4, 2)
    tokens = torch.from_numpy(batch.tokens)
    P = batch.n_prompt  # source: the prompt without SEP; decoder input: SEP answer
    src, tgt, target = tokens[:, : P - 1], tokens[:, P - 1 : -1], tokens[:, P:]
    assert (tgt[:, 0] == SEP).all()
    direct = net.loss(src, tgt, target)
    assert torch.equal(model.loss(batch, torch.device("cpu")), direct)

    opt, rng = torch.optim.AdamW(model.parameters(), lr=1e-2), np.random.default_rng(1)
    for _ in range(30):  # some answer tokens right ("and", EOS), not all: metrics in (0, 1)
        opt.zero_grad()
        model.loss(task.sample(rng, 16, int(rng.integers(1, 3))), torch.device("cpu")).backward()
        opt.step()
    model.eval()
    rows = evaluate(model, task, n_samples=6, device=torch.device("cpu"))
    torch.set_grad_enabled(False)  # as evaluate
    for n in task.eval_lens:
        b = eval_batch(task, n, 6)
        t = torch.from_numpy(b.tokens)
        answer = t[:, b.n_prompt :]
        logits = net(t[:, : b.n_prompt - 1], t[:, b.n_prompt - 1 : -1])
        pred = net.generate(t[:, : b.n_prompt - 1], answer.shape[1], start_token=SEP)
        loss = F.cross_entropy(logits.transpose(1, 2), answer, reduction="none").mean()
        want = {
            "exact_match": float((pred == answer).all(1).float().mean()),
            "token_acc": float((pred == answer).float().mean()),
            "loss": float(loss),
        }
        got = {name: v for length, name, v in rows if length == n}
        assert got == pytest.approx(want, rel=1e-6)
        assert 0 < got["token_acc"] < 1  # untrained: some tokens right, so the test can fail

    gate = gate_batches(task, 4)
    hits = []
    for b in gate:
        t = torch.from_numpy(b.tokens)
        tf = net(t[:, : b.n_prompt - 1], t[:, b.n_prompt - 1 : -1]).argmax(-1)
        hits.append((tf == t[:, b.n_prompt :]).all(1))
    worst = min(float(h.float().mean()) for h in hits)
    assert gate_score(model, gate, torch.device("cpu")) == worst
    torch.set_grad_enabled(True)


def test_forward_of_an_encoder_decoder_says_to_split_the_sample() -> None:
    model = LabModel(make_task("reverse"), ENC_DEC, "nope")
    with pytest.raises(TypeError, match="answer_logits"):
        model(torch.zeros(1, 4, dtype=torch.long))


def test_t5_lr_group_holds_both_stacks_tables() -> None:
    cfg = RunConfig(encoding="t5", task=TaskConfig(name="reverse"), model=ENC_DEC)
    model, _ = build_model(cfg)
    assert isinstance(model.net, EncoderDecoder)
    own = {id(p) for p in model.pe_parameters()}
    tables = {id(p) for pe in (model.net.encoder_pe, model.net.decoder_pe) for p in pe.parameters()}
    assert own == tables and len(own) == 2  # bidirectional and causal bucket tables


def test_sweep_with_both_architectures_stores_reports_and_tabulates_two_series(
    tmp_path: Path,
) -> None:
    sweep = parse_sweep(
        {
            "name": "s2s",
            "encodings": ["nope"],
            "tasks": [{"name": "reverse", "train_len": [1, 2], "eval_lens": [2, 3]}],
            "architectures": ["decoder", "encoder_decoder"],
            "model": {"d_model": 16, "n_layers": 1, "n_heads": 2},
            "train": {"steps": 3, "batch_size": 4, "warmup": 1, "eval_samples": 4, "gate": 0},
        }
    )
    outcome = run_sweep(sweep, tmp_path, executor=LocalExecutor(1), live=False)
    assert (outcome.ran, outcome.failed) == (2, [])
    with ResultStore(outcome.store, readonly=True) as store:
        stored = load_runs(store)
    assert sorted(r.encoding for r in stored) == ["nope", "nope (encoder-decoder)"]
    (panel,) = panels(stored)
    assert panel.encodings == ["nope", "nope (encoder-decoder)"]
    table = results_markdown(outcome.store, command="posenc lab table")
    assert "| nope (encoder-decoder) |" in table and "| nope |" in table
    html = write_report(outcome.runs, tmp_path).read_text()
    assert "nope (encoder-decoder)" in html
    assert "encoder self-attention on the prompt" in html  # its maps (gate 0: every run passed)
    # its checkpoint loads back into an encoder-decoder; retrained, it gives the same metrics
    enc_dec = next(r for r in outcome.runs if r.model.architecture == "encoder_decoder")
    mine = next(r for r in stored if r.key == enc_dec.key())
    assert mine.checkpoint is not None
    assert isinstance(load_model(enc_dec, mine.checkpoint).net, EncoderDecoder)
    again = train_run(enc_dec).metrics
    assert sorted(again) == sorted((n, m, v) for (m, n), v in mine.metrics.items())
