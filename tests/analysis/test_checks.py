"""Every check passes on every encoding it applies to and fails on a broken one."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import posenc.analysis.model_checks as model_checks
from posenc.analysis import CHECKS, CheckResult, all_checks, applicable, run_checks, subject
from posenc.analysis.subjects import resolve, subject_names
from posenc.encodings.base import PositionalEncoding

from .broken import broken

SUBJECTS = subject_names()
CHECK_NAMES = [c.name for c in all_checks()]


@pytest.mark.parametrize("name", SUBJECTS)
def test_every_applicable_check_passes(name: str) -> None:
    results = run_checks([name])
    assert results, f"no check applies to {name}"
    failed = [(r.name, r.error, r.detail) for r in results if not r.passed]
    assert not failed, failed
    assert {r.encoding for r in results} == {name}


def test_core_checks_reach_the_encodings_they_are_for() -> None:
    expected = {
        "nope": {"permutation_equivariant", "kv_cache_decode", "decode_positions"},
        "sinusoidal": {
            "table_bounded",
            "table_unique_rows",
            "table_shift_is_rotation",
            "table_dot_decays",
            "order_sensitive",
        },
        "learned": {"table_unique_rows"},
        "rope": {
            "rotation_norm_preserved",
            "rotary_relative",
            "layouts_agree",
            "shift_invariant",
            "rope_long_term_decay",
        },
        "xpos": {"rope_long_term_decay"},
        "alibi": {"alibi_slopes_geometric", "alibi_bias_linear", "bias_decays_with_distance"},
        "t5": {"t5_buckets_monotone_clamped"},
        "kerple": {"bias_decays_with_distance"},
        "fire": {"fire_distance_interpolated"},
        "rope:yarn": {"extension_in_training_range", "yarn_ramp_endpoints"},
        "rope:linear": {"pi_equals_scaled_positions"},
        "rope:dynamic": {"dynamic_ntk_plain_within_original", "dynamic_ntk_continuous"},
    }
    for name, checks in expected.items():
        got = {c.name for c in applicable(name)}
        assert checks <= got, (name, checks - got)
    assert "table_shift_is_rotation" not in {c.name for c in applicable("learned")}
    assert "shift_invariant" not in {c.name for c in applicable("fire")}


def test_every_check_applies_somewhere() -> None:
    used = {c.name for name in SUBJECTS for c in applicable(name)}
    assert used == set(CHECK_NAMES)


@pytest.mark.parametrize("check", sorted(set(CHECK_NAMES) - {"decode_positions"}))
def test_check_fails_on_a_broken_encoding(check: str) -> None:
    pe = broken(check)
    assert CHECKS[check].applies(pe), f"{check} should apply to {type(pe).__name__}"
    result = CHECKS[check](pe)
    assert isinstance(result, CheckResult)
    assert not result.passed, (check, result.error, result.detail)


def test_decode_positions_fails_when_ids_do_not_advance_from_the_prefix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def off_by_one(prefix_len: int, n_new: int, **_: object) -> torch.Tensor:
        return torch.arange(prefix_len + 1, prefix_len + 1 + n_new)

    monkeypatch.setattr(model_checks, "decode_positions", off_by_one)
    result = CHECKS["decode_positions"](subject("rope"))
    assert not result.passed and result.error >= 1


def test_result_records_measurement_and_verdict() -> None:
    result = CHECKS["rotary_relative"](subject("rope"))
    assert result.name == "rotary_relative" and result.encoding == "rope"
    assert 0 <= result.error < 1e-9 == result.tolerance and result.comparison == "<="
    assert result.as_dict()["passed"] is True and "pairs" in result.detail


def test_check_refuses_an_encoding_it_does_not_apply_to() -> None:
    with pytest.raises(ValueError, match="does not apply"):
        CHECKS["table_bounded"](subject("rope"))


def test_unknown_names_are_rejected() -> None:
    with pytest.raises(ValueError, match="unknown check"):
        run_checks(["rope"], only=["no_such_check"])
    with pytest.raises(ValueError, match="unknown positional encoding"):
        run_checks(["no_such_encoding"])
    with pytest.raises(ValueError, match="unknown context extension"):
        subject("rope:bogus")
    with pytest.raises(TypeError, match="PositionalEncoding or a registered name"):
        resolve(3)  # type: ignore[arg-type]


def test_only_restricts_the_checks() -> None:
    results = run_checks(["rope", "alibi"], only=["kv_cache_decode"])
    assert [(r.encoding, r.name) for r in results] == [
        ("rope", "kv_cache_decode"),
        ("alibi", "kv_cache_decode"),
    ]


def test_checks_leave_the_callers_encoding_untouched() -> None:
    pe = subject("learned")
    before = pe.weight.detach().clone()
    run_checks([pe])
    assert pe.weight.dtype == torch.float32 and torch.equal(pe.weight, before)
    assert isinstance(pe, PositionalEncoding)


def test_checks_run_in_eval_mode_and_restore_training() -> None:
    pe = subject("randomized").train()  # samples positions only while training
    results = run_checks([pe])
    assert results and all(r.passed for r in results)
    assert pe.training


def test_every_context_extension_method_has_an_example_subject() -> None:
    from posenc.analysis.subjects import EXAMPLE_SCALINGS
    from posenc.extension import SCALINGS

    assert set(EXAMPLE_SCALINGS) == set(SCALINGS)


@pytest.mark.parametrize(
    ("name", "config"),
    [
        ("t5", {"bidirectional": True}),
        ("alibi", {"bidirectional": True}),
        ("kerple", {"variant": "power"}),
        ("rope", {"layout": "interleaved", "partial": 0.5}),
    ],
)
def test_variants_pass_their_checks(name: str, config: dict[str, object]) -> None:
    pe = subject(name, **config)
    results = run_checks([pe])
    assert results and all(r.passed for r in results), [
        (r.name, r.detail) for r in results if not r.passed
    ]


def test_alibi_slope_check_follows_the_interleaved_rule_for_12_heads() -> None:
    import posenc

    pe = posenc.build("alibi", n_heads=12)
    assert CHECKS["alibi_slopes_geometric"](pe).passed
    assert CHECKS["alibi_bias_linear"](pe).passed


def test_a_check_that_raises_is_reported_as_a_failure() -> None:
    from posenc.encodings.bias import ALiBi

    class CrashingALiBi(ALiBi):
        def bias(self, q_pos: torch.Tensor, k_pos: torch.Tensor, **_: Any) -> torch.Tensor:
            if q_pos.numel() > 4:  # the applicability probe uses 4 positions
                raise RuntimeError("kernel exploded")
            return super().bias(q_pos, k_pos)

    results = run_checks([CrashingALiBi(n_heads=4)], only=["alibi_bias_linear"])
    assert len(results) == 1 and not results[0].passed
    assert "RuntimeError: kernel exploded" in results[0].detail
    assert results[0].as_dict()["error"] is None  # NaN is not JSON


@pytest.mark.parametrize(
    ("name", "config", "expected"),
    [
        ("rope", {"head_dim": 64}, {"rotary_relative", "rotation_norm_preserved", "layouts_agree"}),
        ("rope", {"head_dim": 32, "partial": 0.5, "layout": "interleaved"}, {"layouts_agree"}),
        ("sinusoidal", {"dim": 64}, {"table_shift_is_rotation", "kv_cache_decode"}),
        ("alibi", {"n_heads": 8}, {"alibi_slopes_geometric", "shift_invariant"}),
        ("t5", {"n_heads": 6}, {"t5_buckets_monotone_clamped", "kv_cache_decode"}),
    ],
)
def test_checks_run_on_an_encoding_built_for_another_model(
    name: str, config: dict[str, object], expected: set[str]
) -> None:
    # the checks used to build q/k and models of the shared geometry (width 32, 4 heads), so
    # build("rope", head_dim=64) got spurious FAILs ("q/k must have head_dim=64 features")
    import posenc

    results = run_checks([posenc.build(name, **config)])
    assert expected <= {r.name for r in results}
    failed = [(r.name, r.detail) for r in results if not r.passed]
    assert not failed, failed
