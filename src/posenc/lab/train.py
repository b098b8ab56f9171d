"""Train one run: AdamW, warm-up + cosine schedule, gradient clipping, fixed seeds, and the
competence gate: a run trains until it solves held-out samples at every training length
(``TrainConfig.gate``, checked every ``gate_every`` steps) or its step budget ends.

On CPU a run is deterministic: the same ``RunConfig`` gives the same weights and metrics
(one torch thread per worker process, numpy and torch generators seeded from ``seed``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .._files import atomic_open
from .._validate import check_device
from .config import RunConfig, TrainConfig
from .evaluate import GATED_KINDS, Metric, confirm_batches, evaluate, gate_batches, gate_score
from .model import LabModel
from .tasks import Batch, Task


@dataclass(frozen=True)
class RunResult:
    """What a finished run hands to the store (plain data: it crosses process boundaries).

    ``gate_metric`` is the gate's last score (held-out, the worst training length),
    ``passed_gate`` whether it reached ``train.gate`` (always, for tasks without a gate),
    ``steps_trained`` the steps taken (the budget, or fewer when the gate stopped the run)."""

    key: str
    config: dict
    metrics: list[Metric]
    loss_curve: list[tuple[int, float]] = field(default_factory=list)
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    checkpoint: str | None = None
    steps_trained: int = 0
    gate_metric: float = math.nan
    passed_gate: bool = False


def lr_factor(step: int, *, warmup: int, steps: int, floor: float = 0.1) -> float:
    """Linear warm-up over ``warmup`` steps, then cosine decay from 1 to ``floor`` at step
    ``steps``, ``floor`` after it."""
    if step < warmup:
        return (step + 1) / warmup
    t = (step - warmup) / max(1, steps - warmup)
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(t, 1.0)))


def train_batches(task: Task, cfg: RunConfig) -> Callable[[], Batch]:
    """Training batches of ``cfg.train.batch_size`` samples, each batch of a length drawn
    uniformly from ``task.train_len``, all from one generator seeded by ``cfg.seed``."""
    rng, (lo, hi) = np.random.default_rng(cfg.seed), task.train_len
    return lambda: task.sample(rng, cfg.train.batch_size, int(rng.integers(lo, hi + 1)))


def loss_curve(losses: list[float]) -> list[tuple[int, float]]:
    """(step, loss) every 10 steps and at the last."""
    return [(s, v) for s, v in enumerate(losses) if s % 10 == 0 or s == len(losses) - 1]


def build_model(cfg: RunConfig) -> tuple[LabModel, Task]:
    """The seeded model for ``cfg`` and its task."""
    task = cfg.task.build()
    torch.manual_seed(cfg.seed)
    return LabModel(task, cfg.model, cfg.encoding, cfg.pe_config), task


def train_run(
    cfg: RunConfig,
    *,
    checkpoint_dir: str | Path | None = None,
    on_step: Callable[[int, float], None] | None = None,
) -> RunResult:
    """Train ``cfg`` and evaluate it; save ``<key>.pt`` (a state dict) in ``checkpoint_dir``.

    ``cfg.backend == "jax"`` trains with ``backend_flax.train_run`` (decoder and LM tasks).
    """
    if cfg.backend == "jax":
        from .backend_flax import train_run as train_run_jax

        return train_run_jax(cfg, checkpoint_dir=checkpoint_dir, on_step=on_step)
    start, cpu_start = time.perf_counter(), time.process_time()
    device = check_device(cfg.device)
    model, task = build_model(cfg)
    trained = fit(model.to(device), task, cfg, device, on_step)
    metrics = evaluate(model, task, n_samples=cfg.train.eval_samples, device=device)
    path = _save(model, checkpoint_dir, cfg.key())
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    return RunResult(
        cfg.key(),
        asdict(cfg),
        metrics,
        loss_curve(trained.losses),
        seconds,
        cpu,
        path,
        steps_trained=len(trained.losses),
        gate_metric=trained.gate_metric,
        passed_gate=trained.passed_gate,
    )


@dataclass(frozen=True)
class Fitted:
    """The loss of every step taken, the gate's last score and whether it passed."""

    losses: list[float]
    gate_metric: float
    passed_gate: bool


class Gate:
    """The competence gate of one run (``TrainConfig.gate``): ``due(step)`` after every
    ``gate_every`` steps and the last, ``passed(score)`` when the score reaches the gate.
    Tasks outside ``GATED_KINDS`` (and ``gate = 0``) are scored at the last step only and
    always pass."""

    def __init__(self, task: Task, train: TrainConfig) -> None:
        self.task, self.batches = task, gate_batches(task, train.gate_samples)
        self.active = task.kind in GATED_KINDS and train.gate > 0
        self.threshold, self.every, self.steps = train.gate, train.gate_every, train.steps
        self.confirm = train.gate_confirm

    def due(self, step: int) -> bool:
        """Score after step ``step`` (0-based)?"""
        return step + 1 == self.steps or (self.active and (step + 1) % self.every == 0)

    def passed(self, score: float) -> bool:
        return not self.active or score >= self.threshold

    def score(self, model: LabModel, device: torch.device, step: int) -> float:
        """The score after step ``step``: the gate's samples, and where they pass, the worse
        of that and a fresh confirmation (``confirm_batches``, ``gate_confirm`` a length, drawn
        anew at each step). A check before the last only decides pass or fail
        (``gate_score``'s ``threshold``), the last one is exact (the run's ``gate_metric``)."""
        last = step + 1 == self.steps or not self.active
        threshold = None if last else self.threshold
        score = gate_score(model, self.batches, device, threshold)
        if not self.active or score < self.threshold:
            return score
        fresh = confirm_batches(self.task, self.confirm, draw=step)
        return min(score, gate_score(model, fresh, device, threshold))


def optimizer(model: LabModel, t: TrainConfig) -> torch.optim.AdamW:
    """AdamW (betas 0.9, 0.98), fused (one kernel for every parameter, CPU and CUDA); the
    encoding's own parameters in a group of their own whose learning rate is
    ``t.pe_lr_scale`` times the others' (``lr_scale``: what the schedule multiplies)."""
    own = {id(p) for p in model.pe_parameters()}
    params = list(model.parameters())
    groups = [
        {"params": [p for p in params if id(p) not in own], "lr_scale": 1.0},
        {"params": [p for p in params if id(p) in own], "lr_scale": t.pe_lr_scale},
    ]
    return torch.optim.AdamW(
        [g for g in groups if g["params"]],
        lr=t.lr,
        weight_decay=t.weight_decay,
        betas=(0.9, 0.98),
        fused=True,
    )


def fit(
    model: LabModel,
    task: Task,
    cfg: RunConfig,
    device: torch.device,
    on_step: Callable[[int, float], None] | None = None,
) -> Fitted:
    """AdamW steps on ``train_batches`` until the gate passes or ``cfg.train.steps`` are done."""
    t = cfg.train
    model.train()
    params = list(model.parameters())  # walked once, not at every step's clipping
    opt, gate = optimizer(model, t), Gate(task, t)
    next_batch, losses, score = train_batches(task, cfg), [], math.nan
    for step in range(t.steps):
        factor = lr_factor(step, warmup=t.warmup, steps=t.decay_steps or t.steps)
        for group in opt.param_groups:
            group["lr"] = t.lr * group["lr_scale"] * factor
        loss = model.loss(next_batch(), device)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, t.grad_clip, foreach=True)
        opt.step()
        losses.append(loss.item())
        if on_step is not None:
            on_step(step, losses[-1])
        if gate.due(step):
            score = gate.score(model, device, step)
            if gate.passed(score):
                break
    return Fitted(losses, score, gate.passed(score))


def _save(model: LabModel, directory: str | Path | None, key: str) -> str | None:
    return save_checkpoint({k: v.cpu() for k, v in model.state_dict().items()}, directory, key)


def save_checkpoint(state: dict[str, Any], directory: str | Path | None, key: str) -> str | None:
    """Write ``state`` to ``directory/key.pt`` atomically (``posenc._files``: a kill or a full
    disk leaves the old file or the new one); None when no directory is given.

    The archive is written through a file object, so torch names it ``archive`` whatever the
    temporary file is called: identical states give identical bytes. A failed write raises the
    OSError that says why (ENOSPC: disk full) with the checkpoint's name, not torch's
    "[enforce fail at inline_container.cc]" RuntimeError that hides it.
    """
    if directory is None:
        return None
    path = Path(directory) / f"{key}.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(path, "wb") as f:
        try:
            torch.save(state, f)
        except RuntimeError as err:  # torch's writer meets the file's OSError and raises this
            if isinstance(err.__context__, OSError):
                raise err.__context__ from None
            raise
    return str(path)


def load_model(cfg: RunConfig, path: str | Path) -> LabModel:
    """Rebuild ``cfg``'s model and load its checkpoint (``weights_only=True``: no pickle code)."""
    model, _ = build_model(cfg)
    model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
    return model.eval()
