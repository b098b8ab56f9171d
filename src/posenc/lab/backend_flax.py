"""The lab's JAX backend (``backend: jax``): decoder and LM tasks trained and evaluated with
the Flax TinyTransformer (``posenc.flax``), with the torch ``train_run``'s seeds, schedule and
metrics. Imported by ``train.train_run`` for jax runs only (``posenc.flax`` never imports the
lab). The checkpoint is a torch state dict of ``LabModel`` (keys ``net.*``), so the torch lab,
report and plots load a JAX-trained run unchanged.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ..flax.convert import to_torch_state_dict
from ..flax.model import TinyTransformer
from ..flax.train import decoder_arrays, train_decoder
from .config import RunConfig
from .evaluate import (
    GATED_KINDS,
    Metric,
    bucket_rows,
    confirm_batches,
    eval_batch,
    gate_batches,
)
from .train import RunResult, loss_curve, save_checkpoint, train_batches

Array = jax.Array
KINDS = ("decoder", "lm")


def build_model(cfg: RunConfig) -> tuple[TinyTransformer, Any]:
    """The seeded Flax model for ``cfg`` and its task (sized as the torch ``LabModel``).

    Raises: ValueError for a classification task.
    """
    task = cfg.task.build()
    if cfg.train.pe_lr_scale != 1.0:
        raise ValueError(
            f"backend jax: train.pe_lr_scale must be 1 (torch only), got {cfg.train.pe_lr_scale}"
        )
    if cfg.model.embed_std != 0.02:
        raise ValueError(
            f"backend jax: model.embed_std must be 0.02 (torch only), got {cfg.model.embed_std}"
        )
    if task.kind not in KINDS:
        raise ValueError(f"the jax backend runs {KINDS} tasks, got {task.name!r} ({task.kind})")
    model = TinyTransformer(
        vocab_size=task.vocab_size,
        pe=cfg.encoding,
        **{
            k: v for k, v in asdict(cfg.model).items() if k not in ("architecture", "embed_std")
        },  # RunConfig:
        # d_model, n_layers, n_heads, d_ff, dropout of a decoder (torch trains encoder-decoders)
        causal=True,
        max_len=task.max_seq_len,
        pe_config=cfg.pe_config or None,
        rngs=nnx.Rngs(cfg.seed),
    )
    return model, task


def train_run(
    cfg: RunConfig,
    *,
    checkpoint_dir: str | Path | None = None,
    on_step: Callable[[int, float], None] | None = None,
) -> RunResult:
    """Train ``cfg`` with JAX and evaluate it; save ``<key>.pt`` in ``checkpoint_dir``
    (the torch ``posenc.lab.train.train_run`` signature)."""
    start, cpu_start = time.perf_counter(), time.process_time()
    model, task = build_model(cfg)
    t, next_batch = cfg.train, train_batches(task, cfg)

    def sample(step: int) -> tuple[np.ndarray, np.ndarray]:
        batch = next_batch()
        return decoder_arrays(batch.tokens, batch.n_prompt)

    model.train()  # dropout and randomized positions act in training, as torch's model.train()
    losses = train_decoder(
        model,
        sample,
        steps=t.steps,
        lr=t.lr,
        warmup=t.warmup,
        decay_steps=t.decay_steps,
        weight_decay=t.weight_decay,
        grad_clip=t.grad_clip,
        on_step=on_step,
    )
    curve = loss_curve(losses)
    model.eval()
    metrics = evaluate(model, task, n_samples=t.eval_samples)
    score = gate_score(model, task, t.gate_samples, t.gate_confirm)
    path = _save(model, checkpoint_dir, cfg.key())
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    passed = task.kind not in GATED_KINDS or score >= t.gate
    return RunResult(
        cfg.key(),
        asdict(cfg),
        metrics,
        curve,
        seconds,
        cpu,
        path,
        steps_trained=len(losses),
        gate_metric=score,
        passed_gate=passed,
    )


def gate_score(model: TinyTransformer, task: Any, n_samples: int, n_confirm: int) -> float:
    """The competence gate's score (``evaluate.gate_batches``: the worst training length's
    exact match of greedy answers, with ``evaluate.confirm_batches``' ``n_confirm`` fresh
    samples a length; next-character accuracy for ``lm``), taken once at the end: this backend
    trains its whole step budget (the gate does not stop it early)."""
    if task.kind == "lm":
        tokens = jnp.asarray(gate_batches(task, n_samples)[0].tokens)  # (B, n + 1)
        return float((jnp.argmax(model(tokens[:, :-1]), axis=-1) == tokens[:, 1:]).mean())
    batches = gate_batches(task, n_samples) + confirm_batches(task, n_confirm, draw=0)
    scores = [_generate(model, batch)["exact_match"] for batch in batches]
    return float(np.min(scores))  # the worst training length, as the torch lab's gate


def evaluate(model: TinyTransformer, task: Any, *, n_samples: int) -> list[Metric]:
    """Rows (length, metric, value) as the torch lab's ``evaluate`` (same evaluation samples)."""
    if task.kind == "lm":
        return _lm_buckets(model, task, n_samples)
    return [
        (n, name, value)
        for n in task.eval_lens
        for name, value in _generate(model, eval_batch(task, n, n_samples)).items()
    ]


def _jit(fn: Callable[..., Any], model: TinyTransformer) -> Callable[..., Any]:
    """``fn`` compiled with ``nnx.jit`` unless the model's encoding cannot be traced."""
    return nnx.jit(fn) if model.pe.jittable else fn


def greedy_fixed(model: TinyTransformer, tokens: np.ndarray, n_prompt: int) -> np.ndarray:
    """Greedy answers (B, T - n_prompt) decoded in a buffer of the final length T: the causal
    model's logits at t see only tokens <= t, so one compiled forward serves every step."""
    forward = _jit(lambda m, x: m(x), model)
    buf = jnp.asarray(tokens).at[:, n_prompt:].set(0)  # (B, T), answer slots blank
    for t in range(n_prompt, tokens.shape[1]):
        nxt = jnp.argmax(forward(model, buf)[:, t - 1], axis=-1)  # (B,)
        buf = buf.at[:, t].set(nxt)
    return np.asarray(buf[:, n_prompt:])


def _generate(model: TinyTransformer, batch: Any) -> dict[str, float]:
    inputs, targets = (jnp.asarray(a) for a in decoder_arrays(batch.tokens, batch.n_prompt))
    loss = float(_jit(TinyTransformer.loss, model)(model, inputs, targets))
    pred = greedy_fixed(model, batch.tokens, batch.n_prompt)  # (B, A)
    hit = pred == batch.tokens[:, batch.n_prompt :]
    return {
        "exact_match": float(hit.all(axis=1).mean()),
        "token_acc": float(hit.mean()),
        "loss": loss,
    }


def _lm_buckets(model: TinyTransformer, task: Any, n_samples: int) -> list[Metric]:
    """Loss and next-character accuracy per bucket of ``train_len[1]`` positions."""
    tokens = jnp.asarray(eval_batch(task, max(task.eval_lens), n_samples).tokens)  # (B, n + 1)
    logits = model(tokens[:, :-1]).astype(jnp.float32)  # (B, n, V)
    logp = jax.nn.log_softmax(logits, axis=-1)
    loss = -jnp.take_along_axis(logp, tokens[:, 1:, None], axis=-1)[..., 0]  # (B, n)
    hit = (jnp.argmax(logits, axis=-1) == tokens[:, 1:]).astype(jnp.float32)
    return bucket_rows(loss, hit, task.train_len[1])


def _save(model: TinyTransformer, directory: str | Path | None, key: str) -> str | None:
    state = {f"net.{k}": v for k, v in to_torch_state_dict(model).items()}
    return save_checkpoint(state, directory, key)  # the torch lab's file: same format and path
