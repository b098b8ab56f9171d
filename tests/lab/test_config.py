"""Lab configs: TOML/YAML loading, overrides, grid expansion, errors that name the key."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from posenc.lab.config import (
    RunConfig,
    TaskConfig,
    TrainConfig,
    apply_overrides,
    expand,
    load_sweep,
    parse_sweep,
)
from posenc.lab.presets import preset, quick_encodings

TOML = """
name = "t"
encodings = ["nope", "rope"]
tasks = ["copy_rep", {name = "sort", n_symbols = 40}]
seeds = [0, 1]
train_max_lens = [6, 8]
[model]
n_layers = 3
[train]
steps = 50
"""


def test_toml_and_yaml_give_the_same_sweep(tmp_path: Path) -> None:
    (tmp_path / "s.toml").write_text(TOML)
    (tmp_path / "s.yaml").write_text(
        "name: t\nencodings: [nope, rope]\ntasks: [copy_rep, {name: sort, n_symbols: 40}]\n"
        "seeds: [0, 1]\ntrain_max_lens: [6, 8]\nmodel: {n_layers: 3}\ntrain: {steps: 50}\n"
    )
    a, b = load_sweep(tmp_path / "s.toml"), load_sweep(tmp_path / "s.yaml")
    assert a == b
    assert a.model.n_layers == 3 and a.train.steps == 50 and a.tasks[1].n_symbols == 40


def test_expand_is_the_full_grid_with_distinct_keys(tmp_path: Path) -> None:
    (tmp_path / "s.toml").write_text(TOML)
    runs = expand(load_sweep(tmp_path / "s.toml"))
    assert len(runs) == 2 * 2 * 2 * 2  # encodings x tasks x seeds x train lengths
    assert len({r.key() for r in runs}) == len(runs)
    assert {r.task.train_len for r in runs} == {(1, 6), (1, 8)}


def test_key_ignores_device_but_not_settings() -> None:
    base = RunConfig(encoding="rope", task=TaskConfig(name="copy"))
    assert (
        base.key() == RunConfig(encoding="rope", task=TaskConfig(name="copy"), device="cuda").key()
    )
    assert base.key() != RunConfig(encoding="rope", task=TaskConfig(name="copy"), seed=1).key()


def test_overrides_set_nested_keys_with_parsed_values(tmp_path: Path) -> None:
    (tmp_path / "s.toml").write_text(TOML)
    s = load_sweep(tmp_path / "s.toml", ["model.n_layers=4", "train.lr=0.01", "seeds=[5]"])
    assert s.model.n_layers == 4 and s.train.lr == 0.01 and s.seeds == (5,)
    assert apply_overrides({}, ["model.d_model=32"]) == {"model": {"d_model": 32}}


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (
            {"tasks": ["copy"], "model": {"n_layerz": 2}},
            r"^lab config: model\.n_layerz: unknown key$",
        ),
        (
            {"tasks": ["copy"], "model": {"n_layers": "two"}},
            r"^lab config: model\.n_layers must be an integer, got 'two'$",
        ),
        (
            {"tasks": ["copy"], "train": {"lr": -1}},
            r"^lab config: train\.lr must be > 0, got -1\.0$",
        ),
        ({"tasks": ["copy"], "model": {"d_model": 30, "n_heads": 4}}, "divisible by n_heads"),
        (
            {"tasks": [{"name": "copy", "train_len": [1, 2, 3]}]},
            r"^lab config: tasks\[0\]\.train_len must be a list of at most 2 items, "
            r"got \[1, 2, 3\]$",
        ),
        ({"tasks": []}, "tasks must not be empty"),
        ({"tasks": ["copy"], "device": "tpu"}, "device must be 'cpu' or 'cuda"),
        ({"tasks": ["copy"], "colour": 1}, r"^lab config: colour: unknown key$"),
        (
            {"tasks": ["copy"], "seeds": [0, -1]},
            r"seeds must be ints in \[0, 2\*\*32\), got \[0, -1\]",
        ),
        ({"tasks": ["copy"], "train": {"gate": 1.5}}, r"train\.gate must be a score in \[0, 1\]"),
        (
            {"tasks": ["copy"], "task_train": {"copy": {"stepz": 3}}},
            r"^lab config: task_train\.copy\.stepz: unknown key$",
        ),
        (
            {"tasks": ["copy"], "task_train": {"copy": {"steps": -3}}},
            r"^lab config: task_train\.copy\.steps must be > 0, got -3$",
        ),
        (
            {"tasks": ["copy"], "task_train": {"copy": {"decay_steps": 0}}},
            r"^lab config: task_train\.copy\.decay_steps must be > 0, got 0$",
        ),
        (
            {"tasks": ["copy"], "encoding_train": {"t5": {"pe_lr_scale": 0}}},
            r"^lab config: encoding_train\.t5\.pe_lr_scale must be > 0, got 0.0$",
        ),
        (
            {"tasks": ["copy"], "task_train": {"srot": {"steps": 3}}},
            r"^lab config: task_train\.srot: unknown task; choose from \['ascending', ",
        ),
    ],
)
def test_bad_configs_name_the_key(data: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        parse_sweep(data)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({"tasks": [{"name": "sort", "n_symbols": 8}]}, r"'tasks\[0\]' \(sort\): sort: length"),
        ({"tasks": ["copyy"]}, r"'tasks\[0\]'.*unknown task 'copyy'"),
        ({"tasks": ["copy"], "encodings": ["ropee"]}, r"'encodings' \(ropee\).*unknown positional"),
        (
            {"tasks": ["copy"], "encodings": ["rope"], "pe_config": {"rope": {"bse": 2}}},
            r"'encodings' \(rope\).*unknown config key",
        ),
        (
            {"tasks": ["copy"], "encodings": ["rope", "rope_2d"]},
            r"'encodings': 'rope_2d' reads grid positions .* 'copy' is a 1-D sequence.*grid_cross",
        ),
        (
            {"tasks": ["copy"], "encoding_train": {"t55": {"pe_lr_scale": 10}}},
            r"'encoding_train': unknown positional encoding 't55'",
        ),
        (
            {"tasks": ["offset"], "encodings": ["rope", "fox"]},
            r"'tasks\[0\]' \(offset\).*'fox' computes causal attention.*no encoder",
        ),
        (
            {"tasks": ["copy"], "encodings": ["path"], "architectures": ["encoder_decoder"]},
            r"'path' computes causal attention.*trains an encoder-decoder",
        ),
    ],
)
def test_expand_rejects_what_tasks_and_registry_refuse(data: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        expand(parse_sweep(data))


def test_load_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        load_sweep(tmp_path / "missing.toml")
    (tmp_path / "s.json").write_text("{}")
    with pytest.raises(ValueError, match=r"must end in \.toml, \.yaml or \.yml"):
        load_sweep(tmp_path / "s.json")
    (tmp_path / "bad.toml").write_text("name = [")
    with pytest.raises(ValueError, match="invalid TOML"):
        load_sweep(tmp_path / "bad.toml")
    (tmp_path / "bad.yaml").write_text("name: [")
    with pytest.raises(ValueError, match="invalid YAML"):
        load_sweep(tmp_path / "bad.yaml")
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    with pytest.raises(ValueError, match="expected a mapping at the top level, got list"):
        load_sweep(tmp_path / "list.yaml")
    (tmp_path / "s.toml").write_text(TOML)
    with pytest.raises(ValueError, match=r"override must look like key\.sub=value"):
        load_sweep(tmp_path / "s.toml", ["model.n_layers"])


def test_quick_preset_covers_the_required_encodings_and_tasks() -> None:
    q = preset("quick")
    assert {"nope", "sinusoidal", "learned", "rope"} <= set(q.encodings)
    assert set(q.encodings) == set(quick_encodings())
    assert [t.name for t in q.tasks] == ["copy_rep", "sort", "ascending"]
    assert len(q.seeds) >= 2
    lens = {t.name: t.build().eval_lens for t in q.tasks}
    # sort over 32 distinct symbols, tested to 2x as Kazemnejad et al.'s split (presets)
    assert lens == {"copy_rep": (8, 12, 16, 32), "sort": (8, 12, 16), "ascending": (8, 12, 16, 32)}
    assert q.tasks[1].build().n_symbols == 32 and q.model.d_ff == 128
    assert q.train_for("ascending").batch_size == 128 and q.train_for("sort").batch_size == 64
    # the decay ends at 2000 steps whatever the budget; the rest is for runs short of the gate
    assert {(t.lr, t.decay_steps, t.steps) for t in map(q.train_for, lens)} == {(2e-3, 2000, 4000)}
    full = preset("full")
    assert len(full.seeds) >= 3 and len(expand(full)) > len(expand(q))
    # "all" takes fox, stick_breaking and path where a decoder trains, not the encoder tasks
    cells = {(r.encoding, r.task.name) for r in expand(full)}
    assert ("fox", "copy") in cells and ("path", "lm") in cells
    assert ("rope", "offset") in cells and ("fox", "offset") not in cells
    lm = expand(preset("lm"))
    assert {r.task.name for r in lm} == {"lm"} and "alibi" in {r.encoding for r in lm}
    with pytest.raises(ValueError, match="unknown preset 'fast'; choose one of"):
        preset("fast")


def test_grid_preset_trains_every_encoding_on_the_same_grids_and_tokens() -> None:
    """Heo et al.'s comparison: the five encodings on grids of side 4..8 alike, evaluated at 12
    and 16, the token embeddings at N(0, 1) for all of them (not only for the tables)."""
    runs = expand(preset("grid"))
    assert {r.encoding for r in runs} == {
        "nope",
        "sincos_2d",
        "learned_2d",
        "rope_2d",
        "rope_mixed",
    }
    assert {r.seed for r in runs} == {0, 1, 2}
    assert {r.model.embed_std for r in runs} == {1.0}
    task = runs[0].task.build()
    assert {r.task.train_len for r in runs} == {(4, 8)} and task.eval_lens == (8, 12, 16)
    pe = {r.encoding: r.pe_config for r in runs}
    assert pe["sincos_2d"] == {"scale": 4.0} and pe["learned_2d"] == {"init_std": 1.0}
    assert pe["rope_2d"] == pe["rope_mixed"] == pe["nope"] == {}


def test_an_encoder_keeping_the_causal_form_is_stored_and_reported_as_the_variant(
    tmp_path: Path,
) -> None:
    """ALiBi's one-sided causal bias in an encoder is "alibi (causal form)" in the store, the
    report and the log, never "alibi"; in a decoder, and in its encoder form, it is "alibi"."""
    from posenc.lab.executors import LocalExecutor
    from posenc.lab.report import write_report
    from posenc.lab.store import ResultStore
    from posenc.lab.sweep import STORE_NAME, run_sweep

    sweep = parse_sweep(
        {
            "encodings": ["alibi"],
            "tasks": [{"name": "offset", "train_len": [2, 4]}, {"name": "copy_rep"}],
            "pe_config": {"alibi": {"bidirectional": False}},
            "model": {"d_model": 16, "n_layers": 1, "n_heads": 2},
            "train": {"steps": 2, "batch_size": 4, "warmup": 1, "eval_samples": 4},
        }
    )
    runs = expand(sweep)
    assert sorted(r.label for r in runs) == ["alibi", "alibi (causal form)"]
    run_sweep(sweep, tmp_path, executor=LocalExecutor(1), live=False)
    with ResultStore(tmp_path / STORE_NAME) as store:
        stored = {(r["encoding"], r["task"]) for r in store.runs({r.key() for r in runs})}
    assert stored == {("alibi (causal form)", "offset"), ("alibi", "copy_rep")}
    html = write_report(runs, tmp_path).read_text()
    assert "alibi (causal form)" in html  # (attention maps: only runs that passed the gate)
    published = replace(runs[0], pe_config={})
    assert published.label == "alibi"


def test_task_and_encoding_train_set_training_over_train() -> None:
    sweep = parse_sweep(
        {
            "encodings": ["rope"],
            "tasks": ["sort", "copy"],
            "train": {"steps": 100, "lr": 1e-3},
            "task_train": {"sort": {"steps": 3000}},
            "encoding_train": {"t5": {"pe_lr_scale": 10, "lr": 2e-3}},
        }
    )
    got = {(r.encoding, r.task.name, r.train.steps, r.train.lr) for r in expand(sweep)}
    assert got == {("rope", "sort", 3000, 1e-3), ("rope", "copy", 100, 1e-3)}
    sweep = replace(sweep, encodings=("t5",))
    got = {(r.task.name, r.train.steps, r.train.lr, r.train.pe_lr_scale) for r in expand(sweep)}
    assert got == {("sort", 3000, 2e-3, 10), ("copy", 100, 2e-3, 10)}


def test_keys_carry_the_gate_rule_so_runs_gated_the_earlier_way_are_retrained() -> None:
    """A run's key is the digest of its config with ``GATE_RULE`` added: the same config keyed
    without it (as before the worst-length gate: "a0db679bfdc3b253c3b5") is another run."""
    import hashlib
    import json
    from dataclasses import asdict

    from posenc.lab.config import GATE_RULE

    run = RunConfig(encoding="rope", task=TaskConfig(name="reverse"))
    data = asdict(run)
    for popped in ("device", "backend"):
        data.pop(popped)
    for popped in ("architecture", "embed_std"):
        data["model"].pop(popped)
    assert data["train"].pop("decay_steps") is None  # left out of the key when None

    def digest(d: dict) -> str:
        blob = json.dumps(d, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:20]

    confirm = data["train"].pop("gate_confirm")  # added with the confirmation, 2026-11-28
    assert digest(data) == "a0db679bfdc3b253c3b5"  # the key before the rule was part of it
    data["train"]["gate_confirm"] = confirm
    data["train"]["gate_rule"] = GATE_RULE
    assert run.key() == digest(data) != "a0db679bfdc3b253c3b5"
    decayed = RunConfig(encoding="rope", task=run.task, train=TrainConfig(decay_steps=600))
    assert decayed.key() != run.key()
