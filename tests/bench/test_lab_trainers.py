"""The trainer comparison of ``posenc bench lab`` times the same training: the batched seeds
(one vmapped model, stacked parameters, per-seed clipping, one AdamW) equal each seed trained
on its own, in float64, step for step."""

from __future__ import annotations

import pytest
import torch

from posenc.bench import lab


@pytest.mark.parametrize("encoding", ["nope", "alibi", "t5"])
def test_batched_seeds_equal_each_seed_trained_alone(encoding: str) -> None:
    alone, start = (lab.seed_models(encoding, 3, torch.float64) for _ in range(2))
    together = lab.Batched(lab.seed_models(encoding, 3, torch.float64))
    step = lab.one_by_one(alone)
    gen = torch.Generator().manual_seed(0)
    for _ in range(3):
        tokens, targets = lab.lab_batch(gen, 3, batch=4)  # (S, B, T): each seed its own
        step(tokens, targets)
        together(tokens, targets)
    for s, (model, initial) in enumerate(zip(alone, start, strict=True)):
        for (name, trained), first in zip(
            model.named_parameters(), initial.parameters(), strict=True
        ):
            assert not torch.equal(trained, first) or name.endswith(".bias")
            torch.testing.assert_close(together.params[name][s], trained, rtol=1e-9, atol=1e-12)
