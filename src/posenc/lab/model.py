"""The lab's model: ``TinyTransformer`` with the encoding injected, sized for a task."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..attention import TinyTransformer
from .config import ModelConfig
from .tasks import Batch, Task


class LabModel(nn.Module):
    """A decoder for generative and LM tasks; for classification an encoder (bidirectional
    attention) whose mean-pooled features (B, C) feed a linear head (B, n_classes).

    ``max_len`` covers the longest evaluation sample, so tables such as learned positions
    exist there (untrained past the training length, which is the point of the test).
    Encoders get the encoder form of an encoding unless ``pe_config`` says otherwise, as
    ``TinyTransformer`` gives it (``posenc._forms.ENCODER_FORM``: ALiBi's -m|i - j|, T5's
    bidirectional buckets, FIRE's ψ(max(L, i, j))); a run that keeps the causal form is
    labelled so (``RunConfig.label``).
    """

    def __init__(
        self, task: Task, cfg: ModelConfig, encoding: str, pe_config: dict[str, Any] | None = None
    ) -> None:
        super().__init__()
        self.net = TinyTransformer(
            vocab_size=task.vocab_size,
            pe=encoding,
            **asdict(cfg),  # d_model, n_layers, n_heads, d_ff, dropout
            causal=task.kind != "classify",
            max_len=task.max_seq_len,
            pe_config=pe_config or None,
        )
        self.head = nn.Linear(cfg.d_model, task.n_classes) if task.kind == "classify" else None

    def forward(self, tokens: Tensor) -> Tensor:
        """Vocabulary logits (B, T, V), or class logits (B, n_classes) for classification."""
        if self.head is None:
            return self.net(tokens)
        return self.head(self.net.features(tokens).mean(dim=1))  # (B, n_classes)

    def loss(self, batch: Batch, device: torch.device) -> Tensor:
        """Mean cross-entropy: on the answer span (decoder), the label, or every next char."""
        tokens = torch.from_numpy(batch.tokens).to(device)  # (B, T)
        if self.head is not None:
            labels = torch.from_numpy(np.asarray(batch.labels)).to(device)
            return F.cross_entropy(self(tokens), labels)
        logits = self(tokens[:, :-1])  # (B, T-1, V)
        return F.cross_entropy(logits.flatten(0, 1), targets(batch, device).flatten())


def targets(batch: Batch, device: torch.device) -> Tensor:
    """Next-token targets (B, T-1); prompt positions (before the answer) are -100 (ignored)."""
    tgt = torch.from_numpy(batch.tokens[:, 1:].copy()).to(device)
    tgt[:, : max(batch.n_prompt - 1, 0)] = -100
    return tgt


def greedy_decode(net: TinyTransformer, prompt: Tensor, steps: int) -> Tensor:
    """Greedy continuation (B, steps) of ``prompt`` (B, P), one token at a time with a KV cache
    (``TinyTransformer.generate`` at temperature 0, no end token)."""
    return net.generate(prompt, steps, progress=False)
