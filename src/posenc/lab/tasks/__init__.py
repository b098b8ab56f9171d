"""Seeded length-generalisation tasks: ``make_task(name, **config)`` and ``task_names()``."""

from __future__ import annotations

from typing import Any

from .base import EOS, FIRST, MARK, SEP, Batch, Task
from .classify import AscendingEncoder, Offset
from .lm import CharLM
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

TASKS: dict[str, type[Task]] = {
    t.name: t
    for t in (
        Ascending,
        AscendingEncoder,
        Offset,
        CopyRep,
        Copy,
        Reverse,
        Sort,
        Addition,
        Parity,
        Induction,
        CharLM,
    )
}
#: The prompt-answer tasks (``kind == "decoder"``), in ``TASKS`` order.
DECODER_TASKS = tuple(name for name, t in TASKS.items() if t.kind == "decoder")


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
    "TASKS",
    "Batch",
    "SeqTask",
    "Task",
    "make_task",
    "task_names",
]
