"""The ``frontier`` preset: its grid, the per-layer schedules as lab encodings, ``task_encodings``,
and the four findings' rules on hand-made runs (reproduced, not reproduced, inconclusive)."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from posenc.encodings.nope import NoPE, NoPETemperature
from posenc.encodings.rotary import RoPE
from posenc.lab.config import ModelConfig, expand, parse_sweep
from posenc.lab.findings import check_findings
from posenc.lab.model import LabModel
from posenc.lab.presets import FRONTIER_CELLS, preset, preset_data
from posenc.lab.results import Run, panels
from posenc.lab.schedules import lab_schedule
from posenc.lab.tasks import make_task
from posenc.models import TinyTransformer

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
SEEDS = (0, 1, 2)
LIN, TAN, PATH, INTERLEAVED = 5, 6, 7, 8  # the findings' places in check_findings


def test_frontier_trains_each_claims_encodings_on_its_task_only() -> None:
    runs = expand(preset("frontier"))
    cells = {(r.task.name, r.encoding) for r in runs}
    assert cells == {(t, e) for t, es in FRONTIER_CELLS.items() for e in es}
    assert len(runs) == 3 * len(cells)  # three seeds each
    lm = next(r for r in runs if r.task.name == "lm")
    assert lm.task.train_len == (32, 32) and lm.train.batch_size == 32 and lm.train.steps == 600
    irope = next(r for r in runs if r.encoding == "irope")
    assert irope.pe_config == {"interval": 2, "chunk": 8, "base": 10000.0}
    assert {r.model.d_ff for r in runs} == {128}  # quick's model


def test_quick_preset_keys_still_match_its_committed_store() -> None:
    """The frontier preset's config keys leave ``quick`` as it was: its runs resume."""
    assert "task_encodings" not in preset_data("quick")
    keys = {r.key() for r in expand(preset("quick"))}
    with sqlite3.connect(f"file:{RESULTS / 'lab-quick.sqlite'}?mode=ro", uri=True) as db:
        stored = {row[0] for row in db.execute("SELECT key FROM runs")}
    assert keys <= stored


@pytest.mark.parametrize(
    ("task_encodings", "match"),
    [
        ({"copyy": ["rope"]}, r"task_encodings\.copyy: unknown task"),
        ({"copy": ["alibi"]}, r"task_encodings\.copy must be a non-empty subset of encodings"),
        ({"copy": []}, "non-empty subset"),
    ],
)
def test_task_encodings_refuses_what_would_widen_the_grid(
    task_encodings: dict[str, list[str]], match: str
) -> None:
    data = {"encodings": ["rope", "nope"], "tasks": ["copy"], "task_encodings": task_encodings}
    with pytest.raises(ValueError, match=match):
        parse_sweep(data)


def test_task_encodings_narrows_one_task_and_leaves_the_others() -> None:
    sweep = parse_sweep(
        {
            "encodings": ["rope", "nope"],
            "tasks": ["copy", "sort"],
            "task_encodings": {"sort": ["nope"]},
        }
    )
    assert {(r.task.name, r.encoding) for r in expand(sweep)} == {
        ("copy", "rope"),
        ("copy", "nope"),
        ("sort", "nope"),
    }


def _net(encoding: str, pe_config: dict[str, object]) -> TinyTransformer:
    net = LabModel(make_task("induction"), ModelConfig(n_layers=4), encoding, pe_config).net
    assert isinstance(net, TinyTransformer)
    return net


def test_schedules_build_their_encoding_and_local_attention_per_layer() -> None:
    irope = _net("irope", {"interval": 2, "chunk": 8, "base": 10000.0})
    assert [type(pe) for pe in irope.layer_pes] == [RoPE, NoPETemperature] * 2
    limits = [(b.attn.window, b.attn.chunk) for b in irope.blocks]  # type: ignore[union-attr]
    assert limits == [(None, 8), (None, None)] * 2
    assert irope.layer_pes[0] is irope.layer_pes[2]  # one built encoding per distinct entry
    swa = _net("rnope_swa", {"interval": 4, "window": 8})
    assert [type(pe) for pe in swa.layer_pes] == [RoPE, RoPE, RoPE, NoPE]
    assert [b.attn.window for b in swa.blocks] == [8, 8, 8, None]  # type: ignore[union-attr]
    x = torch.randint(3, 20, (2, 30))
    assert swa(x).shape == (2, 30, swa.tok.num_embeddings)


def test_schedule_config_and_architecture_errors() -> None:
    with pytest.raises(ValueError, match="unknown lab schedule 'gemma9'"):
        lab_schedule("gemma9")
    with pytest.raises(ValueError, match=r"pe_config of schedule 'irope'.*windw"):
        lab_schedule("irope", {"windw": 8})
    with pytest.raises(ValueError, match="interval"):
        lab_schedule("rnope_swa", {"interval": 1})
    bad = {"encodings": ["irope"], "tasks": ["offset"]}
    with pytest.raises(ValueError, match="per-layer schedule"):
        expand(parse_sweep(bad))
    with pytest.raises(ValueError, match="torch backend only"):
        expand(parse_sweep({"encodings": ["rnope_swa"], "tasks": ["copy"], "backend": "jax"}))
    with pytest.raises(ValueError, match="builds a decoder"):
        LabModel(make_task("copy"), ModelConfig(architecture="encoder_decoder"), "irope")


def _run(enc: str, task: str, seed: int, values: dict[int, float], metric: str) -> Run:
    train_len = (32, 32) if task == "lm" else (2, 8)
    cfg = {
        "encoding": enc,
        "seed": seed,
        "pe_config": {},
        "task": {"name": task, "train_len": list(train_len), "eval_lens": sorted(values)},
    }
    metrics = {(metric, n): v for n, v in values.items()}
    return Run(f"{enc}-{task}-{seed}", enc, task, seed, train_len[1], metrics, cfg, True)


def _beyond(enc: str, task: str, scores: list[float]) -> list[Run]:
    """Exact match 1.0 at the training length 8, ``scores[seed]`` at 16."""
    return [
        _run(enc, task, s, {8: 1.0, 16: b}, "exact_match")
        for s, b in zip(SEEDS, scores, strict=True)
    ]


def _rise(enc: str, rises: list[float]) -> list[Run]:
    """LM loss 2.0 in the first bucket (32), 2.0 x ``rises[seed]`` in the last (256)."""
    return [
        _run(enc, "lm", s, {32: 2.0, 256: 2.0 * r}, "loss")
        for s, r in zip(SEEDS, rises, strict=True)
    ]


def _verdicts(runs: list[Run], index: int) -> list[tuple[str, str]]:
    return [(v.task, v.verdict) for v in check_findings(panels(runs))[index].verdicts]


@pytest.mark.parametrize(
    ("fox", "rope", "verdict"),
    [
        ([1.0, 1.02, 1.05], [1.3, 1.5, 1.6], "reproduced"),
        ([1.2, 1.3, 1.4], [1.5, 1.6, 1.7], "not reproduced"),  # fox rises past x1.10
        ([1.0, 1.02, 1.05], [0.95, 0.96, 0.97], "not reproduced"),  # rope flatter
        ([1.0, 1.05, 1.2], [1.3, 1.5, 1.6], "inconclusive"),  # fox's interval reaches x1.20
        ([1.0, 1.05, 1.08], [1.06, 1.2, 1.3], "inconclusive"),  # overlap
    ],
)
def test_lin_fox_flat_lm_loss(fox: list[float], rope: list[float], verdict: str) -> None:
    assert _verdicts(_rise("fox", fox) + _rise("rope", rope), LIN) == [("lm", verdict)]


@pytest.mark.parametrize(
    ("index", "task", "ahead"),
    [
        (TAN, "copy_rep", ("stick_breaking",)),
        (TAN, "sort", ("stick_breaking",)),
        (PATH, "flip_flop", ("path",)),
        (INTERLEAVED, "induction", ("irope", "rnope_swa")),
        (INTERLEAVED, "passkey", ("irope", "rnope_swa")),
    ],
)
@pytest.mark.parametrize(
    ("a", "rope", "verdict"),
    [
        ([0.7, 0.8, 0.9], [0.1, 0.2, 0.3], "reproduced"),
        ([0.1, 0.2, 0.3], [0.7, 0.8, 0.9], "not reproduced"),
        ([0.2, 0.5, 0.8], [0.3, 0.4, 0.6], "inconclusive"),
    ],
)
def test_ahead_of_rope_rules(
    index: int, task: str, ahead: tuple[str, ...], a: list[float], rope: list[float], verdict: str
) -> None:
    runs = [run for enc in ahead for run in _beyond(enc, task, a)] + _beyond("rope", task, rope)
    assert _verdicts(runs, index) == [(task, verdict)]


def test_interleaved_needs_each_schedule_above_rope() -> None:
    """One schedule above rope and the other tied: inconclusive, not reproduced by the best."""
    runs = (
        _beyond("irope", "induction", [0.7, 0.8, 0.9])
        + _beyond("rnope_swa", "induction", [0.2, 0.3, 0.5])
        + _beyond("rope", "induction", [0.1, 0.2, 0.3])
    )
    assert _verdicts(runs, INTERLEAVED) == [("induction", "inconclusive")]


def test_runs_that_did_not_learn_do_not_count() -> None:
    """Two of path's three seeds below the gate: too few learned seeds, inconclusive."""
    path = _beyond("path", "flip_flop", [0.9, 0.9, 0.9])
    path = [replace(r, passed_gate=r.seed == 2) for r in path]
    runs = path + _beyond("rope", "flip_flop", [0.5] * 3)
    ((task, verdict),) = _verdicts(runs, PATH)
    assert (task, verdict) == ("flip_flop", "inconclusive")
