"""The champion/challenger gate: a pure function of the metrics, documented rule below.

A candidate is **blessed** when

1. its served AUC (the test day scored as serving scores it, see
   :mod:`components.evaluate.served`) >= ``min_auc`` (an absolute floor: a broken model
   never ships), and
2. either there is no champion, or the candidate is not significantly worse
   than the champion: the upper bound of the confidence interval of
   ``AUC(candidate) - AUC(champion)``, both served on the same test rows, is
   ``>= -tolerance``. The interval takes users as the unit
   (:func:`components.evaluate.metrics.clustered_delong`): a user's rows are
   correlated, and an interval over rows is several times too narrow on click logs.

Each decision also states its **detectable effect**: the smallest true AUC loss this
day's test split refuses with 80% power (``tolerance + 2.80 se`` at 95%), so a reader
knows what "not significantly worse" could have seen.

A candidate whose scores are constant or near-constant is never blessed, whatever the floor:
its AUC is 0.5 by construction, or chance.

Rule 2 deliberately promotes a candidate that is *as good as* the champion:
it was trained on fresher data, and daily retraining exists to track drift.
A champion that cannot be loaded or scored on today's data (e.g. the hash
buckets changed) is never silently skipped: with ``if_champion_unusable =
"block"`` (default) the candidate is not blessed until a person looks; with
``"ignore"`` it is judged by rule 1 alone, and the reasons say so.

An **undefined** comparison (the interval is NaN: a test split with a
single click or a single non-click leaves its variance undefined; or it has
zero width: a handful of rows both models rank alike, which says nothing of
the population; or the day rests on too few users: its effective number of
users is under ``MIN_EFFECTIVE_USERS``, where the interval's coverage falls
short of what it says, measured by simulation) is never read as "worse" or
"as good": the reasons say "undefined", and the same
``if_champion_unusable`` policy decides (block: not blessed, the champion
stays; ignore: judged by rule 1 alone).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from statistics import NormalDist

from components.common.evaluation import Decision
from components.evaluate.metrics import MIN_EFFECTIVE_USERS, detectable_effect

UNUSABLE_POLICIES = ("block", "ignore")


@dataclass(frozen=True)
class GateRule:
    min_auc: float = 0.55
    """Absolute floor on the candidate's served AUC (the test day as serving scores it)."""
    tolerance: float = 0.002
    """How much worse than the champion (in AUC) is still acceptable at the CI's upper bound."""
    confidence: float = 0.95
    """Confidence level of the AUC-delta interval."""
    if_champion_unusable: str = field(default="block", metadata={"choices": UNUSABLE_POLICIES})
    """block: not blessed when the champion cannot be scored; ignore: judge by min_auc alone."""

    def __post_init__(self) -> None:
        if not 0 <= self.min_auc <= 1:
            raise ValueError(f"min_auc must be in [0, 1], got {self.min_auc!r}")
        if not 0 <= self.tolerance < 1:
            raise ValueError(f"tolerance must be in [0, 1), got {self.tolerance!r}")
        if not 0.5 <= self.confidence < 1:
            raise ValueError(f"confidence must be in [0.5, 1), got {self.confidence!r}")
        if self.if_champion_unusable not in UNUSABLE_POLICIES:
            raise ValueError(
                f"if_champion_unusable must be one of {UNUSABLE_POLICIES}, "
                f"got {self.if_champion_unusable!r}"
            )


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def comparison_defined(comparison: dict | None) -> bool:
    """Whether a DeLong result has a usable interval: finite delta and bounds, positive width,
    and at least ``MIN_EFFECTIVE_USERS`` effective users behind it."""
    return (
        bool(comparison)
        and all(_number(comparison.get(k)) for k in ("delta", "ci_low", "ci_high"))
        and comparison["ci_high"] > comparison["ci_low"]
        and _number(comparison.get("effective_users"))
        and comparison["effective_users"] >= MIN_EFFECTIVE_USERS
    )


def undefined_why(comparison: dict) -> str:
    """Why a comparison is undefined, with the test split's counts."""
    counts = f"{comparison.get('positives')} clicks and {comparison.get('negatives')} non-clicks"
    high, low = comparison.get("ci_high"), comparison.get("ci_low")
    if not (_number(high) and _number(low)):
        return (
            "the interval needs at least 2 clicks, 2 non-clicks and 2 users; "
            f"the test split has {counts} from {comparison.get('users')} users"
        )
    if high <= low:
        return f"a zero-width interval, no evidence either way; the test split has {counts}"
    effective = comparison.get("effective_users")
    if not _number(effective):
        return "no effective number of users recorded with the interval"
    share = comparison.get("largest_user_share")
    largest = f"; the largest holds {share:.0%} of the day" if _number(share) else ""
    return (
        f"the test day rests on {effective:.1f} effective users ({comparison.get('users')} "
        f"users{largest}), under {MIN_EFFECTIVE_USERS:g}, below which the interval's "
        f"coverage falls short of what it says (make bench-gate)"
    )


def detectable(comparison: dict | None, rule: GateRule) -> float | None:
    """The smallest AUC loss this comparison refuses with 80% power; None when undefined.

    The standard error is read off the interval the gate judged, so the two always agree."""
    if not comparison_defined(comparison):
        return None
    se = (comparison["ci_high"] - comparison["ci_low"]) / (
        2 * NormalDist().inv_cdf(0.5 + rule.confidence / 2)
    )
    return detectable_effect(se, rule.tolerance, rule.confidence)


def _against_champion(champion: dict, comparison: dict | None, rule: GateRule) -> tuple[bool, str]:
    """(whether the champion lets the candidate pass, why) by ``champion["status"]``."""
    status = champion["status"]
    version = champion.get("version")
    if status == "none":
        return True, "no champion registered yet: nothing to compare with"
    if status == "scored" and not comparison_defined(comparison):
        ok = rule.if_champion_unusable == "ignore"
        return ok, (
            f"AUC vs champion v{version}: undefined ({undefined_why(comparison or {})}); "
            f"policy if_champion_unusable={rule.if_champion_unusable}: "
            + ("judged on min_auc alone" if ok else "not blessed, the champion stays")
        )
    if status == "scored":
        upper, bound = comparison["ci_high"], -rule.tolerance
        ok = upper >= bound
        return ok, (
            f"AUC vs champion v{version}: {comparison['delta']:+.4f} "
            f"({100 * rule.confidence:.0f}% CI {comparison['ci_low']:+.4f} .. {upper:+.4f}, "
            f"{comparison.get('users')} users as the unit, "
            f"{comparison['effective_users']:.0f} effective); "
            + (
                f"upper bound >= -tolerance {bound:+.4f}: not significantly worse"
                if ok
                else f"upper bound < -tolerance {bound:+.4f}: significantly worse than the champion"
            )
            + f"; this day detects a loss of {detectable(comparison, rule):.4f} AUC (80% power)"
        )
    if status == "unusable":
        ok = rule.if_champion_unusable == "ignore"
        return ok, (
            f"champion v{version} could not be scored on today's data "
            f"({champion.get('reason')}); policy if_champion_unusable="
            f"{rule.if_champion_unusable}: "
            + ("judged on min_auc alone" if ok else "not blessed until resolved")
        )
    raise ValueError(f"unknown champion status {status!r}")


def _guard_verdict(guards: dict | None) -> tuple[bool, list[str]]:
    """(whether the data guards let the candidate pass, why; nothing when they did not run)."""
    if guards is None:
        return True, []
    if not guards["findings"]:
        tested = guards.get("test_days", [])
        others = len(guards["days"]) - len(tested)
        what = f"the test day {', '.join(tested)}" if tested else "no test day"
        return True, [
            f"data guards: {what} and {others} other new day(s) in line with the window "
            f"{guards['reference']['days']}"
        ]
    ok = not guards["blocked"]
    findings = guards["findings"]
    return ok, [
        ("data guards: not blessed, " if not ok else "data guards (not enforced): ")
        + "; ".join(findings[:3])
        + (f"; and {len(findings) - 3} more" if len(findings) > 3 else "")
    ]


def decide(
    candidate_auc: float,
    champion: dict,
    comparison: dict | None,
    rule: GateRule,
    guards: dict | None = None,
    spread: dict | None = None,
) -> Decision:
    """The verdict on a candidate: blessed, the reasons, the rule, the detectable effect (the
    evaluate stage adds what it was judged on).

    ``champion["status"]`` is ``none`` (no champion registered), ``scored``
    (``comparison`` holds the users-as-unit result: delta, se, ci_low, ci_high, users) or
    ``unusable`` (``champion["reason"]`` says why). ``guards`` is
    :func:`components.evaluate.guards.run_guards`' result: its findings block the candidate
    (unless the guards are off, when they are only reported). ``spread`` is
    :func:`components.evaluate.metrics.score_spread` of the candidate's served scores: flat scores
    are refused by name.
    """
    flat = (spread or {}).get("flat")
    floor_ok = not math.isnan(candidate_auc) and candidate_auc >= rule.min_auc and not flat
    status = champion["status"]
    gate_ok, gate_reason = _against_champion(champion, comparison, rule)
    guards_ok, guard_reasons = _guard_verdict(guards)
    reasons = [
        f"served AUC {candidate_auc:.4f} {'>=' if floor_ok else '<'} min_auc {rule.min_auc:.4f}"
        if not flat
        else f"served AUC {candidate_auc:.4f} from {flat}: not blessed, whatever the floor",
        gate_reason,
        *guard_reasons,
    ]
    return Decision(
        blessed=bool(floor_ok and gate_ok and guards_ok),
        reasons=tuple(reasons),
        rule=asdict(rule),
        detectable_effect=detectable(comparison, rule) if status == "scored" else None,
    )
