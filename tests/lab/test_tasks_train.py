"""Review tests: lab config validation that used to accept values leading to silent garbage."""

from __future__ import annotations

import math

import pytest

from posenc.lab.config import RunConfig, TaskConfig, expand, parse_sweep


@pytest.mark.parametrize(
    ("train", "match"),
    [
        ({"lr": math.inf}, r"lr must be finite, got inf"),
        ({"weight_decay": math.nan}, r"weight_decay must be finite, got nan"),
        ({"weight_decay": math.inf}, r"weight_decay must be finite, got inf"),
    ],
)
def test_non_finite_optimizer_settings_are_refused(train: dict, match: str) -> None:
    """lr = inf or weight_decay = nan/inf passed the > 0 / >= 0 checks and trained to NaN."""
    with pytest.raises(ValueError, match=match):
        parse_sweep({"tasks": ["copy"], "train": train})


def test_infinite_grad_clip_still_means_no_clipping() -> None:
    assert parse_sweep({"tasks": ["copy"], "train": {"grad_clip": math.inf}}).train.grad_clip == (
        math.inf
    )


def test_pe_config_for_an_unknown_encoding_is_refused() -> None:
    """A misspelt encoding name in pe_config used to be ignored: the run used the defaults."""
    sweep = parse_sweep({"tasks": ["copy"], "encodings": ["rope"], "pe_config": {"rpoe": {}}})
    with pytest.raises(ValueError, match=r"'pe_config'.*unknown positional encoding 'rpoe'"):
        expand(sweep)
    # an encoding that exists but is not in this sweep stays allowed (presets share one table)
    ok = parse_sweep({"tasks": ["copy"], "encodings": ["rope"], "pe_config": {"alibi": {}}})
    assert len(expand(ok)) == 1


def test_run_config_refuses_an_unknown_backend() -> None:
    """train_run ran torch for any backend other than "jax" (a typo trained the wrong stack)."""
    with pytest.raises(ValueError, match=r"backend must be one of \('torch', 'jax'\), got 'Jax'"):
        RunConfig(encoding="rope", task=TaskConfig(name="copy"), backend="Jax")


def test_empty_eval_lens_are_refused_not_replaced_by_the_defaults() -> None:
    from posenc.lab.tasks import make_task

    with pytest.raises(ValueError, match=r"copy: eval_lens must name at least one length"):
        make_task("copy", eval_lens=())


@pytest.mark.parametrize("field", ["steps", "batch_size", "eval_samples"])
def test_booleans_are_not_counts(field: str) -> None:
    from posenc.lab.config import TrainConfig

    with pytest.raises(ValueError, match=f"{field} must be a number, got True"):
        TrainConfig(**{field: True})


def test_boolean_symbol_count_is_refused() -> None:
    from posenc.lab.tasks import make_task

    with pytest.raises(ValueError, match=r"n_symbols must be an int >= 1, got True"):
        make_task("copy", n_symbols=True)
