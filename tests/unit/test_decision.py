"""The champion/challenger gate as a pure function."""

from __future__ import annotations

import math

import pytest

from components.evaluate.decision import GateRule, comparison_defined, decide

RULE = GateRule(min_auc=0.6, tolerance=0.002)


def scored(delta, low, high, version=3):
    return {"status": "scored", "version": version}, {
        "delta": delta,
        "ci_low": low,
        "ci_high": high,
        "users": 120,
        "effective_users": 96.0,
    }


def test_first_model_is_judged_by_the_floor_alone():
    assert decide(0.61, {"status": "none"}, None, RULE).blessed
    verdict = decide(0.59, {"status": "none"}, None, RULE)
    assert not verdict.blessed and "0.5900 < min_auc 0.6000" in verdict.reasons[0]
    assert not decide(math.nan, {"status": "none"}, None, RULE).blessed


def test_not_significantly_worse_is_blessed_and_significantly_worse_is_not():
    champion, comparison = scored(-0.003, -0.006, -0.0015)  # upper bound above -tolerance
    verdict = decide(0.7, champion, comparison, RULE)
    assert verdict.blessed and "not significantly worse" in verdict.reasons[1]
    champion, comparison = scored(-0.01, -0.015, -0.005)
    verdict = decide(0.7, champion, comparison, RULE)
    assert not verdict.blessed and "significantly worse than the champion" in verdict.reasons[1]
    assert "v3" in verdict.reasons[1]
    # the floor still applies when the comparison passes
    champion, comparison = scored(0.01, 0.0, 0.02)
    assert not decide(0.55, champion, comparison, RULE).blessed


def test_boundary_is_inclusive():
    champion, comparison = scored(-0.004, -0.006, -0.002)
    assert decide(0.7, champion, comparison, RULE).blessed


def test_unusable_champion_blocks_unless_policy_says_ignore():
    champion = {"status": "unusable", "version": 2, "reason": "item: model 4096 vs data 2048"}
    verdict = decide(0.7, champion, None, RULE)
    assert not verdict.blessed
    assert "could not be scored" in verdict.reasons[1] and "item: model 4096" in verdict.reasons[1]
    ignore = GateRule(min_auc=0.6, if_champion_unusable="ignore")
    assert decide(0.7, champion, None, ignore).blessed
    assert decide(0.7, champion, None, ignore).rule["if_champion_unusable"] == "ignore"


@pytest.mark.parametrize(
    "field, value",
    [("min_auc", 1.5), ("tolerance", -0.1), ("confidence", 0.3), ("if_champion_unusable", "maybe")],
)
def test_rule_rejects_nonsense(field, value):
    with pytest.raises(ValueError, match=field):
        GateRule(**{field: value})


# ----------------------------------------------------------------------------- exact boundaries


def test_min_auc_floor_is_inclusive():
    """A candidate exactly at the floor passes; the next float below it does not."""
    at_floor = decide(0.6, {"status": "none"}, None, RULE)
    assert at_floor.blessed
    assert list(at_floor.reasons) == [
        "served AUC 0.6000 >= min_auc 0.6000",
        "no champion registered yet: nothing to compare with",
    ]
    below = decide(math.nextafter(0.6, 0.0), {"status": "none"}, None, RULE)
    assert not below.blessed and below.reasons[0] == "served AUC 0.6000 < min_auc 0.6000"
    assert decide(0.0, {"status": "none"}, None, GateRule(min_auc=0.0)).blessed


def test_champion_bound_is_inclusive_at_exactly_minus_tolerance():
    champion, comparison = scored(-0.004, -0.006, -RULE.tolerance)
    assert decide(0.7, champion, comparison, RULE).blessed
    comparison["ci_high"] = math.nextafter(-RULE.tolerance, -1.0)
    assert not decide(0.7, champion, comparison, RULE).blessed


def test_reasons_spell_out_the_comparison():
    champion, comparison = scored(-0.003, -0.006, -0.0015)
    assert decide(0.7, champion, comparison, RULE).reasons[1] == (
        "AUC vs champion v3: -0.0030 (95% CI -0.0060 .. -0.0015, 120 users as the unit, 96 effective); "
        "upper bound >= -tolerance -0.0020: not significantly worse; "
        "this day detects a loss of 0.0052 AUC (80% power)"
    )
    rule90 = GateRule(min_auc=0.6, tolerance=0.001, confidence=0.9)
    champion, comparison = scored(-0.02, -0.03, -0.01, version=7)
    assert decide(0.7, champion, comparison, rule90).reasons[1] == (
        "AUC vs champion v7: -0.0200 (90% CI -0.0300 .. -0.0100, 120 users as the unit, 96 effective); "
        "upper bound < -tolerance -0.0010: significantly worse than the champion; "
        "this day detects a loss of 0.0161 AUC (80% power)"
    )


def test_detectable_effect_is_tolerance_plus_2_8_standard_errors():
    """se read off the interval: width 0.0392 at 95% is se 0.01; 0.002 + 2.8016 * 0.01."""
    champion, comparison = scored(0.0, -0.0196, 0.0196)
    verdict = decide(0.7, champion, comparison, RULE)
    assert verdict.detectable_effect == pytest.approx(0.002 + 2.8016 * 0.01, abs=2e-5)
    assert decide(0.7, {"status": "none"}, None, RULE).detectable_effect is None
    undefined = comparison | {"ci_low": math.nan}
    assert decide(0.7, champion, undefined, RULE).detectable_effect is None


def test_unusable_champion_reasons_name_version_cause_and_policy():
    champion = {"status": "unusable", "version": 2, "reason": "cannot load: OSError: gone"}
    blocked = decide(0.7, champion, None, RULE)
    assert blocked.reasons[1] == (
        "champion v2 could not be scored on today's data (cannot load: OSError: gone); "
        "policy if_champion_unusable=block: not blessed until resolved"
    )
    ignored = decide(0.7, champion, None, GateRule(min_auc=0.6, if_champion_unusable="ignore"))
    assert ignored.blessed and ignored.reasons[1].endswith(
        "policy if_champion_unusable=ignore: judged on min_auc alone"
    )
    # the floor still rules when the champion is ignored
    assert not decide(
        0.5, champion, None, GateRule(min_auc=0.6, if_champion_unusable="ignore")
    ).blessed


def test_unknown_champion_status_is_an_error():
    with pytest.raises(ValueError, match="unknown champion status 'stale'"):
        decide(0.7, {"status": "stale"}, None, RULE)


def test_verdict_carries_the_rule():
    assert decide(0.7, {"status": "none"}, None, RULE).rule == {
        "min_auc": 0.6,
        "tolerance": 0.002,
        "confidence": 0.95,
        "if_champion_unusable": "block",
    }


@pytest.mark.parametrize(
    "field, value",
    [
        ("min_auc", 0.0),
        ("min_auc", 1.0),
        ("tolerance", 0.0),
        ("tolerance", 0.999),
        ("confidence", 0.5),
        ("confidence", 0.999),
    ],
)
def test_rule_accepts_its_documented_bounds(field, value):
    assert getattr(GateRule(**{field: value}), field) == value


@pytest.mark.parametrize(
    "field, value",
    [
        ("min_auc", -0.01),
        ("min_auc", 1.01),
        ("tolerance", 1.0),
        ("confidence", 0.4999),
        ("confidence", 1.0),
    ],
)
def test_rule_rejects_just_outside_its_bounds(field, value):
    with pytest.raises(ValueError, match=f"{field} must be in .*got {value!r}"):
        GateRule(**{field: value})


def test_comparison_is_defined_only_with_three_finite_numbers():
    from components.evaluate.decision import comparison_defined

    full = {"delta": 0.01, "ci_low": -0.02, "ci_high": 0.04, "effective_users": 30.0}
    # under the effective users the coverage needs, or without the figure: undefined
    assert not comparison_defined(full | {"effective_users": 24.9})
    assert not comparison_defined({k: v for k, v in full.items() if k != "effective_users"})
    assert comparison_defined(full) and comparison_defined(full | {"delta": 0})
    assert not comparison_defined(None) and not comparison_defined({})
    for key in ("delta", "ci_low", "ci_high"):
        assert not comparison_defined(full | {key: math.nan}), key
        assert not comparison_defined({k: v for k, v in full.items() if k != key}), key
        assert not comparison_defined(full | {key: "0.01"}), key


@pytest.mark.parametrize(
    ("policy", "blessed", "ending"),
    [
        ("block", False, "not blessed, the champion stays"),
        ("ignore", True, "judged on min_auc alone"),
    ],
)
def test_an_undefined_comparison_follows_the_unusable_policy(policy, blessed, ending):
    """A test split with one click: the interval is NaN, neither "worse" nor "as good"."""
    nan = {
        "delta": 0.1,
        "ci_low": math.nan,
        "ci_high": math.nan,
        "positives": 1,
        "negatives": 40,
        "users": 9,
    }
    verdict = decide(
        0.7,
        {"status": "scored", "version": 3},
        nan,
        GateRule(min_auc=0.6, if_champion_unusable=policy),
    )
    assert verdict.blessed is blessed
    assert list(verdict.reasons) == [
        "served AUC 0.7000 >= min_auc 0.6000",
        "AUC vs champion v3: undefined (the interval needs at least 2 clicks, 2 non-clicks and "
        "2 users; the test split has 1 clicks and 40 non-clicks from 9 users); "
        f"policy if_champion_unusable={policy}: "
        f"{ending}",
    ]
    # the floor still rules
    assert not decide(
        0.5,
        {"status": "scored", "version": 3},
        nan,
        GateRule(min_auc=0.6, if_champion_unusable=policy),
    ).blessed


@pytest.mark.parametrize(
    "low,high,defined",
    [(-0.01, 0.02, True), (0.01, 0.01, False), (0.0, 0.0, False), (-0.01, math.inf, False)],
)
def test_only_an_interval_of_positive_finite_width_is_a_comparison(low, high, defined):
    comparison = {"delta": 0.0, "ci_low": low, "ci_high": high, "positives": 3, "negatives": 3}
    comparison["effective_users"] = 30.0
    assert comparison_defined(comparison) is defined
    verdict = decide(0.9, {"status": "scored", "version": 2}, comparison, GateRule(min_auc=0.5))
    assert verdict.blessed is defined
    if low == high:
        assert verdict.reasons[1] == (
            "AUC vs champion v2: undefined (a zero-width interval, no evidence either way; the "
            "test split has 3 clicks and 3 non-clicks); policy if_champion_unusable=block: "
            "not blessed, the champion stays"
        )


def _guards(findings, blocked, days=1):
    return {
        "findings": findings,
        "blocked": blocked,
        "days": [{}] * days,
        "test_days": ["2026-01-12"],
        "reference": {"days": "2026-01-01 .. 2026-01-09"},
    }


def test_guard_findings_block_the_candidate_with_their_reasons():
    lines = ["2026-01-12: click rate 0.0123x the window's, outside 0.5..2x (4,000 rows)"]
    verdict = decide(0.7, {"status": "none"}, None, RULE, _guards(lines, blocked=True))
    assert not verdict.blessed
    assert verdict.reasons[-1] == "data guards: not blessed, " + lines[0]
    # report only: the same finding, said, and nothing blocked
    relaxed = decide(0.7, {"status": "none"}, None, RULE, _guards(lines, blocked=False))
    assert relaxed.blessed and relaxed.reasons[-1] == "data guards (not enforced): " + lines[0]
    # a guard never rescues a candidate the other rules refuse
    assert not decide(0.5, {"status": "none"}, None, RULE, _guards([], blocked=False)).blessed


def test_guards_in_line_and_many_findings_are_one_line_each():
    quiet = decide(0.7, {"status": "none"}, None, RULE, _guards([], blocked=False, days=3))
    assert quiet.blessed and quiet.reasons[-1] == (
        "data guards: the test day 2026-01-12 and 2 other new day(s) in line with the window "
        "2026-01-01 .. 2026-01-09"
    )
    many = [f"2026-01-1{i}: finding {i}" for i in range(5)]
    verdict = decide(0.7, {"status": "none"}, None, RULE, _guards(many, blocked=True))
    assert verdict.reasons[-1] == (
        "data guards: not blessed, 2026-01-10: finding 0; 2026-01-11: finding 1; "
        "2026-01-12: finding 2; and 2 more"
    )
    assert len(decide(0.7, {"status": "none"}, None, RULE).reasons) == 2  # no guards run


def test_exactly_the_minimum_of_effective_users_is_enough():
    from components.evaluate.metrics import MIN_EFFECTIVE_USERS

    full = {"delta": 0.0, "ci_low": -0.01, "ci_high": 0.01, "users": 40}
    assert comparison_defined(full | {"effective_users": float(MIN_EFFECTIVE_USERS)})
    assert not comparison_defined(full | {"effective_users": MIN_EFFECTIVE_USERS - 0.01})


@pytest.mark.parametrize(
    ("extra", "why"),
    [
        (
            {"effective_users": 3.26, "largest_user_share": 0.514},
            "the test day rests on 3.3 effective users (40 users; the largest holds 51% of the "
            "day), under 25, below which the interval's coverage falls short of what it says "
            "(make bench-gate)",
        ),
        (
            {"effective_users": 3.26},
            "the test day rests on 3.3 effective users (40 users), under 25, below which the "
            "interval's coverage falls short of what it says (make bench-gate)",
        ),
        ({}, "no effective number of users recorded with the interval"),
    ],
)
def test_too_few_effective_users_are_named_with_the_largest_share(extra, why):
    comparison = {"delta": 0.0, "ci_low": -0.01, "ci_high": 0.01, "users": 40} | extra
    verdict = decide(0.9, {"status": "scored", "version": 4}, comparison, GateRule(min_auc=0.5))
    assert not verdict.blessed
    assert verdict.reasons[1] == (
        f"AUC vs champion v4: undefined ({why}); policy if_champion_unusable=block: "
        "not blessed, the champion stays"
    )
    assert verdict.detectable_effect is None


def test_flat_scores_are_refused_by_name_and_a_spread_without_a_finding_is_not():
    flat = decide(0.93, {"status": "none"}, None, RULE, spread={"flat": "one constant score"})
    assert not flat.blessed
    assert flat.reasons[0] == (
        "served AUC 0.9300 from one constant score: not blessed, whatever the floor"
    )
    fine = decide(0.93, {"status": "none"}, None, RULE, spread={"flat": None, "share": 0.01})
    assert fine.blessed and fine.reasons[0] == "served AUC 0.9300 >= min_auc 0.6000"


def test_a_detectable_effect_is_only_reported_against_a_scored_champion():
    champion, comparison = scored(0.0, -0.01, 0.01)
    assert decide(0.9, champion, comparison, RULE).detectable_effect is not None
    unusable = {"status": "unusable", "version": 3, "reason": "its vocabulary changed"}
    assert decide(0.9, unusable, comparison, RULE).detectable_effect is None


@pytest.mark.parametrize(
    ("test_days", "said"),
    [
        ([], "no test day"),
        (["2026-01-12", "2026-01-13"], "the test day 2026-01-12, 2026-01-13"),
    ],
)
def test_quiet_guards_say_which_test_days_they_checked(test_days, said):
    guards = _guards([], blocked=False, days=3) | {"test_days": test_days}
    verdict = decide(0.7, {"status": "none"}, None, RULE, guards)
    others = 3 - len(test_days)
    assert verdict.reasons[-1] == (
        f"data guards: {said} and {others} other new day(s) in line with the window "
        "2026-01-01 .. 2026-01-09"
    )
    legacy = {k: v for k, v in guards.items() if k != "test_days"}  # written before test days
    assert (
        decide(0.7, {"status": "none"}, None, RULE, legacy)
        .reasons[-1]
        .startswith("data guards: no test day and 3 other")
    )


@pytest.mark.parametrize(("count", "tail"), [(3, ""), (4, "; and 1 more")])
def test_up_to_three_findings_are_spelled_out(count, tail):
    findings = [f"finding {i}" for i in range(count)]
    verdict = decide(0.7, {"status": "none"}, None, RULE, _guards(findings, blocked=True))
    assert verdict.reasons[-1] == (
        "data guards: not blessed, finding 0; finding 1; finding 2" + tail
    )
