"""The champion/challenger gate as a pure function."""

from __future__ import annotations

import math

import pytest

from components.evaluate.decision import GateRule, decide

RULE = GateRule(min_auc=0.6, tolerance=0.002)


def scored(delta, low, high, version=3):
    return {"status": "scored", "version": version}, {"delta": delta, "ci_low": low, "ci_high": high}


def test_first_model_is_judged_by_the_floor_alone():
    assert decide(0.61, {"status": "none"}, None, RULE)["blessed"]
    verdict = decide(0.59, {"status": "none"}, None, RULE)
    assert not verdict["blessed"] and "0.5900 < min_auc 0.6000" in verdict["reasons"][0]
    assert not decide(math.nan, {"status": "none"}, None, RULE)["blessed"]


def test_not_significantly_worse_is_blessed_and_significantly_worse_is_not():
    champion, comparison = scored(-0.003, -0.006, -0.0015)  # upper bound above -tolerance
    verdict = decide(0.7, champion, comparison, RULE)
    assert verdict["blessed"] and "not significantly worse" in verdict["reasons"][1]
    champion, comparison = scored(-0.01, -0.015, -0.005)
    verdict = decide(0.7, champion, comparison, RULE)
    assert not verdict["blessed"] and "significantly worse than the champion" in verdict["reasons"][1]
    assert "v3" in verdict["reasons"][1]
    # the floor still applies when the comparison passes
    champion, comparison = scored(0.01, 0.0, 0.02)
    assert not decide(0.55, champion, comparison, RULE)["blessed"]


def test_boundary_is_inclusive():
    champion, comparison = scored(-0.004, -0.006, -0.002)
    assert decide(0.7, champion, comparison, RULE)["blessed"]


def test_unusable_champion_blocks_unless_policy_says_ignore():
    champion = {"status": "unusable", "version": 2, "reason": "item: model 4096 vs data 2048"}
    verdict = decide(0.7, champion, None, RULE)
    assert not verdict["blessed"]
    assert "could not be scored" in verdict["reasons"][1] and "item: model 4096" in verdict["reasons"][1]
    ignore = GateRule(min_auc=0.6, if_champion_unusable="ignore")
    assert decide(0.7, champion, None, ignore)["blessed"]
    assert decide(0.7, champion, None, ignore)["rule"]["if_champion_unusable"] == "ignore"


@pytest.mark.parametrize("field, value", [("min_auc", 1.5), ("tolerance", -0.1), ("confidence", 0.3),
                                          ("if_champion_unusable", "maybe")])
def test_rule_rejects_nonsense(field, value):
    with pytest.raises(ValueError, match=field):
        GateRule(**{field: value})
