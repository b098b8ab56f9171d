"""Pre-training at the context L and the short fine-tune at a longer length.

Both are AdamW (betas 0.9, 0.98, weight decay 0.01, gradient norm clipped at 1) with the
lab's warm-up + cosine schedule (``posenc.lab.train.lr_factor``) on rows of
``corpus.training_rows``: text windows and passkey prompts. The fine-tune follows Chen et al.
2023 (arXiv:2306.15595, sec. 3): a few percent of the pre-training steps at the target length
with the scaled positions, a smaller learning rate, and the tokens per step of pre-training.
Data order depends on the seed (and the target length) only, so within a seed every method is
fine-tuned on the same rows (paired comparisons).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from ...models import TinyTransformer
from ..config import ExtendConfig
from ..train import lr_factor
from .corpus import corpus, training_rows
from .methods import build_model


def fit(
    model: TinyTransformer,
    cfg: ExtendConfig,
    rng: np.random.Generator,
    *,
    steps: int,
    lr: float,
    warmup: int,
    context: int,
    rows: int,
    pe_lr_scale: float = 1.0,
    on_step: Callable[[int, float], None] | None = None,
) -> list[float]:
    """``steps`` AdamW steps on ``rows`` rows of ``context`` tokens, the encoding's own
    parameters at ``pe_lr_scale``·``lr``; the loss of every step."""
    text = corpus()[0]
    passkey_rows = round(rows * cfg.passkey_fraction)
    own = {id(p) for p in model.pe.parameters()}
    groups = [
        {"params": [p for p in model.parameters() if id(p) not in own], "lr": lr},
        {"params": [p for p in model.parameters() if id(p) in own], "lr": lr * pe_lr_scale},
    ]
    opt = torch.optim.AdamW(
        [g for g in groups if g["params"]], betas=(0.9, 0.98), weight_decay=0.01, fused=True
    )
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: lr_factor(s, warmup=warmup, steps=steps)
    )
    model.train()
    losses = []
    for step in range(steps):
        x, y = training_rows(
            rng,
            text,
            rows=rows,
            context=context,
            passkey_rows=passkey_rows,
            digits=cfg.passkey_digits,
        )
        loss = model.loss(torch.from_numpy(x), torch.from_numpy(y))  # IGNORE (-100) unscored
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if on_step is not None:
            on_step(step, losses[-1])
    return losses


def pretrain(cfg: ExtendConfig, encoding: str, seed: int) -> tuple[TinyTransformer, list[float]]:
    """A model with ``encoding`` trained at the context L from ``seed`` (weights and data).

    FIRE's parameters learn at ``cfg.fire_lr_scale``·lr (0.3): at the full rate its MLP makes
    every head a steep recency bias (7-9 nats against keys 63 back by step 250, 11-20 at the
    end) before the passkey's copy is learned; distant keys then get too little weight for a
    gradient to teach it (passkey at L 0.00 on 3 seeds, key tokens at chance, 2.3 nats).
    At 0.3x, 3 seeds: passkey at L 0.93, loss at L 1.79 (1x: 1.76); 0.1x, seed 0: 1.00, 1.97.
    """
    torch.manual_seed(seed)
    model = build_model(cfg, encoding)
    losses = fit(
        model,
        cfg,
        np.random.default_rng([seed, 0]),
        steps=cfg.steps,
        lr=cfg.lr,
        warmup=cfg.warmup,
        context=cfg.context,
        rows=cfg.batch,
        pe_lr_scale=cfg.fire_lr_scale if encoding == "fire" else 1.0,
    )
    return model.eval(), losses


def fine_tune(model: TinyTransformer, cfg: ExtendConfig, factor: int, seed: int) -> list[float]:
    """Fine-tune ``model`` in place at ``factor``·L for ``cfg.ft_steps`` steps at ``cfg.ft_lr``
    (warm-up a tenth of them), ``batch // factor`` rows per step (at least 2)."""
    steps = cfg.ft_steps
    losses = fit(
        model,
        cfg,
        np.random.default_rng([seed, factor, 1]),
        steps=steps,
        lr=cfg.ft_lr,
        warmup=max(1, steps // 10),
        context=factor * cfg.context,
        rows=max(2, cfg.batch // factor),
    )
    model.eval()
    return losses
