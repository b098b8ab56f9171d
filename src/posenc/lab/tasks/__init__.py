"""Seeded length-generalisation tasks: ``make_task(name, **config)`` and ``task_names()``."""

from __future__ import annotations

from typing import Any

from .base import EOS, FIRST, MARK, SEP, Batch, Task
from .classify import AscendingEncoder, Offset
from .flip_flop import FlipFlop
from .grid import GridCross
from .lm import CharLM
from .passkey import Passkey
from .seq2seq import CopyOffset, Translate
from .sequence import (
    Addition,
    Ascending,
    Copy,
    CopyRep,
    Induction,
    Parity,
    Reverse,
    SeqTask,
    Sort,
)

#: The sequence-to-sequence tasks of ``seq2seq``: sweeps name them; the presets' decoder set
#: (``DECODER_TASKS``) leaves them out.
SEQ2SEQ_TASKS = ("copy_offset", "translate")
TASKS: dict[str, type[Task]] = {
    t.name: t
    for t in (
        Ascending,
        AscendingEncoder,
        Offset,
        GridCross,
        CopyRep,
        Copy,
        Reverse,
        Sort,
        Addition,
        Parity,
        Induction,
        FlipFlop,
        Passkey,
        CharLM,
        CopyOffset,
        Translate,
    )
}
#: The prompt-answer tasks (``kind == "decoder"``) but the seq2seq ones, in ``TASKS`` order.
DECODER_TASKS = tuple(
    name for name, t in TASKS.items() if t.kind == "decoder" and name not in SEQ2SEQ_TASKS
)


def task_names() -> list[str]:
    """Task names in a fixed order."""
    return list(TASKS)


def make_task(name: str, **config: Any) -> Task:
    """Build task ``name`` with ``train_len``, ``eval_lens``, ``n_symbols``.

    Raises: ValueError naming the valid tasks, or the task's own length/vocabulary error.
    """
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; choose one of {task_names()}")
    return TASKS[name](**config)


__all__ = [
    "DECODER_TASKS",
    "EOS",
    "FIRST",
    "MARK",
    "SEP",
    "SEQ2SEQ_TASKS",
    "TASKS",
    "Batch",
    "SeqTask",
    "Task",
    "make_task",
    "task_names",
]
