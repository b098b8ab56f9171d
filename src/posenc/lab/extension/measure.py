"""The measures, each through ``posenc.eval`` or the model's own streaming cache.

- ``loss``: ``posenc.eval.perplexity`` on the held-out split, disjoint windows of the length
  (the first ``eval_tokens // length`` of them, the same text for every model): the mean
  next-token loss of all predictions (``loss``), and by position in buckets of ``cfg.bucket``
  (``bucket``, start..end-1).
- ``passkey``: ``posenc.eval.passkey``'s token form at each depth; a context of n positions
  holds a prompt of n - digits + 1 tokens and the greedy answer (its last token predicted at
  position n - 1). Keys are drawn from a seed of the length alone: every model gets the same.
- ``stream``: the held-out text fed one token at a time through ``KVCache(window, sinks)``
  (StreamingLLM, Xiao et al. 2023): loss by stream position in buckets;
  ``first_token_attention``: how much the model attends to the first token (its sink).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F

from ...eval import passkey, perplexity
from ...models import TinyTransformer
from ..attention_maps import attention_maps
from ..config import ExtendConfig
from .corpus import corpus, vocab

#: Seed of the passkey keys and filler at a length (added to the length).
PASSKEY_SEED = 20_240_601


class Measure(NamedTuple):
    """One number: ``metric`` at context ``length``; buckets have start..end-1 positions,
    passkey cells a needle ``depth``."""

    metric: str
    length: int
    value: float
    start: int | None = None
    end: int | None = None
    depth: float | None = None


def loss(model: TinyTransformer, cfg: ExtendConfig, length: int) -> list[Measure]:
    """Mean loss at ``length`` and its loss by position bucket (held-out text)."""
    text = corpus()[1]
    edges = list(range(0, length - 1, cfg.bucket))
    result = perplexity(
        model,
        text,
        lengths=[length],
        stride=length,
        buckets=edges,
        max_windows=max(1, cfg.eval_tokens // length),
        progress=False,
    ).lengths[0]
    rows = [Measure("loss", length, result.loss)]
    rows += [Measure("bucket", length, b.loss, b.start, b.end) for b in result.buckets if b.count]
    return rows


def retrieval(model: TinyTransformer, cfg: ExtendConfig, length: int) -> list[Measure]:
    """Passkey accuracy at context ``length`` per depth (``cfg.trials`` keys each)."""
    digits = cfg.passkey_digits
    result = passkey(
        model,
        vocab().passkey,
        lengths=[length - digits + 1],
        depths=cfg.depths,
        trials=cfg.trials,
        digits=digits,
        seed=PASSKEY_SEED + length,
        progress=False,
    )
    return [
        Measure("passkey", length, row[0], depth=d)
        for d, row in zip(result.depths, result.accuracy, strict=True)
    ]


@torch.no_grad()
def stream(model: TinyTransformer, cfg: ExtendConfig, sinks: int) -> list[Measure]:
    """Loss by stream position of ``cfg.stream_rows`` held-out texts of ``max_len`` tokens
    decoded one token at a time with ``KVCache(window=cfg.window, sinks=sinks)``."""
    n = cfg.max_len
    text = corpus()[1]
    if cfg.stream_rows * n > len(text):
        raise ValueError(f"{cfg.stream_rows} streams of {n} tokens exceed the held-out text")
    ids = torch.from_numpy(text[: cfg.stream_rows * n].reshape(cfg.stream_rows, n))  # (R, n)
    model.eval()
    cache = model.new_cache(window=cfg.window, sinks=sinks)
    nll = []
    for t in range(n - 1):
        logits = model(ids[:, t : t + 1], cache=cache)[:, -1]  # (R, V)
        nll.append(F.cross_entropy(logits, ids[:, t + 1], reduction="none"))
    per_position = torch.stack(nll, dim=1).mean(0).numpy()  # (n - 1,)
    rows = [Measure("loss", n, float(per_position.mean()))]
    for start in range(0, n - 1, cfg.bucket):
        end = min(start + cfg.bucket, n - 1)
        rows.append(Measure("bucket", n, float(np.mean(per_position[start:end])), start, end))
    return rows


@torch.no_grad()
def first_token_attention(model: TinyTransformer, cfg: ExtendConfig) -> dict[str, list[float]]:
    """Attention sinks at L (Xiao et al. 2023, sec. 3.1): per layer, the mean attention weight
    on position 0 from queries in the second half of held-out windows of L tokens (8 windows,
    mean over heads), and what uniform attention would give there, mean of 1/(i + 1)."""
    L = cfg.context
    ids = torch.from_numpy(corpus()[1][: 8 * L].reshape(8, L))
    layers = [float(p[:, :, L // 2 :, 0].mean()) for p in attention_maps(model.eval(), ids)]
    return {"layers": layers, "uniform": [float(np.mean(1.0 / np.arange(L // 2 + 1, L + 1)))]}
