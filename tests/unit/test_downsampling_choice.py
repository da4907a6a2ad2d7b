"""How benchmarks/downsampling.py turns its measurements into the pipeline's two defaults."""

from __future__ import annotations

import pytest

from benchmarks.downsampling import WorldRuns, _versus, choose, readme_table
from components.common.dataset_meta import SplitInfo


def world(name: str, positives: int, negatives: int, measured: dict[float, tuple]) -> WorldRuns:
    """A world as the benchmark holds it after its grid: ``measured`` maps a share to (test AUC
    difference, ECE difference, time ratio) from full-data training."""
    w = WorldRuns.__new__(WorldRuns)
    w.world = type("W", (), {"name": name, "source": "test"})()
    w.positives, w.negatives, w.default = positives, negatives, None
    w.train_split = SplitInfo(rows=positives + negatives, positives=positives)
    full = {"negative_keep": 1.0, "auc": 0.75, "gauc": 0.65, "logloss": 0.24, "ece": 0.003}
    full.update(train_seconds=100.0, rows_trained=positives + negatives, epochs_run=3)
    w.runs = [_versus(dict(full), full)]
    for keep, (d_auc, d_ece, ratio) in measured.items():
        run = {**full, "negative_keep": keep, "auc": 0.75 + d_auc, "ece": 0.003 + d_ece}
        run["train_seconds"] = 100.0 * ratio
        w.runs.append(_versus(run, full))
    return w


RARE = {0.5: (-0.0001, 0.0, 0.5), 0.25: (-0.0005, 0.0019, 0.28), 0.1: (-0.0024, 0.0, 0.19)}
COMMON = {0.5: (-0.0023, 0.02, 0.89), 0.25: (-0.008, 0.0, 0.82), 0.1: (-0.015, 0.0, 0.84)}


def test_the_share_is_the_smallest_same_on_every_world_and_the_ratio_keeps_each_worlds_own():
    rare = world("rare", 72_000, 828_000, RARE)  # 11.5 negatives per positive
    common = world("common", 37_500, 30_000, COMMON)  # 0.8
    assert rare.smallest_same() == 0.25 and common.smallest_same() == 1.0
    assert rare.needed_ratio() == pytest.approx(0.25 * 11.5)
    share, ratio = choose([rare, common])
    # no share below 1 holds on the common-click world; 3 per positive keeps 0.26 on the rare one
    assert (share, ratio) == (1.0, 3.0)
    assert choose([rare]) == (0.25, 3.0)


def test_a_share_below_a_failing_one_does_not_count():
    """A lucky small share after a failing larger one is noise, not a safe choice."""
    noisy = world("noisy", 10_000, 90_000, {0.5: (-0.003, 0.0, 0.5), 0.25: (0.0, 0.0, 0.3)})
    assert noisy.smallest_same() == 1.0 and noisy.needed_ratio() == pytest.approx(9.0)


def test_the_defaults_reuse_a_grid_run_or_train_their_own(monkeypatch):
    rare = world("rare", 72_000, 828_000, RARE)
    common = world("common", 37_500, 30_000, COMMON)
    trained = []

    def train(self, keep, ratio, name, seed=0, full=None):
        trained.append((self.world.name, keep, ratio, name, seed))
        share = min(keep, ratio * self.positives / self.negatives) if ratio else keep
        # each seed moves both trainings of a pair; the sampled one loses 0.0004 + 0.0004 x seed
        auc = 0.75 + 0.001 * seed - (0.0004 + 0.0004 * seed) * (share < 1)
        run = {**self.runs[0], "seed": seed, "negative_keep": round(share, 4), "auc": auc}
        run["train_seconds"] = 29.0 if share < 1 else 100.0 + seed
        return _versus(run, full or self.runs[0])

    monkeypatch.setattr(WorldRuns, "train", train)
    for w in (rare, common):
        w.measure_default(1.0, 3.0)
    assert trained == [("rare", 1.0, 3.0, "ratio-3", 0)]  # the common world's is its r = 1 run
    assert common.default["negative_keep"] == 1.0 and common.default["negatives_per_positive"] == 3
    rare.runs[0]["seed"] = rare.default["seed"] = 0
    goal = rare.seeded(1.0, 3.0, (0, 1, 2))
    # seeds 1 and 2: a full-data training and the defaults' each, the pair compared with itself
    assert trained[1:] == [
        ("rare", 1.0, 0, "keep-1", 1),
        ("rare", 1.0, 3.0, "ratio-3", 1),
        ("rare", 1.0, 0, "keep-1", 2),
        ("rare", 1.0, 3.0, "ratio-3", 2),
    ]
    assert goal["deltas"]["auc"] == pytest.approx([-0.0004, -0.0008, -0.0012])
    assert goal["mean"]["auc"] == pytest.approx(-0.0008) and goal["same_quality"]
    assert [p["seed"] for p in goal["pairs"]] == [0, 1, 2]
    result = {
        "machine": {"cpu_model": "x", "cpus": 2},
        "auc_margin": 0.001,
        "ece_margin": 0.002,
        "time_target": 0.4,
        "worlds": [rare.result(), common.result()],
        "chosen": 1.0,
        "chosen_ratio": 3.0,
        "goal": {"world": "rare", **goal},
    }
    table = readme_table(result)
    assert "**0.2609** (≤ 3 per positive; 11.5 in the data)" in table
    assert (
        "The goal, on rare with 3 seeds (each pair of trainings shares its seed): test AUC "
        "-0.0008 on average (-0.0012 .. -0.0004; within 0.001), ECE +0.0000 (within 0.002): "
        "**the same quality**; training time ×0.29 of full-data training's (target ≤ ×0.4: "
        "**met**)."
    ) in table
    result["goal"]["same_quality"] = False
    assert "**not the same quality**" in readme_table(result)
