"""Built-in sweeps. ``quick``: the encodings and tasks that separate at laptop scale, in
minutes; ``full``: every registered encoding on every task, 3 seeds; ``lm``: character LM
loss by position up to 8x the training length. Encodings registered
later join automatically (``quick`` takes those of ``QUICK_ENCODINGS`` that exist)."""

from __future__ import annotations

from typing import Any

from .config import SweepConfig, parse_sweep

#: In display order; names not registered (yet) are skipped, names starting "randomized" join.
QUICK_ENCODINGS = ("nope", "sinusoidal", "learned", "rope", "alibi", "t5", "kerple", "fire")
QUICK_TASKS = ("copy_rep", "sort", "ascending")
FULL_TASKS = (
    "copy_rep",
    "copy",
    "reverse",
    "sort",
    "addition",
    "parity",
    "induction",
    "ascending",
    "offset",
    "lm",
)


def quick_encodings() -> list[str]:
    from ..registry import names

    registered = names()
    return [e for e in QUICK_ENCODINGS if e in registered] + [
        e for e in registered if e.startswith("randomized")
    ]


PRESETS = ("quick", "full", "lm")
#: The sinusoidal table at its paper size (entries of norm 1) swamps token embeddings drawn
#: at std 0.02: it cannot even learn ``sort`` at the training length (0.00 exact match). At
#: the tokens' size (scale 0.02, like the 0.02-std learned table) it learns it (0.84-0.91).
PE_CONFIG: dict[str, dict[str, Any]] = {"sinusoidal": {"scale": 0.02}}


def preset_data(name: str) -> dict[str, Any]:
    """The preset as a plain mapping (what a config file would hold)."""
    if name == "quick":
        return {
            "name": "quick",
            "encodings": quick_encodings(),
            "tasks": list(QUICK_TASKS),
            "seeds": [0, 1],
            "pe_config": PE_CONFIG,
            "train": {"steps": 600, "lr": 3e-3, "eval_samples": 256},
        }
    if name == "full":
        return {
            "name": "full",
            "encodings": ["all"],
            "tasks": list(FULL_TASKS),
            "seeds": [0, 1, 2],
            "pe_config": PE_CONFIG,
            "train": {"steps": 2000, "lr": 3e-3, "eval_samples": 512},
        }
    if name == "lm":  # the ALiBi paper's curve: loss by position up to 8x the training length
        return {
            "name": "lm",
            "encodings": ["nope", "sinusoidal", "rope", "alibi"],
            "tasks": ["lm"],
            "seeds": [0],
            "pe_config": PE_CONFIG,
            "train": {"steps": 600, "lr": 3e-3, "eval_samples": 128},
        }
    raise ValueError(f"unknown preset {name!r}; choose one of {list(PRESETS)}")


def preset(name: str) -> SweepConfig:
    return parse_sweep(preset_data(name))
