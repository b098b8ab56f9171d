"""Training-step throughput (tokens/s) of posenc's TinyTransformer vs x-transformers'
TransformerWrapper, same size and the matching positional option, in the same process.

    posenc bench lab --out benchmarks/results/lab_step.json

One torch thread; each (encoding, library) pair is timed in interleaved rounds and the median
round is kept, so load from other processes hits both sides alike. x-transformers is timed
with its default attention and, where it allows, with ``attn_flash=True`` (SDPA); posenc is
compared with the faster of the two.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable
from importlib.util import find_spec
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .._version import __version__
from ..attention import TinyTransformer
from ..registry import names
from .harness import Progress, each, interleaved

DIM, DEPTH, HEADS, VOCAB = 64, 2, 4, 32
#: posenc name -> x-transformers options (Decoder kwargs, TransformerWrapper kwargs).
XT_OPTIONS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "nope": ({}, {"use_abs_pos_emb": False}),
    "learned": ({}, {}),
    "sinusoidal": ({}, {"scaled_sinu_pos_emb": True}),
    "rope": ({"rotary_pos_emb": True, "rotary_emb_dim": DIM // HEADS}, {"use_abs_pos_emb": False}),
    "xpos": ({"rotary_xpos": True, "rotary_emb_dim": DIM // HEADS}, {"use_abs_pos_emb": False}),
    "alibi": ({"alibi_pos_bias": True}, {"use_abs_pos_emb": False}),
    "t5": ({"rel_pos_bias": True}, {"use_abs_pos_emb": False}),
    "pope": ({"polar_pos_emb": True}, {"use_abs_pos_emb": False}),
}
NO_FLASH = {"t5", "pope"}  # x-transformers refuses flash attention with these


def posenc_model(name: str, max_len: int) -> nn.Module:
    return TinyTransformer(
        vocab_size=VOCAB, pe=name, d_model=DIM, n_layers=DEPTH, n_heads=HEADS, max_len=max_len
    )


def xt_model(name: str, max_len: int, flash: bool) -> nn.Module:
    from x_transformers import Decoder, TransformerWrapper

    layer_kw, wrap_kw = XT_OPTIONS[name]
    decoder = Decoder(
        dim=DIM,
        depth=DEPTH,
        heads=HEADS,
        attn_dim_head=DIM // HEADS,
        ff_mult=4,
        attn_flash=flash,
        **layer_kw,
    )
    return TransformerWrapper(num_tokens=VOCAB, max_seq_len=max_len, attn_layers=decoder, **wrap_kw)


def step_fn(model: nn.Module, batch: int, length: int) -> Callable[[], None]:
    """One AdamW training step on random tokens (the lab's inner loop)."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    idx = torch.randint(0, VOCAB, (batch, length + 1), generator=torch.Generator().manual_seed(0))

    def step() -> None:
        logits = model(idx[:, :-1])  # (B, T, V)
        loss = F.cross_entropy(logits.flatten(0, 1), idx[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def measure(name: str, batch: int, length: int, rounds: int, steps: int) -> dict[str, Any]:
    """Median seconds per step for posenc and each x-transformers variant, interleaved."""
    torch.manual_seed(0)
    fns = {"posenc": step_fn(posenc_model(name, length), batch, length)}
    if name in XT_OPTIONS and find_spec("x_transformers"):
        fns["xt"] = step_fn(xt_model(name, length, flash=False), batch, length)
        if name not in NO_FLASH:
            fns["xt_flash"] = step_fn(xt_model(name, length, flash=True), batch, length)
    timings = interleaved(fns, rounds=rounds, warmup=3, calls=steps)
    tokens_per_s = {
        f"{k}_tokens_per_s": round(batch * length / t.median) for k, t in timings.items()
    }
    out: dict[str, Any] = {"encoding": name, "batch": batch, "length": length, **tokens_per_s}
    if len(fns) > 1:
        best_xt = max(v for k, v in tokens_per_s.items() if k.startswith("xt"))
        out["ratio_vs_best_xt"] = round(out["posenc_tokens_per_s"] / best_xt, 3)
    return out


SHAPES = ((64, 16), (16, 128))
QUICK_SHAPES = ((8, 16),)


def run(
    quick: bool = False, encodings: list[str] | None = None, progress: Progress | None = None
) -> dict[str, Any]:
    """Every encoding at the lab's training shapes (BATCH, LENGTH), one torch thread; ``quick``:
    one small shape, one round of two steps (a smoke run). ``progress(row, done, total)`` after
    each finished row."""
    from importlib.metadata import PackageNotFoundError, version

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        specs = [
            (name, batch, length)
            for batch, length in (QUICK_SHAPES if quick else SHAPES)
            for name in (encodings or names(axes=1))
        ]
        rounds, steps = (1, 2) if quick else (5, 10)
        rows = each(specs, lambda s: measure(*s, rounds=rounds, steps=steps), progress)
    finally:
        torch.set_num_threads(threads)
    try:
        xt_version: str | None = version("x-transformers")
    except PackageNotFoundError:
        xt_version = None
    meta = {
        "torch": torch.__version__,
        "x_transformers": xt_version,
        "posenc": __version__,
        "threads": 1,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "model": {"d_model": DIM, "n_layers": DEPTH, "n_heads": HEADS, "vocab": VOCAB},
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    return {"meta": meta, "results": rows}
