"""What a run needs before it starts: its parameter count and the memory of its largest step,
estimated from the config alone (no model is built), so a sweep that cannot fit is refused at
once with the numbers instead of building for minutes and dying with a MemoryError.

Float32 training with AdamW keeps 16 bytes per parameter (weight, gradient, two moments). A
training step keeps, per layer, B·T·(12·C + 2·F) activations and B·H·T² attention scores and
probabilities for the backward pass, plus B·T·V logits; an evaluation step (no gradients) the
activations of one layer at a time over an evaluation pass (at most ``EVAL_BATCH`` samples and
``EVAL_TOKENS`` tokens) at the longest evaluation length.
The estimate is an upper bound within a small factor of what torch allocates (the attention's
fused kernels keep less): it refuses what cannot fit, and lets through what can.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .config import RunConfig
from .evaluate import EVAL_BATCH, EVAL_TOKENS

FLOAT = 4  # bytes: the lab trains in float32
#: bytes per parameter in training: weight, gradient, AdamW's two moments
TRAIN_BYTES_PER_PARAM = 4 * FLOAT


@dataclass(frozen=True)
class Footprint:
    """A run's parameters and the bytes its largest step needs (training or evaluation)."""

    params: int
    train_bytes: int
    eval_bytes: int

    @property
    def bytes(self) -> int:
        return max(self.train_bytes, self.eval_bytes)


def footprint(cfg: RunConfig) -> Footprint:
    """The estimate of the module doc for ``cfg`` (its task built, not its model)."""
    task = cfg.task.build()
    m, t = cfg.model, cfg.train
    d, heads = m.d_model, m.n_heads
    ff = m.d_ff if m.d_ff is not None else 4 * d
    layers = m.n_layers * (2 if m.architecture == "encoder_decoder" else 1)
    vocab, longest = task.vocab_size, task.max_seq_len
    per_layer = (
        4 * d * d + 2 * d * ff + 9 * d + ff + (4 * d * d if m.architecture != "decoder" else 0)
    )
    # token table and output head, one position table of the longest sample (learned encodings)
    params = layers * per_layer + 2 * vocab * d + vocab + longest * d + 2 * d
    train_len = task.seq_len(task.train_len[1])
    train = t.batch_size * (
        layers * (train_len * (12 * d + 2 * ff) + 2 * heads * train_len * train_len)
        + 3 * train_len * vocab
    )
    # evaluation passes hold at most EVAL_BATCH samples and EVAL_TOKENS tokens (evaluate)
    samples = max(t.eval_samples, t.gate_samples, t.gate_confirm)
    rows = max(1, min(EVAL_BATCH, samples, EVAL_TOKENS // max(1, longest)))
    evaluation = rows * (
        longest * (6 * d + 2 * ff) + 2 * heads * longest * longest + 2 * longest * vocab
    )
    return Footprint(
        params=params,
        train_bytes=params * TRAIN_BYTES_PER_PARAM + train * FLOAT,
        eval_bytes=params * FLOAT + evaluation * FLOAT,
    )


def machine_memory(device: str = "cpu") -> int:
    """Bytes a run can use on ``device``: the memory available now (``MemAvailable``, else the
    physical memory) on CPU, the GPU's total memory on CUDA."""
    if device.startswith("cuda"):
        import torch

        if torch.cuda.is_available():
            index = int(device.partition(":")[2] or 0)
            return int(torch.cuda.get_device_properties(index).total_memory)
    meminfo = Path("/proc/meminfo")
    if meminfo.exists():
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # no sysconf: do not refuse
        return 1 << 62


def check_fits(runs: list[RunConfig], workers: int = 1, memory: int | None = None) -> None:
    """Raise ValueError when a run of ``runs`` (or the ``workers`` largest, run at once) needs
    more memory than ``memory`` (default: ``machine_memory`` of the runs' device), naming the
    run, what it needs and what there is."""
    if not runs:
        return
    sized = sorted(((footprint(r), r) for r in runs), key=lambda x: -x[0].bytes)
    have = machine_memory(runs[0].device) if memory is None else memory
    need, run = sized[0]
    where = f"{run.encoding} on {run.task.name} (seed {run.seed})"
    if need.bytes > have:
        raise ValueError(
            f"run {where} needs about {_size(need.bytes)} ({need.params:,} parameters; "
            f"training {_size(need.train_bytes)}, evaluation {_size(need.eval_bytes)}), this "
            f"machine has {_size(have)}: make model, batch_size, eval_samples or the lengths "
            "smaller"
        )
    together = sum(f.bytes for f, _ in sized[: max(1, workers)])
    if together > have:
        fit, total = 0, 0
        for f, _ in sized:  # the largest runs that fit side by side
            total += f.bytes
            if total > have:
                break
            fit += 1
        raise ValueError(
            f"{min(workers, len(sized))} runs at once need about {_size(together)}, this machine "
            f"has {_size(have)}: use --workers {fit} or fewer"
        )


def _size(n: int) -> str:
    for unit, scale in (("TB", 1 << 40), ("GB", 1 << 30), ("MB", 1 << 20)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n / 1024:.3g} KB"
