"""The tune benchmark's replay: known curves through the search's own Optuna pruner and
per-epoch rule (``report_epoch``), the check that makes its order spread a measurement."""

from __future__ import annotations

import pytest

from benchmarks.tune import replay, replay_orders
from components.tune.config import TuneConfig

pytest.importorskip("optuna")


def asha(reduction_factor: int = 3, max_epochs: int = 9) -> TuneConfig:
    return TuneConfig(
        data="data",
        out="out",
        base_model="debug",
        max_epochs=max_epochs,
        pruner="asha",
        min_epochs=1,
        reduction_factor=reduction_factor,
    )


def flat(values: list[float], epochs: int = 9) -> dict[int, list[float]]:
    return {i: [v] * epochs for i, v in enumerate(values)}


def test_rising_arrivals_are_each_the_best_so_far_and_never_pruned():
    result = replay(flat([0.60, 0.61, 0.62, 0.63, 0.64]), [0, 1, 2, 3, 4], asha())
    assert result["epochs_of"] == {i: 9 for i in range(5)}
    assert result["epochs"] == 45 and result["best"] == 0.64


def test_falling_arrivals_run_the_first_and_prune_the_rest_after_one_epoch():
    curves = flat([0.60, 0.61, 0.62, 0.63, 0.64])
    result = replay(curves, [4, 3, 2, 1, 0], asha())
    assert result["epochs_of"] == {4: 9, 3: 1, 2: 1, 1: 1, 0: 1}
    assert result["epochs"] == 13 and result["best"] == 0.64


def test_best_so_far_is_what_is_judged_and_an_early_stopped_end_is_not():
    # trial 1 dips below trial 0 at epoch 3 but its best so far (epoch 2) still leads;
    # trial 2 stopped early (the trainer's patience) after 2 epochs: complete, not pruned
    curves = {0: [0.5, 0.6, 0.6, 0.6], 1: [0.55, 0.7, 0.4, 0.4], 2: [0.58, 0.59]}
    result = replay(curves, [0, 1, 2], asha(max_epochs=4))
    assert result["epochs_of"] == {0: 4, 1: 4, 2: 2}
    assert result["best"] == 0.7


def test_reduction_factor_changes_what_is_promoted():
    # the 4th arrival is 2nd of the 4 at rung 0 (epoch 1): the top half (factor 2) goes on to
    # epoch 2, where it trails the leader; the top quarter (factor 4) is the leader alone
    curves = flat([0.9, 0.5, 0.6, 0.85], epochs=4)
    two = replay(curves, [0, 1, 2, 3], asha(reduction_factor=2, max_epochs=4))
    four = replay(curves, [0, 1, 2, 3], asha(reduction_factor=4, max_epochs=4))
    assert two["epochs_of"] == {0: 4, 1: 1, 2: 1, 3: 2}
    assert four["epochs_of"] == {0: 4, 1: 1, 2: 1, 3: 1}
    assert two["best"] == four["best"] == 0.9


def test_orders_spread_of_equal_curves_is_no_saving_and_misses_the_target():
    # equal values tie at every rung and ties are promoted: nothing is pruned in any order
    rows = replay_orders(flat([0.6] * 6, epochs=3), asha(max_epochs=3), orders=5)
    assert [r["reduction_factor"] for r in rows] == [2, 3, 4]
    for row in rows:
        assert row["epochs_ratio_p10"] == row["epochs_ratio_median"] == 1.0
        assert row["epochs_ratio_p90"] == row["measured_order_ratio"] == 1.0
        assert row["target_met_share"] == 0.0 and row["auc_gap_max"] == 0.0


def test_a_complete_trial_returns_the_trainers_objective_not_the_curves_maximum():
    # the trainer's best_val_auc counts an improvement only beyond its min delta
    curves = {0: [0.60, 0.65, 0.6501], 1: [0.55, 0.56, 0.57]}
    result = replay(curves, [0, 1], asha(max_epochs=3), objectives={0: 0.65, 1: 0.57})
    assert result["best"] == 0.65
    assert replay(curves, [0, 1], asha(max_epochs=3))["best"] == 0.6501
