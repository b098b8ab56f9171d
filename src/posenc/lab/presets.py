"""Built-in sweeps. ``quick``: the encodings and tasks that separate at laptop scale, 3
seeds, in minutes; ``full``: every registered encoding on every task, 5 seeds; ``lm``:
character LM loss by position up to 8x the training length. Every run trains to the
competence gate or its step budget. Encodings registered later join automatically
(``quick`` takes those of ``QUICK_ENCODINGS`` that exist)."""

from __future__ import annotations

from typing import Any

from .config import SweepConfig, parse_sweep
from .tasks import DECODER_TASKS

#: In display order; names not registered (yet) are skipped, names starting "randomized" join.
QUICK_ENCODINGS = ("nope", "sinusoidal", "learned", "rope", "alibi", "t5", "kerple", "fire")
QUICK_TASKS = ("copy_rep", "sort", "ascending")
FULL_TASKS = (*DECODER_TASKS, "ascending", "offset", "lm")


def quick_encodings() -> list[str]:
    from ..registry import names

    registered = names()
    randomized = [e for e in registered if e.startswith("randomized")]
    return [e for e in QUICK_ENCODINGS if e in registered] + randomized


PRESETS = ("quick", "full", "lm")
#: The sinusoidal table at its paper size (entries of norm 1) swamps token embeddings drawn
#: at std 0.02: it cannot even learn ``sort`` at the training length (0.00 exact match). At
#: the tokens' size (scale 0.02, like the 0.02-std learned table) it learns it (0.84-0.91).
PE_CONFIG: dict[str, dict[str, Any]] = {"sinusoidal": {"scale": 0.02}}


#: Step budgets per task: a run stops at the competence gate (``TrainConfig.gate``) long
#: before its budget when it learns; the budget bounds the runs that do not.
QUICK_STEPS = {"copy_rep": 1000, "sort": 2000, "ascending": 2000}


def preset_data(name: str) -> dict[str, Any]:
    """The preset as a plain mapping (what a config file would hold)."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {list(PRESETS)}")
    encodings, tasks, seeds, steps, eval_samples = {
        "quick": (quick_encodings(), QUICK_TASKS, [0, 1, 2], 2000, 256),
        "full": (["all"], FULL_TASKS, [0, 1, 2, 3, 4], 3000, 512),
        # the ALiBi paper's curve: loss by position up to 8x the training length
        "lm": (["nope", "sinusoidal", "rope", "alibi"], ("lm",), [0], 600, 128),
    }[name]
    data = {
        "name": name,
        "encodings": encodings,
        "tasks": list(tasks),
        "seeds": seeds,
        "pe_config": PE_CONFIG,
        "train": {"steps": steps, "lr": 3e-3, "eval_samples": eval_samples},
    }
    if name == "quick":
        data["task_train"] = {task: {"steps": n} for task, n in QUICK_STEPS.items()}
    return data


def preset(name: str) -> SweepConfig:
    return parse_sweep(preset_data(name))
