"""Training and decoding helpers for the Flax TinyTransformer (what ``posenc lab`` needs for a
JAX backend): AdamW with warm-up + cosine decay and gradient clipping, as the torch lab."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from .._validate import check_positive_int
from .model import TinyTransformer

Array = jax.Array
#: ``sample(step)`` -> (inputs (B, T), targets (B, T)) integer arrays, -100 targets ignored.
Sampler = Callable[[int], tuple[np.ndarray, np.ndarray]]


def decoder_arrays(tokens: np.ndarray, n_prompt: int) -> tuple[np.ndarray, np.ndarray]:
    """Inputs tokens[:, :-1] and next-token targets tokens[:, 1:], the prompt part (before the
    answer at ``n_prompt``) set to -100, as the torch lab's ``targets``. Shapes (B, T-1) each."""
    if tokens.ndim != 2 or tokens.shape[1] < 2:
        raise ValueError(f"tokens must have shape (B, T) with T >= 2, got {tokens.shape}")
    targets = tokens[:, 1:].copy()
    targets[:, : max(n_prompt - 1, 0)] = -100
    return tokens[:, :-1], targets


def schedule(lr: float, *, steps: int, warmup: int, floor: float = 0.1) -> optax.Schedule:
    """Linear warm-up to ``lr`` over ``warmup`` steps, then cosine decay to ``floor``·lr."""
    decay = optax.cosine_decay_schedule(lr, max(1, steps - warmup), alpha=floor)
    ramp = optax.linear_schedule(lr / max(1, warmup), lr, max(1, warmup - 1))
    return optax.join_schedules([ramp, decay], [warmup])


def _step(model: TinyTransformer, opt: nnx.Optimizer, idx: Array, targets: Array) -> Array:
    loss, grads = nnx.value_and_grad(lambda m: m.loss(idx, targets))(model)
    opt.update(model, grads)
    return loss


_jit_step = nnx.jit(_step)


def train_decoder(
    model: TinyTransformer,
    sample: Sampler,
    *,
    steps: int,
    lr: float = 3e-3,
    warmup: int = 10,
    decay_steps: int | None = None,
    weight_decay: float = 0.0,
    grad_clip: float = 1.0,
    on_step: Callable[[int, float], None] | None = None,
) -> list[float]:
    """Train ``model`` in place for ``steps`` batches from ``sample``; returns the loss per step.
    The cosine decay ends at ``decay_steps`` (None: ``steps``), the rate at its floor after.

    One ``nnx.jit`` step (compiled once per batch shape; eager for encodings that are not
    ``jittable``). Raises: ValueError for steps or decay_steps < 1, or warmup < 0.
    """
    check_positive_int(steps, "steps")
    check_positive_int(warmup, "warmup", minimum=0)
    if decay_steps is not None:
        check_positive_int(decay_steps, "decay_steps")
    tx = optax.chain(
        optax.clip_by_global_norm(grad_clip),
        optax.adamw(
            schedule(lr, steps=decay_steps or steps, warmup=warmup),
            b1=0.9,
            b2=0.98,
            weight_decay=weight_decay,
        ),
    )
    opt = nnx.Optimizer(model, tx, wrt=nnx.Param)
    update = _jit_step if model.pe.jittable else _step  # eager-only encodings skip jit
    losses = []
    for step in range(steps):
        idx, targets = sample(step)
        loss = float(update(model, opt, jnp.asarray(idx), jnp.asarray(targets)))
        losses.append(loss)
        if on_step is not None:
            on_step(step, loss)
    return losses


def greedy_decode(model: TinyTransformer, prompt: Array, steps: int) -> Array:
    """Greedy continuation (B, steps) of ``prompt`` (B, P), one token at a time with a KV cache."""
    check_positive_int(steps, "steps")
    cache, out = model.new_cache(), [prompt]
    for _ in range(steps):  # the prompt, then each new token, through the KV cache
        out.append(jnp.argmax(model(out[-1], cache=cache)[:, -1:], axis=-1))  # (B, 1)
    return jnp.concatenate(out[1:], axis=1)  # (B, steps)
