"""The lab on the JAX backend: a decoder task trains, evaluates with the torch lab's metrics,
and its checkpoint loads into the torch LabModel with the same logits."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from posenc.lab.config import ModelConfig, RunConfig, TaskConfig, TrainConfig
from posenc.lab.model import LabModel

jax = pytest.importorskip("jax", reason="the [jax] extra is not installed")
import jax.numpy as jnp  # noqa: E402

from posenc.lab.backend_flax import build_model, train_run  # noqa: E402

MODEL = ModelConfig(d_model=32, n_layers=1, n_heads=2)
TRAIN = TrainConfig(steps=100, batch_size=32, lr=1e-2, warmup=5, eval_samples=16)


def test_copy_task_trains_and_checkpoint_loads_in_torch(tmp_path: object) -> None:
    task = TaskConfig(name="copy", train_len=(4, 4), eval_lens=(4, 8))
    cfg = RunConfig(encoding="alibi", task=task, model=MODEL, train=TRAIN, seed=3)
    result = train_run(cfg, checkpoint_dir=tmp_path)  # type: ignore[arg-type]
    first, last = result.loss_curve[0][1], result.loss_curve[-1][1]
    assert last < 0.7 * first, f"loss {first:.3f} -> {last:.3f}"
    assert {(n, m) for n, m, _ in result.metrics} == {
        (n, m) for n in (4, 8) for m in ("exact_match", "token_acc", "loss")
    }
    assert all(0.0 <= v <= 1.0 for _, m, v in result.metrics if m != "loss")
    # its whole budget trained, the gate scored at the end (greedy exact match at length 4)
    assert result.steps_trained == 100 and 0.0 <= result.gate_metric <= 1.0
    assert result.passed_gate == (result.gate_metric >= TRAIN.gate)
    # the JAX-trained weights, loaded by the torch lab, give the same logits
    torch_model = LabModel(task.build(), MODEL, "alibi")
    torch_model.load_state_dict(torch.load(result.checkpoint, weights_only=True))
    flax_model, _ = build_model(cfg)
    torch_model.net.eval()
    tokens = np.random.default_rng(0).integers(0, 13, (2, 10))
    from posenc.flax import load_torch_state_dict

    load_torch_state_dict(flax_model, torch_model.net.state_dict())
    with torch.no_grad():
        want = torch_model(torch.from_numpy(tokens)).numpy()
    np.testing.assert_allclose(np.asarray(flax_model(jnp.asarray(tokens))), want, atol=3e-5)


def test_jax_backend_rejects_classification() -> None:
    with pytest.raises(
        ValueError, match=r"runs \('decoder', 'lm'\) tasks, got 'ascending_encoder'"
    ):
        build_model(RunConfig(encoding="rope", task=TaskConfig(name="ascending_encoder")))


def test_two_sweeps_saving_one_flax_checkpoint_at_once_both_succeed(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As the torch lab's save: another save landing between this one's write and rename
    leaves both successful and no temporary file behind."""
    from pathlib import Path

    from posenc.lab import backend_flax

    cfg = RunConfig(encoding="rope", task=TaskConfig(name="copy"), model=MODEL, train=TRAIN)
    model, _ = build_model(cfg)
    save, saving = torch.save, []

    def interleaved(obj: object, f: object) -> None:
        save(obj, f)
        if not saving:
            saving.append(f)
            backend_flax._save(model, tmp_path, cfg.key())  # type: ignore[arg-type]

    monkeypatch.setattr(torch, "save", interleaved)
    path = backend_flax._save(model, tmp_path, cfg.key())  # type: ignore[arg-type]
    assert [p.name for p in Path(str(tmp_path)).iterdir()] == [f"{cfg.key()}.pt"]
    assert path is not None and torch.load(path, weights_only=True)


def test_jax_backend_refuses_a_pe_learning_rate_scale() -> None:
    train = TrainConfig(pe_lr_scale=10.0)
    with pytest.raises(ValueError, match=r"pe_lr_scale must be 1 \(torch only\), got 10\.0"):
        build_model(RunConfig(encoding="t5", task=TaskConfig(name="copy"), train=train))


def test_the_flax_schedule_decays_over_decay_steps_then_holds_its_floor() -> None:
    """As torch's ``lr_factor``: warm-up, cosine to 10% at the horizon, 10% after it."""
    from posenc.flax.train import schedule
    from posenc.lab.train import lr_factor

    got = [float(schedule(1.0, steps=20, warmup=5)(s)) for s in range(30)]
    want = [lr_factor(s, warmup=5, steps=20) for s in range(30)]
    assert got == pytest.approx(want, rel=1e-5)
    assert got[20:] == pytest.approx([0.1] * 10)


def test_the_flax_trainer_refuses_a_decay_of_no_steps() -> None:
    from posenc.flax.train import train_decoder

    with pytest.raises(ValueError, match=r"decay_steps must be an integer >= 1, got 0"):
        train_decoder(None, None, steps=5, decay_steps=0)  # type: ignore[arg-type]
