"""One run: every encoding learns in 30 steps, runs are deterministic, checkpoints reload,
greedy decoding with a KV cache matches decoding without, attention maps match the layer."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import posenc
from posenc.lab.attention_maps import attention_maps, mean_distance
from posenc.lab.config import ModelConfig, RunConfig, TaskConfig, TrainConfig
from posenc.lab.evaluate import _generate, evaluate
from posenc.lab.model import greedy_decode
from posenc.lab.train import build_model, load_model, lr_factor, train_run

TINY = ModelConfig(d_model=32, n_layers=2, n_heads=4)
FAST = TrainConfig(steps=30, batch_size=16, lr=3e-3, warmup=5, eval_samples=16)


def _cfg(encoding: str, task: str = "copy", **kw: object) -> RunConfig:
    t = TaskConfig(name=task, train_len=(2, 5) if task != "lm" else (16, 16))
    return RunConfig(encoding=encoding, task=t, model=TINY, train=FAST, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("encoding", posenc.names(axes=1))
def test_thirty_steps_lower_the_loss(encoding: str) -> None:
    curve = train_run(_cfg(encoding)).loss_curve
    first, last = curve[0][1], curve[-1][1]
    assert last < first - 0.1, f"{encoding}: loss {first:.3f} -> {last:.3f}"


@pytest.mark.parametrize("task", ["ascending", "ascending_encoder", "offset", "lm"])
def test_one_answer_classification_and_lm_learn(task: str) -> None:
    """Held-out loss at the training length drops in 30 steps (batch 32)."""
    cfg = replace(_cfg("rope", task), train=replace(FAST, batch_size=32, eval_samples=64))
    model, t = build_model(cfg)
    before = evaluate(model, t, n_samples=64, device=torch.device("cpu"))
    after = train_run(cfg).metrics
    loss = lambda rows: next(v for _, name, v in rows if name == "loss")  # noqa: E731
    assert loss(after) < loss(before) - 0.02


def test_runs_are_deterministic_and_checkpoints_reload(tmp_path: Path) -> None:
    cfg = _cfg("learned")
    a = train_run(cfg, checkpoint_dir=tmp_path)
    b = train_run(cfg)
    assert a.loss_curve == b.loss_curve and a.metrics == b.metrics
    assert a.checkpoint == str(tmp_path / f"{cfg.key()}.pt")
    model = load_model(cfg, a.checkpoint)
    task = cfg.task.build()
    again = evaluate(model, task, n_samples=FAST.eval_samples, device=torch.device("cpu"))
    assert again == a.metrics


def test_metrics_cover_every_eval_length() -> None:
    result = train_run(_cfg("rope"))
    lengths = {n for n, _, _ in result.metrics}
    assert lengths == {5, 8, 10, 20}  # 1x, 1.5x, 2x, 4x of train max 5
    assert {name for _, name, _ in result.metrics} == {"exact_match", "token_acc", "loss"}
    assert all(0 <= v <= 1 for _, name, v in result.metrics if name != "loss")


@pytest.mark.parametrize("encoding", ["rope", "alibi", "learned", "shaw"])
def test_greedy_with_cache_equals_greedy_without(encoding: str) -> None:
    model, task = build_model(_cfg(encoding))
    model.eval()
    batch = task.sample(np.random.default_rng(0), 8, 6)
    prompt = torch.from_numpy(batch.tokens[:, : batch.n_prompt])
    cached = greedy_decode(model.net, prompt, 7)
    seq = prompt
    with torch.no_grad():
        for _ in range(7):
            seq = torch.cat([seq, model.net(seq)[:, -1:].argmax(-1)], dim=1)
    torch.testing.assert_close(cached, seq[:, prompt.shape[1] :])


@pytest.mark.parametrize("encoding", ["nope", "rope", "alibi", "t5", "shaw", "transformer_xl"])
@pytest.mark.parametrize("causal", [True, False])
def test_attention_maps_reproduce_every_layer_output(encoding: str, causal: bool) -> None:
    net = posenc.TinyTransformer(
        vocab_size=20, pe=encoding, d_model=32, n_heads=4, causal=causal, max_len=32
    )
    idx = torch.randint(0, 20, (2, 9))
    maps = attention_maps(net, idx)
    assert len(maps) == 2 and maps[0].shape == (2, 4, 9, 9)
    pos, x = torch.arange(9), net.pe.embed(net.tok(idx), torch.arange(9))
    for block, probs in zip(net.blocks, maps, strict=True):
        h, attn = block.norm1(x), block.attn
        _, _, v = attn._project(h)
        out = probs @ v  # (B, H, T, D)
        extra = attn.pe.relative_values(probs, pos, pos)
        out = out if extra is None else out + extra
        with torch.no_grad():
            torch.testing.assert_close(
                attn.proj(out.transpose(1, 2).reshape(2, 9, 32)),
                attn(h, pos),
                atol=1e-5,
                rtol=1e-4,
            )
            x = block(x, net.pe.prepare(pos), None)


def test_mean_distance() -> None:
    uniform_causal = torch.tril(torch.ones(3, 3)) / torch.arange(1, 4)[:, None]
    # rows: [0], [1, 0] / 2, [2, 1, 0] / 3 -> (0 + 0.5 + 1) / 3
    assert math.isclose(mean_distance(uniform_causal[None, None]), 0.5)


def test_lr_schedule_warms_up_then_decays_to_floor() -> None:
    f = [lr_factor(s, warmup=10, steps=100) for s in range(100)]
    assert f[0] == pytest.approx(0.1) and f[9] == pytest.approx(1.0)
    assert all(a >= b for a, b in itertools.pairwise(f[9:]))
    assert f[-1] == pytest.approx(0.1, abs=1e-3)


def test_lr_schedule_holds_its_floor_past_the_decay() -> None:
    f = [lr_factor(s, warmup=10, steps=100) for s in range(150)]
    assert f[100:] == [pytest.approx(0.1)] * 50


def _losses(train: TrainConfig) -> list[float]:
    losses: list[float] = []
    train_run(replace(_cfg("rope"), train=train), on_step=lambda _, loss: losses.append(loss))
    return losses


def test_a_budget_past_the_decay_leaves_the_steps_before_it_unchanged() -> None:
    """decay_steps: the first steps of a longer budget are the shorter budget's, to the bit."""
    short = _losses(replace(FAST, steps=20, decay_steps=20, gate=0.0))
    longer = _losses(replace(FAST, steps=30, decay_steps=20, gate=0.0))
    assert len(longer) == 30 and longer[:20] == short
    stretched = _losses(replace(FAST, steps=30, gate=0.0))  # the decay follows the budget
    assert stretched[:20] != short


def test_cuda_without_a_gpu_is_refused() -> None:
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(ValueError, match=r"device 'cuda' requested but torch\.cuda"):
        train_run(_cfg("rope", device="cuda"))


def test_encoders_get_the_encoder_form_unless_configured() -> None:
    enc, _ = build_model(_cfg("t5", "ascending_encoder"))
    dec, _ = build_model(_cfg("t5", "copy"))
    assert enc.net.pe.bidirectional and not dec.net.pe.bidirectional
    t5, _ = build_model(_cfg("t5", "offset", pe_config={"bidirectional": False}))
    assert not t5.net.pe.bidirectional
    assert build_model(_cfg("alibi", "offset"))[0].net.pe.bidirectional


@pytest.mark.parametrize("task", ["copy", "offset", "lm"])
def test_chunked_evaluation_equals_one_batch(task: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from posenc.lab import evaluate as ev

    model, t = build_model(_cfg("alibi", task))
    whole = evaluate(model, t, n_samples=24, device=torch.device("cpu"))
    monkeypatch.setattr(ev, "EVAL_BATCH", 5)  # 5 + 5 + 5 + 5 + 4
    chunked = evaluate(model, t, n_samples=24, device=torch.device("cpu"))
    assert [r[:2] for r in whole] == [r[:2] for r in chunked]
    np.testing.assert_allclose([r[2] for r in whole], [r[2] for r in chunked], rtol=1e-5)


def test_greedy_exact_match_equals_teacher_forced_all_correct(tmp_path: Path) -> None:
    """Greedy decoding reproduces the answer iff every teacher-forced argmax is right."""
    cfg = replace(_cfg("nope", "copy_rep"), train=replace(FAST, steps=150))
    model = load_model(cfg, str(train_run(cfg, checkpoint_dir=tmp_path).checkpoint))
    batch = cfg.task.build().sample(np.random.default_rng(1), 64, 5)
    tokens = torch.from_numpy(batch.tokens)
    with torch.no_grad():
        forced = model(tokens[:, :-1])[:, batch.n_prompt - 1 :].argmax(-1)  # (B, A)
    greedy = greedy_decode(model.net, tokens[:, : batch.n_prompt], forced.shape[1])
    answer = tokens[:, batch.n_prompt :]
    exact = (greedy == answer).all(1)
    torch.testing.assert_close(exact, (forced == answer).all(1))
    assert exact.any() and not exact.all()
    # so evaluation decodes only the samples teacher forcing gets wrong, with the same result
    with torch.no_grad():
        scored = _generate(model, batch, torch.device("cpu"))
    torch.testing.assert_close(scored["exact_match"], exact.float())
    torch.testing.assert_close(scored["token_acc"], (greedy == answer).float().mean(1))


def test_two_sweeps_saving_one_checkpoint_at_once_both_succeed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two sweeps on one output directory may finish the same run together: the other
    save lands between this one's write and rename; both succeed, no temporary file stays."""
    from posenc.lab import train

    cfg = _cfg("learned")
    model, _ = build_model(cfg)
    save, saving = torch.save, []

    def interleaved(obj: Any, f: Any) -> None:
        save(obj, f)
        if not saving:
            saving.append(f)
            train._save(model, tmp_path, cfg.key())  # the other sweep's whole save

    monkeypatch.setattr(torch, "save", interleaved)
    path = train._save(model, tmp_path, cfg.key())
    assert path == str(tmp_path / f"{cfg.key()}.pt")
    assert [p.name for p in tmp_path.iterdir()] == [f"{cfg.key()}.pt"]
    assert load_model(cfg, path) is not None


def _gated(
    gate: float, steps: int, monkeypatch: pytest.MonkeyPatch
) -> tuple[Any, list[tuple[str, float]]]:
    """A run of copy_rep under ``gate`` (checked every 10 steps) and the scores it saw, each
    named by its samples: "gate" (the fixed ones) or "fresh" (a confirmation)."""
    from posenc.lab import train

    scores: list[tuple[str, float]] = []
    score, fixed = train.gate_score, []

    def logged(model: Any, batches: Any, *args: Any) -> float:
        fixed[:] = fixed or [batches]  # the first check scores the fixed samples
        scores.append(("gate" if batches is fixed[0] else "fresh", score(model, batches, *args)))
        return scores[-1][1]

    monkeypatch.setattr(train, "gate_score", logged)
    t = replace(FAST, steps=steps, gate=gate, gate_every=10, gate_samples=64, gate_confirm=32)
    return train_run(replace(_cfg("nope", "copy_rep"), train=t)), scores


def test_the_gate_stops_a_run_at_the_first_check_it_passes_and_a_fresh_draw_confirms(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    result, scores = _gated(0.9, 400, monkeypatch)
    assert scores[-2][0] == "gate" and scores[-1][0] == "fresh"
    assert result.passed_gate and result.gate_metric == min(scores[-2][1], scores[-1][1]) >= 0.9
    checks = [s for s in scores if s[0] == "gate"]
    for (name, value), (after, _) in itertools.pairwise(scores):  # on while it did not pass
        assert value < 0.9 or (name == "gate" and after == "fresh")
    assert result.steps_trained == 10 * len(checks) < 400
    assert result.loss_curve[-1][0] == result.steps_trained - 1


def test_a_pass_on_the_gate_s_samples_stands_only_when_fresh_ones_agree(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fixed samples pass from the first check; fresh draws (one per check, each new) fail
    twice, then pass: the run trains on through both failed confirmations."""
    from posenc.lab import train

    draws: list[int] = []
    fresh_scores = iter([0.5, 0.95, 1.0])

    def confirm(task: Any, n_samples: int, draw: int) -> list[Any]:
        draws.append(draw)
        assert n_samples == 32
        return ["fresh"]

    def score(model: Any, batches: Any, device: Any, threshold: Any = None) -> float:
        return next(fresh_scores) if batches == ["fresh"] else 1.0

    monkeypatch.setattr(train, "confirm_batches", confirm)
    monkeypatch.setattr(train, "gate_score", score)
    t = replace(FAST, steps=400, gate=0.99, gate_every=10, gate_confirm=32)
    result = train_run(replace(_cfg("nope", "copy_rep"), train=t))
    assert draws == [9, 19, 29]  # a new draw at every confirmation
    assert result.passed_gate and result.steps_trained == 30 and result.gate_metric == 1.0


def test_confirmation_samples_are_fresh_per_draw_and_apart_from_the_gate_s() -> None:
    from posenc.lab.evaluate import confirm_batches, gate_batches
    from posenc.lab.tasks import make_task

    task = make_task("copy_rep", train_len=(2, 4))
    a, b, again = (confirm_batches(task, 16, draw) for draw in (0, 1, 0))
    assert [x.tokens.shape[0] for x in a] == [16, 16, 16]  # every training length, n each
    assert all(np.array_equal(x.tokens, y.tokens) for x, y in zip(a, again, strict=True))
    assert not any(np.array_equal(x.tokens, y.tokens) for x, y in zip(a, b, strict=True))
    gate = gate_batches(task, 48)
    assert not any(np.array_equal(x.tokens, y.tokens) for x, y in zip(a, gate, strict=True))


def test_a_run_that_misses_the_gate_trains_its_budget_and_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    result, scores = _gated(1.0, 25, monkeypatch)
    assert [name for name, _ in scores] == ["gate"] * 3  # after steps 10, 20, 25 (the last)
    assert not result.passed_gate and result.gate_metric == scores[-1][1] < 1.0
    assert result.steps_trained == 25


def test_gate_off_trains_the_budget_and_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    result, scores = _gated(0.0, 25, monkeypatch)
    assert len(scores) == 1 and result.passed_gate and result.steps_trained == 25


def test_pe_lr_scale_multiplies_the_encoding_s_learning_rate(tmp_path: Path) -> None:
    """The first AdamW step moves each parameter by about its learning rate: T5's table by
    ten times the others' with ``pe_lr_scale = 10``."""
    moved = {}
    for scale in (1.0, 10.0):
        train = replace(FAST, steps=1, warmup=1, weight_decay=0.0, pe_lr_scale=scale)
        cfg = replace(_cfg("t5"), train=train)
        before, _ = build_model(cfg)
        after = load_model(
            cfg, str(train_run(cfg, checkpoint_dir=tmp_path / str(scale)).checkpoint)
        )
        delta = {
            name: (p - q).abs().max().item()
            for (name, p), q in zip(after.named_parameters(), before.parameters(), strict=True)
        }
        moved[scale] = delta
    lr = FAST.lr
    assert moved[1.0]["net.pe.weight"] == pytest.approx(lr, rel=0.01)
    assert moved[10.0]["net.pe.weight"] == pytest.approx(10 * lr, rel=0.01)
    assert moved[10.0]["net.tok.weight"] == pytest.approx(lr, rel=0.01)


@pytest.mark.parametrize(("task", "steps"), [("copy_rep", 200), ("ascending_encoder", 30)])
def test_a_check_against_a_threshold_decides_as_the_full_score_does(task: str, steps: int) -> None:
    """``gate_score(threshold=)`` stops once the misses keep the score below the threshold:
    the same pass or fail as the full score, and then a bound at least the full score."""
    from posenc.lab.evaluate import gate_batches, gate_score
    from posenc.lab.train import fit

    cpu = torch.device("cpu")
    cfg = replace(_cfg("nope", task), train=replace(FAST, steps=steps, gate=0.0))
    model, t = build_model(cfg)
    fit(model, t, cfg, cpu)
    batches = gate_batches(t, 64)
    full = gate_score(model, batches, cpu)
    assert 0.0 < full < 1.0  # partly learned: some checks pass, some stop early
    for threshold in (0.0, full / 2, full, math.nextafter(full, 1.0), (1 + full) / 2, 1.0):
        bound = gate_score(model, batches, cpu, threshold)
        assert (bound >= threshold) == (full >= threshold)
        assert bound == full if full >= threshold else full <= bound < threshold


def test_the_gate_scores_the_worst_training_length_not_the_pooled_one(monkeypatch) -> None:
    """Lengths solved at 1.0, 1.0, 0.75 pool to 0.92 (above 0.9); the gate says 0.75. A check
    against a threshold ends at the first length below it (longest first) with that score."""
    from posenc.lab import evaluate
    from posenc.lab.tasks import make_task

    task = make_task("copy_rep", train_len=(1, 3))
    batches = evaluate.gate_batches(task, 12)  # 4 samples at each of lengths 1, 2, 3
    solved = {1: [1, 1, 1, 1], 2: [1, 1, 1, 1], 3: [1, 1, 1, 0]}
    seen: list[int] = []

    def hits(model, batch, device):
        n = next(n for n, b in zip((1, 2, 3), batches, strict=True) if b is batch)
        seen.append(n)
        return torch.tensor(solved[n], dtype=torch.bool)

    monkeypatch.setattr(evaluate, "_hits", hits)
    model = torch.nn.Linear(1, 1)  # only its train/eval mode is touched
    cpu = torch.device("cpu")
    assert evaluate.gate_score(model, batches, cpu) == 0.75
    assert seen == [3, 2, 1]
    seen.clear()
    assert evaluate.gate_score(model, batches, cpu, threshold=0.9) == 0.75
    assert seen == [3]  # the longest length decided it
    solved[3] = [1, 1, 1, 1]
    solved[1] = [0, 1, 1, 1]
    seen.clear()
    assert evaluate.gate_score(model, batches, cpu, threshold=0.9) == 0.75
    assert seen == [3, 2, 1]
    assert model.training
