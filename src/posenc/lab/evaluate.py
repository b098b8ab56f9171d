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


@torch.no_grad()
def evaluate(model: LabModel, task: Task, *, n_samples: int, device: torch.device) -> list[Metric]:
    """Rows for every evaluation length (LM: loss and accuracy per position bucket)."""
    model.eval()
    if task.kind == "lm":
        return _lm_buckets(model, task, n_samples, device)
    rows: list[Metric] = []
    for n in task.eval_lens:
        batch = task.sample(np.random.default_rng([EVAL_SEED, n]), n_samples, n, split="eval")
        scores = (
            _classify(model, batch, device)
            if task.kind == "classify"
            else _generate(model, batch, device)
        )
        rows += [(n, name, value) for name, value in scores.items()]
    return rows


def _classify(model: LabModel, batch: Batch, device: torch.device) -> dict[str, float]:
    tokens = torch.from_numpy(batch.tokens).to(device)
    labels = torch.from_numpy(np.asarray(batch.labels)).to(device)
    logits = model(tokens)  # (B, n_classes)
    acc = float((logits.argmax(-1) == labels).float().mean())
    loss = float(F.cross_entropy(logits, labels))
    return {"exact_match": acc, "token_acc": acc, "loss": loss}


def _generate(model: LabModel, batch: Batch, device: torch.device) -> dict[str, float]:
    tokens = torch.from_numpy(batch.tokens).to(device)  # (B, T)
    answer = tokens[:, batch.n_prompt :]  # (B, A): answer and EOS
    loss = F.cross_entropy(model(tokens[:, :-1]).flatten(0, 1), targets(batch, device).flatten())
    pred = greedy_decode(model.net, tokens[:, : batch.n_prompt], answer.shape[1])  # (B, A)
    hit = pred == answer
    return {
        "exact_match": float(hit.all(dim=1).float().mean()),
        "token_acc": float(hit.float().mean()),
        "loss": float(loss),
    }


def _lm_buckets(model: LabModel, task: Task, n_samples: int, device: torch.device) -> list[Metric]:
    """Loss and next-character accuracy per bucket of ``train_len[1]`` positions in windows
    of the longest evaluation length; a row's length is the bucket's end."""
    n, width = max(task.eval_lens), task.train_len[1]
    batch = task.sample(np.random.default_rng([EVAL_SEED, n]), n_samples, n, split="eval")
    tokens = torch.from_numpy(batch.tokens).to(device)  # (B, n + 1)
    logits = model(tokens[:, :-1])  # (B, n, V)
    loss = F.cross_entropy(logits.transpose(1, 2), tokens[:, 1:], reduction="none")  # (B, n)
    hit = (logits.argmax(-1) == tokens[:, 1:]).float()
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
