"""Metrics per evaluation length: exact match and token accuracy of greedy answers, loss.

Every run of a task is evaluated on the same samples: the evaluation generator is seeded by
the length alone (``EVAL_SEED``), never by the training seed.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from .model import LabModel, greedy_decode, targets
from .tasks import Batch, Task

EVAL_SEED = 20230531
#: (length, metric name, value) rows, the unit the result store keeps.
Metric = tuple[int, str, float]


#: Samples per forward pass: bounds memory (LM windows of 512 tokens) whatever ``n_samples``.
EVAL_BATCH = 64


@torch.no_grad()
def evaluate(model: LabModel, task: Task, *, n_samples: int, device: torch.device) -> list[Metric]:
    """Rows for every evaluation length (LM: loss and accuracy per position bucket)."""
    model.eval()
    if task.kind == "lm":
        return _lm_buckets(model, task, n_samples, device)
    score = _classify if task.kind == "classify" else _generate
    rows: list[Metric] = []
    for n in task.eval_lens:
        batch = task.sample(np.random.default_rng([EVAL_SEED, n]), n_samples, n, split="eval")
        parts = [score(model, chunk, device) for chunk in _chunks(batch)]
        rows += [(n, name, _mean(torch.cat([p[name] for p in parts]))) for name in parts[0]]
    return rows


def _chunks(batch: Batch) -> list[Batch]:
    """``batch`` split into row blocks of at most ``EVAL_BATCH`` samples."""
    starts = range(0, len(batch.tokens), EVAL_BATCH)
    labels = batch.labels
    return [
        Batch(
            batch.tokens[i : i + EVAL_BATCH],
            batch.n_prompt,
            None if labels is None else labels[i : i + EVAL_BATCH],
        )
        for i in starts
    ]


def _classify(model: LabModel, batch: Batch, device: torch.device) -> dict[str, Tensor]:
    """Per-sample (B,) correctness and loss."""
    tokens = torch.from_numpy(batch.tokens).to(device)
    labels = torch.from_numpy(np.asarray(batch.labels)).to(device)
    logits = model(tokens)  # (B, n_classes)
    hit = (logits.argmax(-1) == labels).float()
    loss = F.cross_entropy(logits, labels, reduction="none")
    return {"exact_match": hit, "token_acc": hit, "loss": loss}


def _generate(model: LabModel, batch: Batch, device: torch.device) -> dict[str, Tensor]:
    """Per-sample (B,) exact match, token accuracy of the greedy answer, and teacher-forced
    loss on the answer span (every sample of a batch has the same answer length)."""
    tokens = torch.from_numpy(batch.tokens).to(device)  # (B, T)
    answer = tokens[:, batch.n_prompt :]  # (B, A): answer and EOS
    logits = model(tokens[:, :-1])  # (B, T-1, V)
    loss = F.cross_entropy(logits.transpose(1, 2), targets(batch, device), reduction="none")
    loss = loss[:, batch.n_prompt - 1 :].mean(dim=1)  # (B,) over the answer span
    pred = greedy_decode(model.net, tokens[:, : batch.n_prompt], answer.shape[1])  # (B, A)
    hit = pred == answer
    return {
        "exact_match": hit.all(dim=1).float(),
        "token_acc": hit.float().mean(dim=1),
        "loss": loss,
    }


def _lm_buckets(model: LabModel, task: Task, n_samples: int, device: torch.device) -> list[Metric]:
    """Loss and next-character accuracy per bucket of ``train_len[1]`` positions in windows
    of the longest evaluation length; a row's length is the bucket's end."""
    n, width = max(task.eval_lens), task.train_len[1]
    batch = task.sample(np.random.default_rng([EVAL_SEED, n]), n_samples, n, split="eval")
    losses, hits = [], []
    for chunk in _chunks(batch):
        tokens = torch.from_numpy(chunk.tokens).to(device)  # (b, n + 1)
        logits = model(tokens[:, :-1])  # (b, n, V)
        losses.append(F.cross_entropy(logits.transpose(1, 2), tokens[:, 1:], reduction="none"))
        hits.append((logits.argmax(-1) == tokens[:, 1:]).float())
    loss, hit = torch.cat(losses), torch.cat(hits)  # (B, n)
    rows: list[Metric] = []
    for end in range(width, n + width, width):
        cols = slice(end - width, min(end, n))
        rows += [
            (min(end, n), "loss", _mean(loss[:, cols])),
            (min(end, n), "token_acc", _mean(hit[:, cols])),
        ]
    return rows


def _mean(x: Tensor) -> float:
    return float(x.mean())
