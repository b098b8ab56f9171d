"""Built-in sweeps. ``quick``: the encodings and tasks that separate at laptop scale, 3
seeds, in minutes; ``full``: every registered encoding on every task, 5 seeds; ``lm``:
character LM loss by position up to 8x the training length; ``seq2seq``: decoder-only and
encoder-decoder side by side on the sequence-to-sequence tasks; ``grid``: the 2-D encodings on
``grid_cross``, trained on grids of side 4..8 and evaluated on 12 x 12 and 16 x 16, 3 seeds (Heo et
al. 2024's resolution extrapolation); ``frontier``: the data-dependent families and per-layer
schedules of 2024-2025 against RoPE, one task per published claim, 3 seeds (``findings``'
FoX, stick-breaking, PaTH and schedule findings). Every run trains to the
competence gate or its step budget. Encodings registered later join automatically
(``quick`` takes those of ``QUICK_ENCODINGS`` that exist)."""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

from .config import ExtendConfig, SweepConfig, parse_sweep
from .tasks import DECODER_TASKS

#: In display order; names not registered (yet) are skipped, names starting "randomized" join.
QUICK_ENCODINGS = ("nope", "sinusoidal", "learned", "rope", "alibi", "t5", "kerple", "fire")
QUICK_TASKS = ("copy_rep", "sort", "ascending")
#: Task settings of ``quick`` (the tasks' defaults otherwise). ``sort`` as Kazemnejad et al.
#: 2023's split (trained to 8, tested to 16 = 2x) over 32 distinct symbols: at 64 symbols
#: RoPE (seed 0) took 2000 steps to the gate, at 32 1200. At 4x (32) a 32-symbol prompt
#: holds every symbol (its answer a constant), and with 64 symbols that column was 0.00-0.33
#: for every encoding; at 2x the encodings still spread from 0.25 (learned) to 0.97 (ALiBi).
QUICK_TASK_SETTINGS: dict[str, dict[str, Any]] = {
    "sort": {"n_symbols": 32, "eval_lens": [8, 12, 16]}
}
FULL_TASKS = (*DECODER_TASKS, "ascending", "offset", "lm")


def quick_encodings() -> list[str]:
    from ..registry import names

    registered = names()
    randomized = [e for e in registered if e.startswith("randomized")]
    return [e for e in QUICK_ENCODINGS if e in registered] + randomized


#: The ``seq2seq`` preset: each of these encodings as a decoder and as an encoder-decoder.
SEQ2SEQ_ENCODINGS = ("nope", "sinusoidal", "rope", "alibi", "t5")
#: ``translate`` only, to fit about 15-20 CPU-minutes. ``copy_offset`` is left out: its
#: answer starts at absolute position 2 and wraps at a point that moves with n, a different
#: rule at every training length, and RoPE (seed 0, lengths 1..8) was at 0.40-0.51 gate exact
#: match after 1500-2250 steps (a decoder at lr 3e-3 or 1e-3, 10 or 32 symbols, lengths 1..6),
#: 0.83-0.86 after 3000. ``reverse`` (``--set 'tasks=[reverse,translate]'``) needs its 2500
#: steps: RoPE passed in 1300 (decoder) and 2200 (encoder-decoder) steps, and the runs that
#: never pass (nope both ways, the ALiBi decoder at 0.90) spend all of it: about 38
#: CPU-seconds a decoder run, near 1000 for its 30 runs.
SEQ2SEQ_PRESET_TASKS = ("translate",)
#: Step budgets per task (RoPE passed ``translate`` in 550 and 800 steps, seed 0).
SEQ2SEQ_STEPS = {"reverse": 2500, "translate": 1500}
PRESETS = ("quick", "full", "lm", "seq2seq", "grid", "frontier")
#: The grid preset's encodings: NoPE the control (chance: the classes hold the same tokens).
GRID_ENCODINGS = ("nope", "sincos_2d", "learned_2d", "rope_2d", "rope_mixed")
#: The sinusoidal table at its paper size (entries of norm 1) swamps token embeddings drawn
#: at std 0.02: it cannot even learn ``sort`` at the training length (0.00 exact match). At
#: the tokens' size (scale 0.02, like the 0.02-std learned table) it learns it (0.84-0.91).
PE_CONFIG: dict[str, dict[str, Any]] = {"sinusoidal": {"scale": 0.02}}


#: Training per encoding. T5's bias table starts at N(0, 0.02²) and, under AdamW, moves about
#: one learning rate per step: at 3e-3 it stays near zero (largest entry 0.45 after 2000
#: steps) and T5 stays at chance (0.52) on an ascending-order decoder task with one-swap
#: negatives, where attending to the neighbour needs biases of a few units. Ten times the rate
#: for the table (x-transformers scales its table by sqrt(head_dim) = 4 for the same reason;
#: T5's Adafactor scales updates by the parameter's size) passes that task's gate on seeds
#: 0, 1, 2 in 1350, 1650, 1450 steps (table max 3.5-4.3), sort in 1100 steps (1500-1650 at 1x),
#: and takes the encoder ``ascending`` from 0.47 to 0.41-0.99. A larger init does as well on
#: the decoder task (std 1.0: 1350 steps; HF's d_model^-0.5 = 0.125 does not) but leaves the
#: buckets never reached in training, which extrapolation meets, at random values that size.
#: (Measured at lr 3e-3; at the quick preset's 2e-3 the 10x passes every T5 run.)
ENCODING_TRAIN: dict[str, dict[str, Any]] = {"t5": {"pe_lr_scale": 10.0}}
#: Step budgets per task: a run stops at the competence gate (``TrainConfig.gate``) long
#: before its budget when it learns; the budget bounds the runs that do not. The cosine decay
#: ends at ``QUICK_DECAY`` steps whatever the budget, and the 2000 steps after it at 10% of
#: the rate are for the rare run still short of the gate. With the decay over the whole budget
#: a longer budget changed every run's steps: at a 2000-step budget (lr 3e-3) NoPE
#: ``ascending`` seed 2 ended at 0.98; at 3000 three others ended at 0.92-0.95 (NoPE seeds 1,
#: 2, ALiBi seed 2). At lr 2e-3 and 2000 steps one ``ascending`` run in 27 still ended short
#: (RoPE seed 1 at 0.97); with the decay at 2000 and a budget of 4000 it passed in 2750 steps
#: (NoPE seed 2 at lr 3e-3 in 2050, sinusoidal seed 2 at warm-up 200 in 3200).
QUICK_STEPS = {"copy_rep": 4000, "sort": 4000, "ascending": 4000}
QUICK_DECAY = 2000
#: The quick preset's rate: at 3e-3 its 81 runs needed 1000 CPU-seconds (467, 1087 and 894
#: steps on average for ``copy_rep``, ``sort``, ``ascending``); at 2e-3 with the same
#: budgets 755 (431, 983 and 667), the same number passing (warm-up 200 at 3e-3: 756).
QUICK_LR = 2e-3
#: ``ascending`` answers one token a sample, so a batch of 64 gives little signal: with the
#: gate on the worst training length, at batch 64 sinusoidal (seeds 0, 2) and learned (seed 0)
#: stayed at 0.89-0.97 after 3000 steps (34 CPU-s each); at batch 128 sinusoidal seeds 0, 2
#: passed in 550 and 700 steps (9.3, 10.8 CPU-s).
QUICK_BATCH = {"ascending": 128}
#: ``quick``'s model: the default but d_ff = 2 d_model (128, not 256): a step is about 13%
#: cheaper (15.6 -> 13.6 ms) and fewer steps reach the gate (seed 0, RoPE, T5, FIRE: sort
#: 950, 1100, 1000 -> 700, 850, 850 steps; copy_rep 1500, 650, 500 -> 1050, 450, 450).
QUICK_MODEL: dict[str, Any] = {"d_ff": 128}
#: The grid preset (``grid_cross``, trained on grids of side 4..8, each batch one side drawn
#: uniformly, evaluated at 12 x 12 and 16 x 16). Tokens at N(0, 1) for every encoding
#: (``ModelConfig.embed_std``; a ViT's patch embeddings are of order 1): at GPT-2's 0.02 the
#: tables stay at a constant answer, even a frozen one-hot (row, column) table. sincos_2d at
#: scale 4 (MAE's scale 1 stays at chance). Mixed sides (as FlexiViT and NaViT train) because
#: learned_2d cannot start at 8 x 8 alone: a random table holds no row or column structure for
#: the gradient to start from, and at 8 x 8 it stays at loss ln 2 (seed 0: through 3250 steps
#: of a 6000-step budget; 1300 at lr 1e-2; 2000 at init_std 0.02 with pe_lr_scale 10; init_std
#: 0.3 to 4, the table's rate 0.1x to 10x, d_model 128, one head, one layer, batch 256 or 512,
#: one distractor symbol: all at ln 2), while small grids (the table's top-left corner) teach
#: it rows and columns (4 x 4 in 300-400 steps). On sides 4..8 it passed the gate in 5800 steps
#: of a 14000-step budget (seed 0, 214 CPU-s on one thread); under the confirmed gate a
#: 12000-step budget left seed 2 at 0.96, and at 20000 seeds 0, 1, 2 pass in 8500, 6350 and
#: 19550 steps (451, 227, 797 CPU-s), so its budget is 20000.
#: rope_2d and rope_mixed passed 8 x 8 alone in 100-850 steps, sincos_2d in 1550-3050; on
#: sides 4..8 rope_2d and rope_mixed in 150-200, sincos_2d in 1800 and 1400 (seeds 0, 1) while
#: seed 2 ended its 4000-step budget at 0.98, so the budget is 8000.
GRID_TASK: dict[str, Any] = {"name": "grid_cross", "train_len": [4, 8]}
GRID_MODEL: dict[str, Any] = {"embed_std": 1.0}
GRID_PE_CONFIG: dict[str, dict[str, Any]] = {
    "sincos_2d": {"scale": 4.0},
    "learned_2d": {"init_std": 1.0},
}
GRID_STEPS = 8000
#: NoPE, the control, is at chance by construction (both classes hold the same tokens).
GRID_TRAIN: dict[str, dict[str, Any]] = {"nope": {"steps": 300}, "learned_2d": {"steps": 20000}}


#: The frontier preset: per task, RoPE and the encodings of one published claim (each cell 3
#: seeds), on ``quick``'s model and rate. ``lm`` at a training length of 32 characters,
#: evaluated in windows of 256 (8x, buckets of 32) at batch 32: FoX's step costs about twice
#: RoPE's (SDPA) there, PaTH's about four times on the sequence tasks (measured on 2 shared
#: cores, seed 0, before the runs). The retrieval tasks: ``induction`` (associative recall,
#: 64 symbols), in whose first run none of the 9 runs passed the gate (gate scores 0.03-0.16
#: after 3000 steps; a pilot of RoPE at 16 symbols and lr 3e-3 was at 0.25 exact match after
#: 5000), so ``passkey`` was added: one marked value in a haystack, trained on 2..12 tokens
#: (in a pilot of RoPE, seed 0, on 2..16 it had not passed after 4000 steps; on 2..8 and 2..12
#: it passed in 750 and 250), evaluated to 8x.
FRONTIER_CELLS: dict[str, tuple[str, ...]] = {
    "lm": ("rope", "fox"),
    "copy_rep": ("rope", "stick_breaking"),
    "sort": ("rope", "stick_breaking"),
    "flip_flop": ("rope", "path"),
    "induction": ("rope", "irope", "rnope_swa"),
    "passkey": ("rope", "irope", "rnope_swa"),
}
FRONTIER_TASK_SETTINGS: dict[str, dict[str, Any]] = {
    "lm": {"train_len": [32, 32]},
    "sort": QUICK_TASK_SETTINGS["sort"],
    "passkey": {"train_len": [2, 12], "eval_lens": [12, 24, 48, 96]},
}
#: The schedules at the lab's depth (2 layers; ``posenc.lab.schedules``): one local RoPE
#: layer (base 10000, as the ``rope`` it is compared with; iRoPE keeps Llama 4's interleaved
#: pairs and NoPE temperature, which is 1 below 8191 tokens) and one global NoPE layer. The
#: window and chunk (8) are shorter than the longest training samples (``induction`` 2·8 + 4
#: = 20 tokens, ``passkey`` 12 + 3 = 15).
FRONTIER_PE_CONFIG: dict[str, dict[str, Any]] = {
    "irope": {"interval": 2, "chunk": 8, "base": 10000.0},
    "rnope_swa": {"interval": 2, "window": 8},
}
#: Budgets: the gate stops a run that learns; these bound the ones that do not (PaTH's
#: ``flip_flop`` budget the smallest: about 0.11 s a step).
FRONTIER_STEPS = {
    "lm": 600,
    "copy_rep": 3000,
    "sort": 3000,
    "flip_flop": 2000,
    "induction": 3000,
    "passkey": 3000,
}
FRONTIER_BATCH = {"lm": 32}


def preset_data(name: str) -> dict[str, Any]:
    """The preset as a plain mapping (what a config file would hold)."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {list(PRESETS)}")
    encodings, tasks, seeds, steps, eval_samples = {
        "quick": (quick_encodings(), QUICK_TASKS, [0, 1, 2], 2000, 256),
        "full": (["all"], FULL_TASKS, [0, 1, 2, 3, 4], 3000, 512),
        # the ALiBi paper's curve: loss by position up to 8x the training length
        "lm": (["nope", "sinusoidal", "rope", "alibi"], ("lm",), [0], 600, 128),
        "seq2seq": (list(SEQ2SEQ_ENCODINGS), SEQ2SEQ_PRESET_TASKS, [0, 1, 2], 1500, 256),
        "grid": (list(GRID_ENCODINGS), ("grid_cross",), [0, 1, 2], GRID_STEPS, 256),
        "frontier": (
            list(dict.fromkeys(e for cell in FRONTIER_CELLS.values() for e in cell)),
            tuple(FRONTIER_CELLS),
            [0, 1, 2],
            3000,
            256,
        ),
    }[name]
    data: dict[str, Any] = {
        "name": name,
        "encodings": encodings,
        "tasks": list(tasks),
        "seeds": seeds,
        "pe_config": PE_CONFIG,
        "train": {"steps": steps, "lr": 3e-3, "eval_samples": eval_samples},
        "encoding_train": ENCODING_TRAIN,
    }
    if name == "quick":
        data["tasks"] = [{"name": t, **QUICK_TASK_SETTINGS.get(t, {})} for t in tasks]
        data["model"] = QUICK_MODEL
        data["train"] |= {"lr": QUICK_LR, "decay_steps": QUICK_DECAY}
        data["task_train"] = {
            task: {"steps": n} | ({"batch_size": QUICK_BATCH[task]} if task in QUICK_BATCH else {})
            for task, n in QUICK_STEPS.items()
        }
    if name == "frontier":
        data["tasks"] = [{"name": t, **FRONTIER_TASK_SETTINGS.get(t, {})} for t in FRONTIER_CELLS]
        data["task_encodings"] = {t: list(cell) for t, cell in FRONTIER_CELLS.items()}
        data["pe_config"] = FRONTIER_PE_CONFIG
        data["model"] = QUICK_MODEL
        data["train"] |= {"lr": QUICK_LR, "decay_steps": QUICK_DECAY}
        data["task_train"] = {
            task: {"steps": n}
            | ({"batch_size": FRONTIER_BATCH[task]} if task in FRONTIER_BATCH else {})
            for task, n in FRONTIER_STEPS.items()
        }
        data["task_train"]["lm"] |= {"lr": 3e-3, "decay_steps": None}  # the lm preset's rate
    if name == "seq2seq":
        data["architectures"] = ["decoder", "encoder_decoder"]
        data["task_train"] = {task: {"steps": n} for task, n in SEQ2SEQ_STEPS.items()}
    if name == "grid":
        data["model"] = GRID_MODEL
        data["pe_config"] = GRID_PE_CONFIG
        data["encoding_train"] = GRID_TRAIN
        data["tasks"] = [GRID_TASK]
    return data


def preset(name: str) -> SweepConfig:
    return parse_sweep(preset_data(name))


# --- the extend suite's presets (``posenc lab extend``) -------------------------------------

#: ``extend``: the published comparisons at CPU scale (see README for its time); ``quick``: every
#: code path in seconds (2 seeds so intervals exist; the numbers mean nothing).
EXTEND_PRESETS: dict[str, ExtendConfig] = {
    "extend": ExtendConfig(),
    "quick": ExtendConfig(
        name="quick",
        context=32,
        factors=(2, 4),
        seeds=(0, 1),
        d_model=32,
        n_layers=1,
        n_heads=2,
        steps=40,
        batch=8,
        warmup=5,
        ft_fraction=0.1,
        eval_tokens=256,
        bucket=8,
        depths=(0.0, 1.0),
        trials=1,
        window=16,
        sinks=2,
        stream_rows=2,
        search_generations=1,
        search_children=2,
        search_windows=2,
    ),
}


def extend_preset(which: str, /, **overrides: Any) -> ExtendConfig:
    """The built-in configuration ``which``, with ``overrides`` of its fields.

    Raises: ValueError for an unknown preset or field (naming the valid ones).
    """
    if which not in EXTEND_PRESETS:
        raise ValueError(
            f"unknown extension-lab preset {which!r}; choose one of {list(EXTEND_PRESETS)}"
        )
    valid = {f.name for f in fields(ExtendConfig)}
    unknown = sorted(set(overrides) - valid)
    if unknown:
        raise ValueError(f"unknown extend config key(s) {unknown}; valid keys: {sorted(valid)}")
    return replace(EXTEND_PRESETS[which], **overrides)
