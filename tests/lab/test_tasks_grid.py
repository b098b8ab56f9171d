"""The 2-D lab task ``grid_cross``: samples against the label's definition, refused grids, the
model's grid positions and MARK readout, learned_2d's table resampled at evaluation."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

import posenc
from posenc.functional import resample_table
from posenc.lab.config import ModelConfig, RunConfig, TaskConfig, parse_sweep
from posenc.lab.evaluate import eval_batch, evaluate
from posenc.lab.model import LabModel
from posenc.lab.tasks import FIRST, MARK, make_task

TINY = ModelConfig(d_model=16, n_layers=1, n_heads=2)


def cross_label(grid: np.ndarray, target: int = FIRST) -> int:
    """Reference: 1 if ``target`` shares the MARK's row or column in ``grid`` (n, n), else 0."""
    (my, mx), (ty, tx) = np.argwhere(grid == MARK)[0], np.argwhere(grid == target)[0]
    return int(my == ty or mx == tx)


def test_reference_on_hand_made_grids() -> None:
    t, m, s = FIRST, MARK, FIRST + 1
    assert cross_label(np.array([[s, m, s], [s, s, s], [t, s, s]])) == 0
    assert cross_label(np.array([[s, m, s], [s, s, s], [s, t, s]])) == 1  # same column
    assert cross_label(np.array([[t, s, m], [s, s, s], [s, s, s]])) == 1  # same row


@pytest.mark.parametrize("n", [2, 3, 8, 12])
def test_samples_follow_the_definition(n: int) -> None:
    task = make_task("grid_cross")
    b = task.sample(np.random.default_rng(n), 400, n)
    assert b.tokens.shape == (400, n * n) == (400, task.seq_len(n))
    assert b.labels is not None and b.labels.shape == (400,)
    grids = b.tokens.reshape(400, n, n)
    assert ((grids == MARK).sum((1, 2)) == 1).all() and ((grids == FIRST).sum((1, 2)) == 1).all()
    others = grids[(grids != MARK) & (grids != FIRST)]
    assert others.min() >= FIRST + 1 and others.max() < task.vocab_size
    np.testing.assert_array_equal(b.labels, [cross_label(g) for g in grids])
    assert 0.4 < b.labels.mean() < 0.6  # labels drawn independently, chance 0.5


def test_every_cell_of_the_cross_and_off_it_is_drawn() -> None:
    """Positives reach all 2(n-1) cells of the cross, negatives all (n-1)^2 cells off it."""
    task, n = make_task("grid_cross"), 3
    b = task.sample(np.random.default_rng(0), 4000, n)
    grids = b.tokens.reshape(-1, n, n)
    mark = np.argwhere(grids == MARK)[:, 1:]
    target = np.argwhere(grids == FIRST)[:, 1:]
    at = (mark == [1, 1]).all(1)  # samples whose mark is the centre
    seen = {lab: {tuple(c) for c in target[at & (b.labels == lab)]} for lab in (0, 1)}
    assert seen[1] == {(0, 1), (2, 1), (1, 0), (1, 2)}
    assert seen[0] == {(0, 0), (0, 2), (2, 0), (2, 2)}


def test_task_settings_chance_and_source() -> None:
    task = make_task("grid_cross")
    assert (task.train_len, task.eval_lens, task.chance, task.n_classes) == (
        (8, 8),
        (8, 12, 16),
        0.5,
        2,
    )
    assert (task.axes, task.readout, task.grid(144)) == (2, "mark", (12, 12))
    assert "Heo et al. 2024" in task.source
    assert make_task("grid_cross", eval_lens=(8, 32)).max_seq_len == 1024


@pytest.mark.parametrize(
    ("config", "match"),
    [
        ({"train_len": (1, 8)}, r"grid_cross: train_len must satisfy 2 <= min"),
        ({"eval_lens": (8, 1)}, r"grid_cross: lengths must be ints >= 2, got 1"),
        ({"eval_lens": (8, 12.0)}, r"lengths must be ints >= 2, got 12.0"),
        ({"n_symbols": 1}, r"n_symbols >= 2, got 1"),
    ],
)
def test_bad_grids_are_refused(config: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make_task("grid_cross", **config)


@pytest.mark.parametrize("seq_len", [10, 1, 0, -4])
def test_a_token_count_that_is_no_grid_is_refused(seq_len: int) -> None:
    with pytest.raises(ValueError, match=rf"n x n grid, n >= 2, so n² tokens; got {seq_len}"):
        make_task("grid_cross").grid(seq_len)
    with pytest.raises(ValueError, match="a sequence task, its samples are no grid"):
        make_task("copy").grid(16)


def test_grid_encodings_read_grid_positions_others_the_raster_index() -> None:
    task = make_task("grid_cross")
    for enc in ("rope_2d", "rope_mixed", "sincos_2d", "learned_2d"):
        pos = LabModel(task, TINY, enc).positions(144)
        assert pos is not None
        torch.testing.assert_close(pos, posenc.grid_positions(12, 12))
    assert LabModel(task, TINY, "nope").positions(64) is None
    assert LabModel(task, TINY, "rope").positions(64) is None
    assert LabModel(make_task("offset"), TINY, "rope").positions(8) is None


def test_the_head_reads_the_marked_cell() -> None:
    """Changing the features of every cell but the MARK's leaves the logits as they are."""
    task = make_task("grid_cross")
    torch.manual_seed(0)
    model = LabModel(task, TINY, "rope_2d").eval()
    tokens = torch.from_numpy(task.sample(np.random.default_rng(0), 4, 8).tokens)
    feats = model.net.features(tokens, model.positions(64))  # (4, 64, 16)
    expect = model.head(feats[tokens == MARK])
    torch.testing.assert_close(model(tokens), expect)
    assert not torch.allclose(model.head(feats.mean(1)), expect)


def test_embed_std_initialises_the_token_table_only() -> None:
    task = make_task("grid_cross")
    torch.manual_seed(0)
    cfg = ModelConfig(d_model=64, n_layers=1, n_heads=2, embed_std=1.0)
    model = LabModel(task, cfg, "learned_2d", {"init_std": 0.5})
    assert model.net.tok.weight.std().item() == pytest.approx(1.0, rel=0.1)
    assert model.net.pe.weight.std().item() == pytest.approx(0.5, rel=0.05)
    with pytest.raises(ValueError, match="embed_std must be > 0"):
        ModelConfig(embed_std=0.0)
    with pytest.raises(ValueError, match="embed_std must be finite"):
        ModelConfig(embed_std=float("inf"))
    enc_dec = ModelConfig(d_model=64, n_layers=1, n_heads=2, architecture="encoder_decoder")
    shared = LabModel(make_task("reverse"), replace(enc_dec, embed_std=1.0), "rope").net
    assert shared.src_tok.weight.std().item() == pytest.approx(1.0, rel=0.1)
    run = RunConfig(encoding="rope_2d", task=TaskConfig(name="grid_cross"))
    assert run.key() != replace(run, model=ModelConfig(embed_std=1.0)).key()
    assert model.net.blocks[0].attn.qkv.weight.std().item() == pytest.approx(0.02, rel=0.1)


def test_learned_2d_is_built_at_the_training_grid_and_resampled_for_larger_ones() -> None:
    task = make_task("grid_cross", eval_lens=(8, 12, 16))
    torch.manual_seed(0)
    model = LabModel(task, TINY, "learned_2d").eval()
    table = model.net.pe.weight.detach().clone()
    assert model.net.pe.grid == (8, 8) and table.shape == (64, 16)
    assert model.at_length(8) is model
    at16 = model.at_length(16)
    assert at16.net.pe.grid == (16, 16) and model.net.pe.grid == (8, 8)  # a copy: not in place
    torch.testing.assert_close(at16.net.pe.weight, resample_table(table, (8, 8), (16, 16)))
    for block in at16.net.blocks:  # every layer sees the resampled encoding
        assert block.attn.pe is at16.net.pe
    torch.testing.assert_close(model.net.pe.weight, table)
    tokens = torch.from_numpy(eval_batch(task, 16, 8).tokens)
    with pytest.raises(ValueError, match="resample_ the table to a larger grid"):
        model(tokens)  # the 8 x 8 table cannot index a 16 x 16 grid
    rows = evaluate(model, task, n_samples=8, device=torch.device("cpu"))
    assert {n for n, _, _ in rows} == {8, 12, 16}
    labels = torch.from_numpy(eval_batch(task, 16, 8).labels)
    hit = (at16(tokens).argmax(-1) == labels).float().mean()
    assert {(n, m): v for n, m, v in rows}[16, "exact_match"] == pytest.approx(float(hit))


def test_sweeps_take_grid_encodings_on_grid_tasks_only() -> None:
    from posenc.lab.config import expand

    runs = expand(parse_sweep({"tasks": ["grid_cross"], "encodings": ["rope_2d", "nope", "rope"]}))
    assert [r.encoding for r in runs] == ["rope_2d", "nope", "rope"]
    with pytest.raises(ValueError, match=r"'learned_2d' reads grid positions .* task 'offset'"):
        expand(parse_sweep({"tasks": ["grid_cross", "offset"], "encodings": ["learned_2d"]}))


def test_a_tiny_grid_sweep_end_to_end(tmp_path) -> None:
    """Train, evaluate at larger grids, store, report: learned_2d's table resampled, the
    finding judged (whatever its verdict at 5 steps), attention maps drawn on the grid."""
    from posenc.lab.executors import LocalExecutor
    from posenc.lab.findings import check_findings
    from posenc.lab.report import write_report
    from posenc.lab.results import load_runs, panels
    from posenc.lab.store import ResultStore
    from posenc.lab.sweep import run_sweep

    sweep = parse_sweep(
        {
            "encodings": ["rope_mixed", "learned_2d", "nope"],
            "tasks": [{"name": "grid_cross", "train_len": [3, 3], "eval_lens": [3, 5]}],
            "seeds": [0, 1],
            "model": {"d_model": 16, "n_layers": 1, "n_heads": 2},
            "train": {"steps": 5, "gate": 0.0, "eval_samples": 16, "gate_samples": 16},
        }
    )
    outcome = run_sweep(sweep, tmp_path, executor=LocalExecutor(1), live=False)
    runs = load_runs(ResultStore(outcome.store))
    assert len(runs) == 6 and all(
        {("exact_match", 3), ("exact_match", 5)} <= set(r.metrics) for r in runs
    )
    (heo,) = check_findings(panels(runs))[4].verdicts
    assert "rope_mixed" in heo.numbers and "learned_2d" in heo.numbers
    html = write_report(outcome.runs, tmp_path).read_text()
    assert "Heo et al. 2024" in html and "Attention: learned_2d" in html
