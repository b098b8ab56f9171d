"""Metrics per evaluation length: exact match and token accuracy of greedy answers, loss;
and the competence gate's score on held-out samples: the worst of the training lengths.

Every run of a task is evaluated on the same samples: the evaluation generator is seeded by
the length alone (``EVAL_SEED``; the gate's by ``GATE_SEED``, its confirmations' by
``CONFIRM_SEED`` and the draw), never by the training seed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from .model import LabModel
from .tasks import Batch, Task

EVAL_SEED = 20230531
GATE_SEED = 20240229
CONFIRM_SEED = 20240301
#: Task kinds the competence gate applies to. A character LM has no score that reaches a
#: threshold like 0.99: it trains its whole budget and passes.
GATED_KINDS = ("decoder", "classify")
#: (length, metric name, value) rows, the unit the result store keeps.
Metric = tuple[int, str, float]
#: Samples per forward pass, at most, and tokens per forward pass, at most: bounds memory
#: (LM windows of 512 tokens: 32 a pass) whatever ``n_samples``, while short samples go in few
#: passes (greedy decoding pays per pass, not per sample).
EVAL_BATCH = 256
EVAL_TOKENS = 16384


def eval_batch(task: Task, n: int, n_samples: int) -> Batch:
    """The evaluation samples of length ``n``, the same for every run of ``task``."""
    return task.sample(np.random.default_rng([EVAL_SEED, n]), n_samples, n, split="eval")


def bucket_rows(loss: Any, hit: Any, width: int) -> list[Metric]:
    """Mean loss and accuracy of (B, n) arrays (torch or JAX) per bucket of ``width``
    positions; a row's length is the bucket's end."""
    rows: list[Metric] = []
    for start in range(0, loss.shape[1], width):
        end = min(start + width, loss.shape[1])
        rows += [(end, "loss", float(loss[:, start:end].mean()))]
        rows += [(end, "token_acc", float(hit[:, start:end].mean()))]
    return rows


@torch.no_grad()
def evaluate(model: LabModel, task: Task, *, n_samples: int, device: torch.device) -> list[Metric]:
    """Rows for every evaluation length (LM: loss and accuracy per position bucket)."""
    model.eval()
    if task.kind == "lm":
        return _lm_buckets(model, task, n_samples, device)
    score = _classify if task.kind == "classify" else _generate
    rows: list[Metric] = []
    for n in task.eval_lens:
        at_n = model.at_length(n)  # a grid's table resampled to n's grid (learned_2d)
        parts = [score(at_n, chunk, device) for chunk in _chunks(eval_batch(task, n, n_samples))]
        rows += [(n, name, float(torch.cat([p[name] for p in parts]).mean())) for name in parts[0]]
    return rows


def _chunks(batch: Batch) -> list[Batch]:
    """``batch`` split into row blocks of at most ``EVAL_BATCH`` samples and ``EVAL_TOKENS``
    tokens."""
    size = max(1, min(EVAL_BATCH, EVAL_TOKENS // max(1, batch.tokens.shape[1])))
    rows = [slice(i, i + size) for i in range(0, len(batch.tokens), size)]
    labels = batch.labels
    return [
        Batch(batch.tokens[r], batch.n_prompt, None if labels is None else labels[r]) for r in rows
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
    loss on the answer span (every sample of a batch has the same answer length).

    Greedy decoding follows the teacher-forced prefix up to its first wrong token, so a sample
    whose teacher-forced argmax is right throughout is decoded right: only the others are
    decoded (with a KV cache)."""
    tokens = torch.from_numpy(batch.tokens).to(device)  # (B, T)
    answer = tokens[:, batch.n_prompt :]  # (B, A): answer and EOS
    logits = model.answer_logits(tokens, batch.n_prompt)  # (B, A, V)
    loss = F.cross_entropy(logits.transpose(1, 2), answer, reduction="none").mean(dim=1)  # (B,)
    pred = logits.argmax(-1)  # (B, A) teacher-forced
    wrong = (pred != answer).any(dim=1).nonzero().flatten()  # (W,)
    if len(wrong):
        pred[wrong] = model.greedy_answer(tokens[wrong], batch.n_prompt, answer.shape[1])
    hit = pred == answer
    return {
        "exact_match": hit.all(dim=1).float(),
        "token_acc": hit.float().mean(dim=1),
        "loss": loss,
    }


def _lm_buckets(model: LabModel, task: Task, n_samples: int, device: torch.device) -> list[Metric]:
    """Loss and next-character accuracy per bucket of ``train_len[1]`` positions in windows
    of the longest evaluation length; a row's length is the bucket's end."""
    losses, hits = [], []
    for chunk in _chunks(eval_batch(task, max(task.eval_lens), n_samples)):
        tokens = torch.from_numpy(chunk.tokens).to(device)  # (b, n + 1)
        logits = model(tokens[:, :-1])  # (b, n, V)
        losses.append(F.cross_entropy(logits.transpose(1, 2), tokens[:, 1:], reduction="none"))
        hits.append((logits.argmax(-1) == tokens[:, 1:]).float())
    return bucket_rows(torch.cat(losses), torch.cat(hits), task.train_len[1])  # (B, n) each


def gate_batches(task: Task, n_samples: int) -> list[Batch]:
    """The gate's held-out samples: ``n_samples`` spread evenly over every training length
    (at least one each), the same for every run and check of ``task``."""
    lo, hi = task.train_len
    per = -(-n_samples // (hi - lo + 1))  # ceil
    rng = np.random.default_rng
    return [task.sample(rng([GATE_SEED, n]), per, n, split="eval") for n in range(lo, hi + 1)]


def confirm_batches(task: Task, n_samples: int, draw: int) -> list[Batch]:
    """The gate's confirmation samples: ``n_samples`` at every training length, a fresh set
    per ``draw``. The gate's own samples are the same at every check, so a run stopped at the
    first check it passes is chosen on them (13 of the 81 runs of the quick preset that passed
    them solved 0.973-0.988 of fresh samples at their longest training length); a pass stands
    only when a new, larger set agrees."""
    lo, hi = task.train_len
    rng = np.random.default_rng
    return [
        task.sample(rng([CONFIRM_SEED, draw, n]), n_samples, n, split="eval")
        for n in range(lo, hi + 1)
    ]


@torch.no_grad()
def gate_score(
    model: LabModel, batches: list[Batch], device: torch.device, threshold: float | None = None
) -> float:
    """The worst training length's score: min over ``batches`` (one per length) of the fraction
    of its samples solved, exact match of the answer span (decoder tasks), accuracy
    (classification), next-token accuracy (LM). A model passes only when it solves every
    training length, not their pooled average. One forward per batch: greedy decoding follows
    the teacher-forced prefix up to its first wrong token, so the teacher-forced argmax solves a
    sample exactly when greedy decoding does.

    ``threshold``: a check that only decides whether the score reaches it. Batches go longest
    first (where an unfinished model fails), and the first length below ``threshold`` ends the
    check with its score (below ``threshold``, at least the minimum): pass or fail is the same
    as the full score's."""
    was_training = model.training
    model.eval()
    scores: list[float] = []
    for batch in reversed(batches):
        scores.append(float(_hits(model, batch, device).float().mean()))
        if threshold is not None and scores[-1] < threshold:
            break
    model.train(was_training)
    return scores[-1] if threshold is not None and scores[-1] < threshold else min(scores)


def _hits(model: LabModel, batch: Batch, device: torch.device) -> Tensor:
    """Which of ``batch``'s samples (next tokens, for an LM without a prompt) are solved."""
    tokens = torch.from_numpy(batch.tokens).to(device)  # (B, T)
    if model.head is not None:
        labels = torch.from_numpy(np.asarray(batch.labels)).to(device)
        return model(tokens).argmax(-1) == labels  # (B,)
    if batch.n_prompt:  # answer span: predictions from position n_prompt - 1 on
        pred = model.answer_logits(tokens, batch.n_prompt).argmax(-1)  # (B, A)
        return (pred == tokens[:, batch.n_prompt :]).all(1)
    pred = model(tokens[:, :-1]).argmax(-1)  # (B, T-1)
    return (pred == tokens[:, 1:]).flatten()
