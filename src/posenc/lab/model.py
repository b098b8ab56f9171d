"""The lab's model: ``TinyTransformer`` (or ``EncoderDecoder``) with the encoding injected,
sized for a task."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..attention import EncoderDecoder, TinyTransformer
from .config import ModelConfig, check_task_architecture
from .tasks import SEP, Batch, Task


class LabModel(nn.Module):
    """A decoder for generative and LM tasks; for classification an encoder (bidirectional
    attention) whose mean-pooled features (B, C) feed a linear head (B, n_classes).

    ``max_len`` covers the longest evaluation sample, so tables such as learned positions
    exist there (untrained past the training length, which is the point of the test).
    Encoders get the encoder form of an encoding unless ``pe_config`` says otherwise, as
    ``TinyTransformer`` gives it (``posenc._forms.ENCODER_FORM``: ALiBi's -m|i - j|, T5's
    bidirectional buckets, FIRE's ψ(max(L, i, j))); a run that keeps the causal form is
    labelled so (``RunConfig.label``).

    ``cfg.architecture == "encoder_decoder"`` (prompt-answer tasks only): an ``EncoderDecoder``
    of ``n_layers`` encoder and ``n_layers`` decoder layers, one token table for source and
    target (one vocabulary, as T5). A sample ``prompt SEP answer EOS`` is split there: the
    prompt is the source (encoder positions 0..P-1), ``SEP answer`` the decoder's input
    (teacher forcing; decoder positions 0..A, SEP its start token), ``answer EOS`` its target.

    Raises: ValueError for an encoder-decoder on a classification or LM task.
    """

    def __init__(
        self, task: Task, cfg: ModelConfig, encoding: str, pe_config: dict[str, Any] | None = None
    ) -> None:
        super().__init__()
        check_task_architecture(task, cfg.architecture)
        size = {k: v for k, v in asdict(cfg).items() if k != "architecture"}
        self.net: TinyTransformer | EncoderDecoder
        if cfg.architecture == "encoder_decoder":
            self.net = EncoderDecoder(
                src_vocab_size=task.vocab_size,
                tgt_vocab_size=task.vocab_size,
                pe=encoding,
                d_model=cfg.d_model,
                n_encoder_layers=cfg.n_layers,
                n_decoder_layers=cfg.n_layers,
                n_heads=cfg.n_heads,
                d_ff=cfg.d_ff,
                dropout=cfg.dropout,
                max_len=task.max_seq_len,
                share_embeddings=True,
                pe_config=pe_config or None,
            )
        else:
            self.net = TinyTransformer(
                vocab_size=task.vocab_size,
                pe=encoding,
                **size,  # d_model, n_layers, n_heads, d_ff, dropout
                causal=task.kind != "classify",
                max_len=task.max_seq_len,
                pe_config=pe_config or None,
            )
        self.head = nn.Linear(cfg.d_model, task.n_classes) if task.kind == "classify" else None

    @property
    def encoder_decoder(self) -> bool:
        return isinstance(self.net, EncoderDecoder)

    def forward(self, tokens: Tensor) -> Tensor:
        """Vocabulary logits (B, T, V), or class logits (B, n_classes) for classification.
        Decoder-only (an encoder-decoder reads a split sample: ``answer_logits``)."""
        if isinstance(self.net, EncoderDecoder):
            raise TypeError("an encoder-decoder LabModel reads samples via answer_logits")
        if self.head is None:
            return self.net(tokens)
        return self.head(self.net.features(tokens).mean(dim=1))  # (B, n_classes)

    def answer_logits(self, tokens: Tensor, n_prompt: int) -> Tensor:
        """Logits (B, A, V) predicting ``tokens[:, n_prompt:]`` (answer and EOS, A tokens) of
        samples ``tokens`` (B, T) whose answer starts at ``n_prompt``, teacher-forced."""
        if isinstance(self.net, EncoderDecoder):  # prompt -> encoder; SEP answer -> decoder
            return self.net(tokens[:, : n_prompt - 1], tokens[:, n_prompt - 1 : -1])
        return self(tokens[:, :-1])[:, n_prompt - 1 :]  # (B, A, V)

    def greedy_answer(self, tokens: Tensor, n_prompt: int, steps: int) -> Tensor:
        """Greedy answer (B, steps) of the prompts ``tokens[:, :n_prompt]`` (SEP last), with
        a KV cache (an encoder-decoder encodes the prompt once and starts from SEP)."""
        if isinstance(self.net, EncoderDecoder):
            src = tokens[:, : n_prompt - 1]
            return self.net.generate(src, steps, start_token=SEP, progress=False)
        return greedy_decode(self.net, tokens[:, :n_prompt], steps)

    def pe_parameters(self) -> Iterator[nn.Parameter]:
        """The encodings' own parameters (each once): ``TrainConfig.pe_lr_scale``'s group."""
        if isinstance(self.net, EncoderDecoder):
            encodings = nn.ModuleList([self.net.encoder_pe, self.net.decoder_pe])
            return encodings.parameters()  # a module shared by both stacks counted once
        return self.net.pe.parameters()

    def loss(self, batch: Batch, device: torch.device) -> Tensor:
        """Mean cross-entropy: on the answer span (decoder), the label, or every next char."""
        tokens = torch.from_numpy(batch.tokens).to(device)  # (B, T)
        if self.head is not None:
            labels = torch.from_numpy(np.asarray(batch.labels)).to(device)
            return F.cross_entropy(self(tokens), labels)
        if self.encoder_decoder:
            logits = self.answer_logits(tokens, batch.n_prompt)  # (B, A, V)
            return F.cross_entropy(logits.flatten(0, 1), tokens[:, batch.n_prompt :].flatten())
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
