"""The lab's model: ``TinyTransformer`` (or ``EncoderDecoder``) with the encoding injected,
sized for a task."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..attention import grid_positions
from ..models import EncoderDecoder, TinyTransformer
from ..registry import info
from .config import ModelConfig, check_task_architecture
from .schedules import is_schedule, lab_schedule
from .tasks import MARK, SEP, Batch, Task


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

    Raises: ValueError for an encoder-decoder on a classification or LM task, or for a lab
    schedule (``schedules.SCHEDULES``: ``irope``, ``rnope_swa``) as anything but a decoder.

    A lab schedule builds ``TinyTransformer(pe=lab_schedule(encoding, pe_config))``: an
    encoding and a sliding window or chunk per layer, its pattern repeated to ``n_layers``.

    Grid tasks (``task.axes`` = 2): an encoding of grid positions reads (row, column) from
    ``grid_positions`` (a 1-D one the raster index); a table over a grid (``learned_2d``) is
    built at the longest training grid, and ``at_length`` resamples it for larger ones. A
    task whose ``readout`` is "mark" feeds the head the MARK cell's features.
    """

    def __init__(
        self, task: Task, cfg: ModelConfig, encoding: str, pe_config: dict[str, Any] | None = None
    ) -> None:
        super().__init__()
        pe_config = dict(pe_config or {})
        schedule = is_schedule(encoding)
        if not schedule and "grid" in info(encoding).parameters and "grid" not in pe_config:
            pe_config["grid"] = task.grid(task.seq_len(task.train_len[1]))
        check_task_architecture(task, cfg.architecture)
        if schedule and cfg.architecture != "decoder":
            raise ValueError(
                f"lab schedule {encoding!r} builds a decoder, got architecture {cfg.architecture!r}"
            )
        size = {k: v for k, v in asdict(cfg).items() if k not in ("architecture", "embed_std")}
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
        elif schedule:  # one encoding and local attention per layer (``schedules``)
            self.net = TinyTransformer(
                vocab_size=task.vocab_size,
                pe=lab_schedule(encoding, pe_config),
                **size,  # d_model, n_layers, n_heads, d_ff, dropout
                causal=task.kind != "classify",
                max_len=task.max_seq_len,
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
        if cfg.embed_std != 0.02:  # the nets' own init is GPT-2's N(0, 0.02²)
            net = self.net
            tok = [net.tok] if isinstance(net, TinyTransformer) else [net.src_tok, net.tgt_tok]
            for table in {id(t): t for t in tok}.values():  # a shared table once
                nn.init.normal_(table.weight, std=cfg.embed_std)
        self.head = nn.Linear(cfg.d_model, task.n_classes) if task.kind == "classify" else None
        self.task = task
        self._grid_pos: dict[tuple[int, str], Tensor] = {}
        self.on_grid = (
            task.axes > 1
            and isinstance(self.net, TinyTransformer)
            and self.net.pe.capabilities.axes == task.axes
        )

    def positions(self, seq_len: int, device: torch.device | None = None) -> Tensor | None:
        """Grid positions (T, A) of a sample of ``seq_len`` tokens where the encoding reads the
        task's grid; None (the default 1-D positions) otherwise."""
        if not self.on_grid:
            return None
        key = (seq_len, str(device))
        if key not in self._grid_pos:  # built once per length, not every training step
            self._grid_pos[key] = grid_positions(*self.task.grid(seq_len), device=device)
        return self._grid_pos[key]

    def at_length(self, n: int) -> LabModel:
        """The model as evaluated on samples of length ``n``: itself, or where its table covers
        a smaller grid than ``n``'s (``learned_2d`` trained at 8 x 8, evaluated at 16 x 16) a
        copy with the table resampled to that grid (bicubic with antialias, as timm's
        ``resample_abs_pos_embed``: what a ViT does at a new resolution)."""
        if not self.on_grid:
            return self
        table_grid = getattr(self.net.pe, "grid", None)  # on_grid: a TinyTransformer's encoding
        if table_grid is None:
            return self
        grid = self.task.grid(self.task.seq_len(n))
        if all(g <= t for g, t in zip(grid, table_grid, strict=True)):
            return self  # the training grids index the table as they did in training
        model = copy.deepcopy(self)  # every layer shares the one encoding: the copy too
        model.net.pe.resample_(grid)  # type: ignore[union-attr, operator]
        return model

    @property
    def encoder_decoder(self) -> bool:
        return isinstance(self.net, EncoderDecoder)

    def forward(self, tokens: Tensor) -> Tensor:
        """Vocabulary logits (B, T, V), or class logits (B, n_classes) for classification.
        Decoder-only (an encoder-decoder reads a split sample: ``answer_logits``)."""
        if isinstance(self.net, EncoderDecoder):
            raise TypeError("an encoder-decoder LabModel reads samples via answer_logits")
        pos = self.positions(tokens.shape[1], tokens.device)  # (T, A) | None
        if self.head is None:
            return self.net(tokens, pos)
        h = self.net.features(tokens, pos)  # (B, T, C)
        if self.task.readout == "mark":
            return self.head(h[tokens == MARK])  # (B, n_classes): one MARK per sample
        return self.head(h.mean(dim=1))  # (B, n_classes)

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
        return nn.ModuleList(self.net.layer_pes).parameters()  # each layer's (a schedule's)

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
