"""Training-step throughput (tokens/s) of posenc's TinyTransformer vs x-transformers'
TransformerWrapper, same size and the matching positional option, in the same process; and
lab runs per minute of three ways to train the seeds of one configuration (``trainers``).

    posenc bench lab --out benchmarks/results/lab_step.json

One torch thread; each (encoding, library) pair is timed in interleaved rounds and the median
round is kept, so load from other processes hits both sides alike. x-transformers is timed
with its default attention and, where it allows, with ``attn_flash=True`` (SDPA); posenc is
compared with the faster of the two.
"""

from __future__ import annotations

import platform
import statistics
import time
from collections.abc import Callable, Sequence
from importlib.util import find_spec
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .._version import __version__
from ..models import TinyTransformer
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

#: The trainer comparison's run: the quick preset's sort decoder (32 symbols + 3 specials,
#: feed-forward width ``LAB_FF``), batch 64, n in 1..8 (2n + 2 tokens, the loss on the n + 1
#: answer tokens), ``SEEDS`` seeds of one configuration, ``RUN_STEPS`` AdamW steps a run
#: (sort takes 983 on average to the gate in the quick store). Kept by hand in step with
#: ``posenc.lab.presets`` (bench does not import lab).
SEEDS, RUN_STEPS, SORT_VOCAB, LAB_BATCH, LAB_LR, GRAD_CLIP = 3, 900, 35, 64, 2e-3, 1.0
LAB_FF = 128
#: Encodings the trainer comparison times (a learned bias table, a fixed one, none, rotary).
TRAINER_ENCODINGS = ("nope", "alibi", "t5", "rope")
Step = Callable[[torch.Tensor, torch.Tensor], None]  # tokens, targets (S, B, T) each


def lab_batch(gen: torch.Generator, seeds: int, batch: int = LAB_BATCH) -> tuple[Any, Any]:
    """Tokens (S, B, 2n + 1) and next-token targets (S, B, 2n + 1), the prompt's -100, for
    one training step of ``seeds`` runs (one n for the step, each seed its own tokens)."""
    n = int(torch.randint(1, 9, (), generator=gen))
    seq = torch.randint(3, SORT_VOCAB, (seeds, batch, 2 * n + 2), generator=gen)
    targets = seq[..., 1:].clone()
    targets[..., :n] = -100  # prompt and SEP: no loss
    return seq[..., :-1], targets


def seed_models(name: str, seeds: int, dtype: torch.dtype = torch.float32) -> list[nn.Module]:
    """``seeds`` lab-sized decoders with encoding ``name``, seeded 0, 1, ..."""
    models: list[nn.Module] = []
    for s in range(seeds):
        torch.manual_seed(s)
        net = TinyTransformer(
            vocab_size=SORT_VOCAB,
            pe=name,
            d_model=DIM,
            n_layers=DEPTH,
            n_heads=HEADS,
            d_ff=LAB_FF,
            max_len=18,
        )
        models.append(net.to(dtype).train())
    return models


def _adamw(params: Sequence[torch.Tensor]) -> torch.optim.AdamW:
    return torch.optim.AdamW(params, lr=LAB_LR, betas=(0.9, 0.98), weight_decay=0.01, fused=True)


def one_by_one(models: list[nn.Module]) -> Step:
    """The lab's trainer: each seed's model its own step (forward, backward, clipping at
    ``GRAD_CLIP``, fused AdamW), one after the other."""
    params = [list(m.parameters()) for m in models]
    opts = [_adamw(p) for p in params]

    def step(tokens: torch.Tensor, targets: torch.Tensor) -> None:
        for model, ps, opt, x, y in zip(models, params, opts, tokens, targets, strict=True):
            loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten(), ignore_index=-100)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(ps, GRAD_CLIP, foreach=True)
            opt.step()

    return step


class Batched:
    """The seeds as one batched model: parameters stacked (S, ...) (``torch.func``), one
    vmapped forward and backward, each seed's gradient clipped by its own norm, one fused
    AdamW over the stacked tensors (elementwise: each seed's update is its own AdamW's).
    Called like ``one_by_one``'s step; ``params[name][s]`` is seed s's parameter."""

    def __init__(self, models: list[nn.Module]) -> None:
        from torch.func import functional_call, grad_and_value, stack_module_state, vmap

        self.params, self.buffers = stack_module_state(models)  # (S, ...) each, leaves
        base = self.base = models[0]
        # torch 2.13's functional_call does not restore a parameter of a submodule registered
        # under several names (TinyTransformer's one encoding, in every layer): it is left a
        # plain tensor, and the next call's forward reads that stale tensor. Put them back.
        self.registered = [
            (base.get_submodule(name.rpartition(".")[0]), name.rpartition(".")[2], p)
            for name, p in base.named_parameters(remove_duplicate=False)
        ]

        def loss(p: dict[str, Any], b: dict[str, Any], x: torch.Tensor, y: torch.Tensor) -> Any:
            logits = functional_call(base, (p, b), (x,))  # (B, T, V)
            return F.cross_entropy(logits.flatten(0, 1), y.flatten(), ignore_index=-100)

        self.grads_of = vmap(grad_and_value(loss))
        self.opt = _adamw(list(self.params.values()))

    def __call__(self, tokens: torch.Tensor, targets: torch.Tensor) -> None:
        grads, _ = self.grads_of(self.params, self.buffers, tokens, targets)
        for module, leaf, param in self.registered:
            module._parameters[leaf] = param
        norms = torch.stack([g.flatten(1).norm(dim=1) for g in grads.values()])  # (P, S)
        coef = (GRAD_CLIP / (norms.norm(dim=0) + 1e-6)).clamp(max=1.0)  # (S,)
        for name, g in grads.items():
            # contiguous, as the stacked parameter: vmap gives T5's table gradient strides
            # (4, 8, 1), and torch 2.13's fused CPU AdamW reads a gradient as if laid out
            # like its parameter (seed 1's slice read as zeros)
            self.params[name].grad = (g * coef.view(-1, *[1] * (g.dim() - 1))).contiguous()
        self.opt.step()


def compiled(models: list[nn.Module]) -> Step:
    """``one_by_one`` with each model's forward compiled (``torch.compile(dynamic=True)``):
    one graph per encoding, shared by the seeds through Inductor's cache."""
    return one_by_one([torch.compile(m, dynamic=True) for m in models])  # type: ignore[misc]


TRAINERS: dict[str, Callable[[list[nn.Module]], Step]] = {
    "one_by_one": one_by_one,
    "batched": Batched,
    "compiled": compiled,
}


def time_trainers(
    name: str, rounds: int, steps: int, trainers: tuple[str, ...] = tuple(TRAINERS)
) -> dict[str, Any]:
    """Runs per minute of each trainer on ``SEEDS`` seeds of encoding ``name``: CPU seconds
    (``time.process_time``: what the machine's load does not inflate) and wall seconds per step
    of all seeds, interleaved rounds of ``steps`` steps, medians; a run is ``RUN_STEPS`` steps.
    A trainer's first step (compilation, for ``compiled``) is timed apart as ``setup_s``.
    A trainer that cannot train this encoding is reported with its error."""
    gen = torch.Generator().manual_seed(0)
    steps_of, setup, errors = {}, {}, {}
    for trainer in trainers:
        try:
            step = TRAINERS[trainer](seed_models(name, SEEDS))
            start = time.process_time()
            step(*lab_batch(gen, SEEDS))
            setup[trainer] = time.process_time() - start
            steps_of[trainer] = step
        except Exception as err:  # e.g. an autograd.Function that vmap cannot batch
            errors[trainer] = f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
    cpu: dict[str, list[float]] = {t: [] for t in steps_of}
    wall: dict[str, list[float]] = {t: [] for t in steps_of}
    order = list(steps_of)
    for r in range(rounds):
        for trainer in order[r % len(order) :] + order[: r % len(order)]:
            batches = [lab_batch(gen, SEEDS) for _ in range(steps)]
            start, cpu_start = time.perf_counter(), time.process_time()
            for tokens, targets in batches:
                steps_of[trainer](tokens, targets)
            cpu[trainer].append((time.process_time() - cpu_start) / steps)
            wall[trainer].append((time.perf_counter() - start) / steps)
    out: dict[str, Any] = {"encoding": name, "seeds": SEEDS, "run_steps": RUN_STEPS}
    for trainer in steps_of:
        step_cpu, step_wall = statistics.median(cpu[trainer]), statistics.median(wall[trainer])
        out[trainer] = {
            "cpu_s_per_step": round(step_cpu, 5),
            "wall_s_per_step": round(step_wall, 5),
            "setup_s": round(setup[trainer], 2),
            # SEEDS runs of RUN_STEPS steps each, the setup paid once for them
            "runs_per_cpu_minute": round(60 * SEEDS / (setup[trainer] + RUN_STEPS * step_cpu), 2),
        }
    base = out.get("one_by_one")
    for trainer in steps_of:
        if base is not None:
            rate = out[trainer]["runs_per_cpu_minute"] / base["runs_per_cpu_minute"]
            out[trainer]["x_one_by_one"] = round(rate, 3)
    out |= {trainer: {"error": err} for trainer, err in errors.items()}
    return out


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
        # quick: a smoke run of the two cheap trainers (compiling takes CPU-minutes)
        chosen = ("one_by_one", "batched") if quick else tuple(TRAINERS)
        trainer_rows = [
            time_trainers(name, *((1, 2) if quick else (5, 10)), trainers=chosen)
            for name in (TRAINER_ENCODINGS[:1] if quick else TRAINER_ENCODINGS)
        ]
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
    return {"meta": meta, "results": rows, "trainers": trainer_rows}
