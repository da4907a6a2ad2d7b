"""What a run costs: prices in the hardware profiles, the plan's predicted cost, the cheapest plan
that meets a deadline (not the fastest), and the measured cost beside the predicted one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from components.common.plan import plan_vs_actual
from components.estimate.hardware import HardwareError, available_profiles, load_profile
from components.estimate.planner import EstimateConfig, InfeasibleError, Planner
from components.estimate.rationale import cost_note

ROWS = 200_000_000  # a production day
GLOBAL_BATCH = 65_536  # steps long enough that more devices shorten them (not launch-bound)


def planner(data, hardware="a100-40gb", deadline=None) -> Planner:
    config = EstimateConfig(
        data=str(data),
        model="prod",
        hardware=hardware,
        global_batch=GLOBAL_BATCH,
        probe=False,
        deadline_hours=deadline,
    )
    p = Planner(config)
    p.train_rows = ROWS
    return p


def test_every_shipped_profile_is_priced_with_its_source_and_date():
    for name in available_profiles():
        profile = load_profile(name)
        assert profile.usd_per_hour(1, 1) > 0, name
        assert profile.price_source and len(profile.price_date) == 7, name


def test_a_price_needs_its_source(tmp_path):
    doc = json.loads(Path(load_profile("a100-40gb").source).read_text())
    doc.pop("price_source")
    path = tmp_path / "pool.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(HardwareError, match="pool.json: field 'price_source' must say"):
        load_profile(path)
    doc.update(price_per_device_hour=-1, price_source="x")
    path.write_text(json.dumps(doc))
    with pytest.raises(HardwareError, match="'price_per_device_hour' must be a number >= 0"):
        load_profile(path)


def test_the_cheapest_plan_meeting_the_deadline_is_chosen_not_the_fastest(tiny_dataset):
    loose = planner(tiny_dataset)
    assert loose.search().world == 1  # no deadline: the cheapest, one GPU
    layouts = ((1, 1), (2, 1), (4, 1), (8, 1), (8, 2), (8, 4))
    everyone = {c.world: c for c in (loose.timed(loose.fit(n, k)) for n, k in layouts)}
    fastest = min(everyone.values(), key=lambda c: c.total_seconds)
    # a deadline two GPUs meet and one does not
    two = everyone[2]
    assert everyone[1].total_seconds > two.total_seconds * 1.02
    p = planner(tiny_dataset, deadline=two.total_seconds * loose.headroom * 1.01 / 3600)
    chosen = p.search()
    assert chosen.world == 2 and fastest.world > 2  # the cheapest and the fastest differ
    assert fastest.usd(p.profile) > chosen.usd(p.profile)
    cost = p.cost(chosen)
    assert cost["usd"] == pytest.approx(two.total_seconds / 3600 * 2 * 32.77 / 8, rel=1e-3)
    cheaper = cost["next_cheaper"]
    assert cheaper["nproc_per_node"] == 1 and cheaper["usd"] < cost["usd"]
    assert cheaper["misses_deadline_by_seconds"] > 0
    assert "the next cheaper, 1 per node x 1" in cost_note(p, chosen)
    with pytest.raises(InfeasibleError, match="cannot be met"):
        planner(tiny_dataset, deadline=fastest.total_seconds / 3600 / 2).search()


def test_a_node_price_is_paid_per_node(tiny_dataset, tmp_path):
    doc = json.loads(Path(load_profile("a100-40gb").source).read_text())
    doc.update(name="pool", gpus_per_node=8, max_nodes=2, price_per_node_hour=50.0)
    path = tmp_path / "pool.json"
    path.write_text(json.dumps(doc))
    p = planner(tiny_dataset, hardware=str(path))
    split = p.timed(p.fit(8, 2))
    assert p.profile.usd_per_hour(8, 1) == pytest.approx(8 * p.profile.price_per_device_hour + 50)
    assert p.profile.usd_per_hour(8, 2) == 2 * p.profile.usd_per_hour(8, 1)
    assert split.usd(p.profile) == pytest.approx(
        split.total_seconds / 3600 * p.profile.usd_per_hour(8, 2)
    )


def test_the_measured_cost_sits_beside_the_planned_one():
    estimate = {
        "times": {"epoch_seconds": 100.0, "startup_seconds": 20.0, "epochs_assumed": 3},
        "cost": {"usd_per_hour": 36.0},
    }
    pva = plan_vs_actual(estimate, {"epochs_run": 2, "process_seconds": 250.0})
    assert pva["cost_usd"]["predicted"] == pytest.approx(36 * 220 / 3600)
    assert pva["cost_usd"]["measured"] == pytest.approx(36 * 250 / 3600)
    assert (
        plan_vs_actual({**estimate, "cost": {}}, {"epochs_run": 2, "process_seconds": 250.0})[
            "cost_usd"
        ]
        is None
    )
