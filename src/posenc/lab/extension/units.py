"""The units of work of one extension-lab run, each a function of plain data run in a worker.

- ``pretrain/ENC/sSEED``: train ENC at L, save its weights, measure loss and passkey at L
  (the baselines ALiBi, NoPE and FIRE also at every factor·L, unchanged);
- ``free/METHOD/sSEED``: the RoPE model with METHOD at each factor s, training-free: loss and
  passkey at s·L, and the loss at L with the largest factor (the "below L" check);
  ``free/longrope`` first searches its factors (stored in the unit's info);
- ``tune/METHOD/xS/sSEED``: METHOD at factor S fine-tuned at S·L, then loss and passkey there
  (``tune/ntk`` also evaluates its weights with dynamic NTK: see ``SHARED_TUNE``);
- ``stream/sSEED``: the RoPE model streamed through a window cache without and with sinks.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...models import TinyTransformer
from ..config import ExtendConfig
from ..store import ExtendRow, UnitResult
from ..train import save_checkpoint
from .corpus import corpus
from .measure import Measure, first_token_attention, loss, retrieval, stream
from .methods import build_model, longrope_search, rescaled, scaling
from .pretrain import fine_tune, pretrain

CHECKPOINTS = "extend-checkpoints"
#: Fine-tunes that are another method's: dynamic NTK (factor 1) trained at s·L uses s' =
#: s·L / L = s at every step, NTK's frequencies exactly (a test checks the weights match bit
#: for bit), so ``tune/ntk`` fine-tunes once and evaluates the weights with both scalings.
SHARED_TUNE = {"dynamic": "ntk"}


@dataclass(frozen=True)
class Unit:
    """A unit's ``name`` (also its store key), what it runs and the units it needs first."""

    name: str
    kind: str  # pretrain, free, tune, stream
    seed: int
    encoding: str = "rope"
    method: str = "none"
    factor: int = 1
    needs: tuple[str, ...] = ()


def plan(cfg: ExtendConfig) -> list[Unit]:
    """Every unit of ``cfg``, heaviest first within each kind (fine-tunes at 8x first)."""
    units: list[Unit] = []
    for enc in ("rope", *cfg.baselines):
        units += [Unit(f"pretrain/{enc}/s{s}", "pretrain", s, enc) for s in cfg.seeds]
    for s in cfg.seeds:
        base = (f"pretrain/rope/s{s}",)
        for factor in sorted(cfg.factors, reverse=True):
            for m in cfg.methods:
                if SHARED_TUNE.get(m) in cfg.methods:
                    continue  # evaluated by the unit of the method it shares
                needs = (*base, f"free/longrope/s{s}") if m == "longrope" else base
                units.append(Unit(f"tune/{m}/x{factor}/s{s}", "tune", s, "rope", m, factor, needs))
        units += [Unit(f"free/{m}/s{s}", "free", s, "rope", m, needs=base) for m in cfg.methods]
        units.append(Unit(f"stream/s{s}", "stream", s, needs=base))
    return sorted(units, key=lambda u: ("pretrain", "free", "tune", "stream").index(u.kind))


def checkpoint_path(out: Path, encoding: str, seed: int) -> Path:
    return out / CHECKPOINTS / f"{encoding}-s{seed}.pt"


def execute(
    unit: Unit, cfg: ExtendConfig, out: Path, needs: dict[str, dict[str, Any]]
) -> UnitResult:
    """Run ``unit`` (one torch thread); ``needs``: the info of the units it needs."""
    torch.set_num_threads(1)
    start, cpu = time.perf_counter(), time.process_time()
    rows, info = _RUN[unit.kind](unit, cfg, out, needs)
    return UnitResult(unit.name, rows, info, time.perf_counter() - start, time.process_time() - cpu)


def _tag(
    unit: Unit, variant: str, factor: int, found: list[Measure], method: str = ""
) -> list[ExtendRow]:
    return [
        ExtendRow(
            unit.seed,
            unit.encoding,
            method or unit.method,
            variant,
            factor,
            m.length,
            m.metric,
            m.value,
            m.start,
            m.end,
            m.depth,
        )
        for m in found
    ]


def _load(cfg: ExtendConfig, out: Path, seed: int) -> TinyTransformer:
    path = checkpoint_path(out, "rope", seed)
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; delete the store to train the models again")
    model = build_model(cfg, "rope")
    model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
    return model.eval()


def _pretrain(
    unit: Unit, cfg: ExtendConfig, out: Path, needs: dict
) -> tuple[list[ExtendRow], dict]:
    model, losses = pretrain(cfg, unit.encoding, unit.seed)
    save_checkpoint(model.state_dict(), out / CHECKPOINTS, f"{unit.encoding}-s{unit.seed}")
    L = cfg.context
    found = loss(model, cfg, L) + retrieval(model, cfg, L)
    rows = _tag(unit, "free", 1, found)
    if unit.encoding != "rope":
        for s in cfg.factors:
            rows += _tag(unit, "free", s, loss(model, cfg, s * L) + retrieval(model, cfg, s * L))
    gate = float(np.mean([m.value for m in found if m.metric == "passkey"]))
    curve = [(i, v) for i, v in enumerate(losses) if i % 20 == 0 or i == len(losses) - 1]
    return rows, {"loss_curve": curve, "passkey_at_L": gate, "passed_gate": gate >= cfg.gate}


def _free(unit: Unit, cfg: ExtendConfig, out: Path, needs: dict) -> tuple[list[ExtendRow], dict]:
    base, L = _load(cfg, out, unit.seed), cfg.context
    info: dict[str, Any] = {}
    long_factors: dict[int, list[float]] = {}
    if unit.method == "longrope":
        train = corpus()[0]
        for s in cfg.factors:
            rng = np.random.default_rng([unit.seed, s, 2])
            lam, scored = longrope_search(_fitness(base, cfg, s, train, rng), cfg, s, rng)
            long_factors[s] = [float(x) for x in lam]
            info[f"search_x{s}"] = scored
        info["long_factor"] = {str(s): f for s, f in long_factors.items()}
    rows: list[ExtendRow] = []
    for s in cfg.factors:
        model = rescaled(base, cfg, scaling(unit.method, s, cfg, long_factors.get(s)))
        rows += _tag(unit, "free", s, loss(model, cfg, s * L) + retrieval(model, cfg, s * L))
    if unit.method != "none":  # below L: the largest factor's scaling at L (none: = pretrain)
        s = max(cfg.factors)
        model = rescaled(base, cfg, scaling(unit.method, s, cfg, long_factors.get(s)))
        rows += _tag(unit, "free", s, loss(model, cfg, L))
    return rows, info


def _fitness(
    base: TinyTransformer, cfg: ExtendConfig, s: int, text: np.ndarray, rng: np.random.Generator
) -> Callable[[np.ndarray], float]:
    """LongRoPE's search objective: the mean loss of the model with factors λ on
    ``cfg.search_windows`` consecutive windows of s·L training tokens (drawn once, the same
    for every candidate)."""
    n, k = s * cfg.context, cfg.search_windows
    if k * n >= len(text):
        raise ValueError(f"{k} search windows of {n} tokens exceed the training text")
    start = int(rng.integers(0, len(text) - k * n))
    windows = torch.from_numpy(text[start : start + k * n].reshape(k, n))  # (k, n)

    @torch.no_grad()
    def fitness(lam: np.ndarray) -> float:
        model = rescaled(base, cfg, scaling("longrope", s, cfg, lam))
        return float(model.loss(windows[:, :-1], windows[:, 1:]))

    return fitness


def _tune(unit: Unit, cfg: ExtendConfig, out: Path, needs: dict) -> tuple[list[ExtendRow], dict]:
    s, base = unit.factor, _load(cfg, out, unit.seed)
    lam = None
    if unit.method == "longrope":
        lam = needs[f"free/longrope/s{unit.seed}"]["long_factor"][str(s)]
    model = rescaled(base, cfg, scaling(unit.method, s, cfg, lam))
    losses = fine_tune(model, cfg, s, unit.seed)
    n = s * cfg.context
    rows = _tag(unit, "tuned", s, loss(model, cfg, n) + retrieval(model, cfg, n))
    for other, same in SHARED_TUNE.items():
        if same == unit.method and other in cfg.methods:
            model = rescaled(model, cfg, scaling(other, s, cfg))
            rows += _tag(unit, "tuned", s, loss(model, cfg, n) + retrieval(model, cfg, n), other)
    return rows, {"ft_losses": losses}


def _stream(unit: Unit, cfg: ExtendConfig, out: Path, needs: dict) -> tuple[list[ExtendRow], dict]:
    base, s = _load(cfg, out, unit.seed), max(cfg.factors)
    rows = _tag(unit, "free", s, stream(base, cfg, 0), "window")
    rows += _tag(unit, "free", s, stream(base, cfg, cfg.sinks), "sinks")
    return rows, {"first_token_attention": first_token_attention(base, cfg)}


_RUN = {"pretrain": _pretrain, "free": _free, "tune": _tune, "stream": _stream}
