"""The estimate's time model, the plan's run controls (patience, checkpoint cadence), the trainer's
in-epoch progress lines and mid-epoch checkpoints, and plan vs reality in the summaries."""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from pathlib import Path

import pytest
import torch

from components.common.evaluation import Decision, Metrics
from components.common.plan import DRIFT_FACTOR, drift_lines, plan_vs_actual, write_plan
from components.common.run_summary import RunSummary
from components.estimate import (
    EstimateConfig,
    EstimateError,
    HardwareError,
    InfeasibleError,
    estimate,
    load_profile,
)
from components.estimate.probe import probe_speed
from components.estimate.timemodel import checkpoint_interval, choose_patience, time_model
from components.evaluate.report import markdown
from components.train import trainer
from components.train.progress import Progress
from components.train.runtime import Runtime
from components.train.trainer import TrainConfig, train
from tests.planning import fake_dataset, profile_file

# round numbers so every term can be computed by hand
PROFILE = dataclasses.replace(
    load_profile("a100-80gb"),
    bf16_flops=1e12,
    mfu=0.5,
    hbm_bandwidth_bytes_per_s=1e9,
    memory_efficiency=0.5,
    step_latency_seconds=1e-3,
    parallel_efficiency=0.8,
    eval_speedup=4.0,
    startup_seconds=10.0,
    startup_seconds_per_process=3.0,
    pod_startup_seconds=5.0,
    image_pull_seconds=20.0,
    checkpoint_write_bytes_per_s=1e8,
    intra_node_bandwidth_bytes_per_s=1e9,
    allreduce_latency_seconds=1e-3,
)
CASE = dict(
    flops=1e6,
    micro_batch=100,
    grad_accum=2,
    nproc=2,
    nnodes=1,
    reduced_bytes=4e6,
    optimizer_params=1000,
    embedding_bytes=1000,
    steps_per_epoch=10,
    val_rows=1000,
    checkpoint_bytes=1e8,
    max_epochs=3,
    max_lost_seconds=600,
    mfu=0.5,
)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_time_model_terms_by_hand():
    t = time_model(profile=PROFILE, **CASE)
    assert t["compute_seconds"] == pytest.approx(100 * 1e6 / (1e12 * 0.5))  # 2.0e-4
    assert t["memory_seconds"] == pytest.approx(
        (100 * 1000 + 1000 * 28 / 2) / (1e9 * 0.5)
    )  # 2.28e-4
    assert t["latency_floor_seconds"] == 1e-3 and t["bound"] == "latency"
    assert t["micro_step_seconds"] == pytest.approx(1e-3)  # max of the three
    assert t["allreduce_seconds"] == pytest.approx(
        2 * (1 / 2) * 4e6 / 1e9 + 1e-3
    )  # ring 4e-3 + latency
    assert t["step_seconds"] == pytest.approx(2 * 1e-3 / 0.8 + 5e-3)  # 7.5e-3
    assert t["validation_seconds"] == pytest.approx(500 * (1e-3 / 100) / 4)  # 1.25e-3
    assert t["checkpoint_write_seconds"] == pytest.approx(1.0)
    assert t["checkpoint_every_steps"] == 0 and t["checkpoint_seconds"] == pytest.approx(
        2.0
    )  # last + best
    assert t["epoch_seconds"] == pytest.approx(10 * 7.5e-3 + 1.25e-3 + 2.0)
    assert t["startup_seconds"] == pytest.approx(38.0)  # 2 processes + pods + image
    assert t["total_seconds"] == pytest.approx(38.0 + 3 * (0.075 + 0.00125 + 2.0))


def test_time_model_compute_and_memory_bounds():
    compute = time_model(profile=PROFILE, **{**CASE, "flops": 1e9})
    assert compute["bound"] == "compute" and compute["micro_step_seconds"] == pytest.approx(0.2)
    memory = time_model(profile=PROFILE, **{**CASE, "embedding_bytes": 1e6})
    assert memory["bound"] == "memory"
    assert memory["micro_step_seconds"] == pytest.approx((100 * 1e6 + 14000) / 5e8)
    one = time_model(profile=PROFILE, **{**CASE, "nproc": 1})
    assert one["allreduce_seconds"] == 0 and one["step_seconds"] == pytest.approx(
        2 * 1e-3
    )  # no 0.8 either


def test_time_model_with_measured_rates_and_mid_epoch_checkpoints():
    measured = {"samples_per_s": 1000.0, "eval_samples_per_s": 4000.0, "setup_seconds": 2.0}
    t = time_model(profile=PROFILE, **{**CASE, "steps_per_epoch": 10_000}, measured=measured)
    assert t["bound"] == "measured" and t["micro_step_seconds"] == pytest.approx(0.1)
    assert t["step_seconds"] == pytest.approx(2 * 0.1 / 0.8 + 5e-3)  # 0.255
    assert t["validation_seconds"] == pytest.approx(500 / 4000)
    assert t["startup_seconds"] == pytest.approx(40.0)  # + the probe's setup
    # 10,000 steps x 0.255 s = 2,550 s > 600 s: a checkpoint every 600 // 0.255 = 2352 steps
    assert t["checkpoint_every_steps"] == 2352
    assert t["checkpoint_seconds"] == pytest.approx((2 + 10_000 // 2352) * 1.0)


def test_time_model_with_a_probe_launched_in_the_plans_world():
    """A probe run in the plan's world size measured micro-steps that include DDP's all-reduce, and
    the whole launch: neither the modelled all-reduce nor the per-process start-up is added."""
    measured = {
        "samples_per_s": 1000.0,
        "eval_samples_per_s": 4000.0,
        "setup_seconds": 2.0,
        "processes": 2,
        "startup_seconds": 7.5,
    }
    t = time_model(profile=PROFILE, **CASE, measured=measured)
    assert t["allreduce_seconds"] == 0 and t["step_seconds"] == pytest.approx(
        2 * 0.1
    )  # no 0.8, no comm
    assert t["startup_seconds"] == pytest.approx(7.5 + 5.0 + 20.0)  # measured launch + pods + image
    other = time_model(profile=PROFILE, **CASE, measured={**measured, "processes": 1})
    assert other["allreduce_seconds"] == pytest.approx(5e-3)  # another world: modelled, as before
    assert other["step_seconds"] == pytest.approx(2 * 0.1 / 0.8 + 5e-3)


def test_probe_launch_times_ddp_steps_and_the_start_up(tiny_dataset):
    from components.common.plan import TrainPlan
    from components.estimate.probe import probe_launch

    plan = TrainPlan(model="debug", micro_batch=64, num_workers=0, nproc_per_node=2)
    started = time.time()
    result = probe_launch(str(tiny_dataset), plan, steps=3, warmup=1, eval_rows=256)
    assert result["processes"] == 2 and result["samples"] == 3 * 64 * 2
    assert result["samples_per_s"] == pytest.approx(3 * 64 / result["seconds"])  # per process
    assert started < result["ready_at"] < result["done_at"] < time.time()
    assert 0 < result["startup_seconds"] < result["launch_seconds"] < time.time() - started
    assert result["launch_seconds"] - result["startup_seconds"] == pytest.approx(
        result["done_at"] - result["ready_at"], abs=0.05
    )
    with pytest.raises(
        ValueError, match=r"^.*too few rows to time steps of micro-batch 65536 on 1 process"
    ):
        probe_launch(str(tiny_dataset), plan.replace(micro_batch=65536, nproc_per_node=1))


def test_checkpoint_interval_bounds_the_lost_work():
    assert checkpoint_interval(500, 2.0, 600) == 0  # an epoch is shorter: per-epoch checkpoints
    assert checkpoint_interval(3600, 2.0, 600) == 300
    assert checkpoint_interval(3600, 1000.0, 600) == 1  # a step longer than the bound: every step
    for step in (0.01, 0.7, 3.3, 59.0):
        every = checkpoint_interval(10_000, step, 600)
        assert every * step <= 600 < (every + 1) * step or every == 1


def test_patience_lets_early_stopping_act():
    assert [choose_patience(n) for n in (1, 2, 3, 4, 5, 7, 9, 30)] == [1, 1, 1, 1, 2, 3, 3, 3]
    for n in range(3, 40):  # a run whose first epoch stays best stops before max_epochs
        assert 1 <= choose_patience(n) <= n - 2


def test_plan_carries_patience_and_checkpoint_cadence(tmp_path):
    small = fake_dataset(tmp_path / "small", rows=10_000)
    doc = estimate(
        EstimateConfig(
            data=str(small), model="debug", hardware="cpu-local", probe=False, max_epochs=4
        )
    )
    assert doc["train"].patience == 1 and doc["train"].max_epochs == 4
    assert (
        doc["train"].checkpoint_every_steps == 0
        and "per-epoch checkpoint" in doc["rationale"]["checkpoint_every_steps"]
    )
    assert "after epoch 2 of 4" in doc["rationale"]["patience"]
    big = fake_dataset(tmp_path / "big", rows=50_000_000)
    doc = estimate(
        EstimateConfig(
            data=str(big),
            model="local",
            hardware="cpu-local",
            probe=False,
            max_epochs=9,
            max_lost_minutes=5,
        )
    )
    plan, t = doc["train"], doc["estimate"]["times"]
    assert plan.patience == 3 and plan.max_lost_minutes == 5
    assert plan.checkpoint_every_steps > 0
    assert plan.checkpoint_every_steps * t["step_seconds"] <= 5 * 60
    assert (plan.checkpoint_every_steps + 1) * t["step_seconds"] > 5 * 60
    given = estimate(
        EstimateConfig(
            data=str(small),
            model="debug",
            hardware="cpu-local",
            probe=False,
            max_epochs=4,
            patience=3,
        )
    )["train"]
    assert given.patience == 3


def test_impossible_deadline_is_refused_with_the_numbers(tmp_path):
    data = fake_dataset(tmp_path / "d", rows=100_000)
    with pytest.raises(
        InfeasibleError,
        match=r"deadline 0.0001 h \(0.36 s\) cannot be met on a100-80gb "
        r"\(at most 32 devices\).*start-up 95 s \+ 3 x",
    ):
        estimate(
            EstimateConfig(
                data=str(data),
                model="prod",
                hardware="a100-80gb",
                deadline_hours=0.0001,
                probe=False,
            )
        )


def test_profile_constants_need_sources(tmp_path):
    doc = json.loads(Path(load_profile("a100-80gb").source).read_text())
    del doc["sources"]["mfu"]
    path = tmp_path / "nosource.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(HardwareError, match=r"nosource\.json.*sources.*'mfu'"):
        load_profile(path)
    with pytest.raises(HardwareError, match=r"bad\.json.*'mfu' must be a number in \(0, 1\]"):
        load_profile(profile_file(tmp_path, "bad", mfu=1.5))
    for name in ("a100-40gb", "a100-80gb", "h100-80gb", "h200-141gb", "cpu-local"):
        assert all(load_profile(name).sources.values())


def test_probe_times_real_steps_of_the_debug_model(tiny_dataset):
    from components.common.plan import TrainPlan

    plan = TrainPlan(model="debug", micro_batch=64, num_workers=0)
    result = probe_speed(str(tiny_dataset), plan, steps=4, warmup=1, eval_rows=512)
    assert result["samples"] == 4 * 64 and result["micro_batch"] == 64
    assert result["samples_per_s"] == pytest.approx(result["samples"] / result["seconds"])
    assert result["eval_rows"] == 512 and result["eval_samples_per_s"] > 0
    assert result["step_seconds"] == pytest.approx(result["seconds"] / 4)
    with pytest.raises(ValueError, match="too few rows to time steps of micro-batch 65536"):
        probe_speed(str(tiny_dataset), plan.replace(micro_batch=65536))


# ----------------------------------------------------------------------------- the trainer


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_progress_line_format_and_eta():
    now = [0.0]
    plan = trainer.TrainPlan(max_epochs=3, progress_seconds=10)
    progress = Progress(plan, Runtime(0, 1, 0, torch.device("cpu"), "gloo"), clock=lambda: now[0])
    handler = Lines()
    logging.getLogger("components.train").addHandler(handler)
    try:
        progress.validation_seconds = 5.0
        progress.start(0)
        now[0] = 5.0
        progress.step(0, 50, 200, 5000, 0.25)  # before progress_seconds: silent
        now[0] = 20.0
        progress.step(0, 100, 200, 20000, 0.2512)
        now[0] = 21.0
        progress.step(0, 110, 200, 21000, 0.25)  # 1 s after the last line: silent
    finally:
        logging.getLogger("components.train").removeHandler(handler)
    # 100 steps in 20 s: 20 s left in this epoch; run: 20 + 5 (validation) + 2 x (40 + 5) = 115 s
    assert handler.messages == [
        "epoch 1/3  step 100/200 (50%)  1,000 samples/s  loss 0.2512  ETA epoch 20s, run <= 1m55s"
    ]
    silent = Progress(plan, Runtime(1, 2, 1, torch.device("cpu"), "gloo"))  # not rank 0
    assert silent.every == 0


def test_long_epoch_logs_progress_checkpoints_mid_epoch_and_reports_plan_vs_actual(
    tiny_dataset, tmp_path, monkeypatch
):
    doc = estimate(
        EstimateConfig(
            data=str(tiny_dataset), model="debug", hardware="cpu-local", probe=False, max_epochs=1
        )
    )
    # many small steps (micro-batch 16); a line every 0.05 s; `last` every 0.1 s of work
    plan = doc["train"].replace(
        micro_batch=16,
        grad_accum=1,
        nproc_per_node=1,
        progress_seconds=0.05,
        max_lost_minutes=0.1 / 60,
        checkpoint_every_steps=0,
    )
    path = write_plan(tmp_path / "plan.json", plan, doc["rationale"], doc["estimate"])
    saved_at = []
    real = trainer.save_rotating
    monkeypatch.setattr(
        trainer,
        "save_rotating",
        lambda out, snap: (saved_at.append(snap["micro_step"]), real(out, snap))[1],
    )
    handler = Lines()
    logging.getLogger("components.train").addHandler(handler)
    try:
        summary = train(
            TrainConfig(data=str(tiny_dataset), out=str(tmp_path / "out"), plan=str(path))
        )
    finally:
        logging.getLogger("components.train").removeHandler(handler)
    steps = -(-doc["estimate"]["dataset"]["train_rows"] // 16)
    progress = [m for m in handler.messages if m.startswith("epoch 1/1  step ")]
    assert len(progress) >= 3, handler.messages
    assert all(
        f"/{steps} (" in m and "samples/s  loss " in m and "ETA epoch " in m for m in progress
    )
    assert any(0 < m < steps for m in saved_at), saved_at  # inside the epoch, not only at its end
    pva = summary.plan_vs_actual
    assert pva["epochs_run"] == 1 and pva["seconds"]["measured"] == summary.process_seconds > 0
    assert summary.process_seconds == pytest.approx(summary.seconds, abs=1.0)  # in-process: train()
    assert pva["seconds"]["predicted"] == pytest.approx(
        doc["estimate"]["times"]["startup_seconds"] + doc["estimate"]["times"]["epoch_seconds"]
    )
    assert pva["peak_memory_bytes"]["measured"] == summary.peak_memory_bytes
    on_disk = json.loads((tmp_path / "out" / "train_summary.json").read_text())
    assert on_disk["plan_vs_actual"] == json.loads(json.dumps(pva))
    assert any(m.startswith("plan vs actual (1 epoch(s)): seconds ") for m in handler.messages)


# ----------------------------------------------------------------------------- plan vs reality


ESTIMATE = {
    "times": {"startup_seconds": 10.0, "epoch_seconds": 50.0, "epochs_assumed": 3},
    "throughput": {"samples_per_s": 1000.0},
    "memory": {"total": {"total": 4 * 2**30}, "terms": {"runtime": {"total": 2**30}}},
}


def test_plan_vs_actual_flags_drift_beyond_two_x():
    summary = {
        "epochs_run": 2,
        "process_seconds": 100.0,
        "samples_per_s": 1500.0,
        "device": "cpu",
        "peak_memory_bytes": 9 * 2**30,
    }
    pva = plan_vs_actual(ESTIMATE, summary)
    assert pva["seconds"] == {
        "predicted": 110.0,
        "measured": 100.0,
        "ratio": pytest.approx(100 / 110),
        "drift": False,
    }  # 10 + 2 epochs x 50: the epochs that ran
    assert pva["samples_per_s"]["ratio"] == 1.5 and not pva["samples_per_s"]["drift"]
    assert pva["peak_memory_bytes"]["ratio"] == 9 / 4 > DRIFT_FACTOR and pva["drift"] == [
        "peak_memory_bytes"
    ]
    lines = drift_lines(pva)
    assert lines[0].startswith("DRIFT: peak_memory_bytes more than 2x off the plan")
    assert "seconds 100 measured vs 110 planned (x0.91)" in lines[1]
    slow = plan_vs_actual(
        ESTIMATE, {**summary, "process_seconds": 221.0, "peak_memory_bytes": 4 * 2**30}
    )
    assert slow["drift"] == ["seconds"]  # 221 / 110 > 2
    assert plan_vs_actual(ESTIMATE, {**summary, "peak_memory_bytes": 2**30})["drift"] == [
        "peak_memory_bytes"
    ]


def test_plan_vs_actual_on_cuda_resumed_and_without_a_plan():
    cuda = plan_vs_actual(
        ESTIMATE,
        {
            "epochs_run": 1,
            "process_seconds": 60.0,
            "device": "cuda",
            "peak_memory_bytes": 2**30,
            "peak_memory_reserved_bytes": 3 * 2**30,
            "resumed_from": "out/last.pt",
        },
    )
    assert (
        cuda["peak_memory_bytes"]["predicted"] == 3 * 2**30
    )  # the CUDA context is not in the allocator
    assert cuda["peak_memory_bytes"]["measured"] == 3 * 2**30
    assert cuda["seconds"] is None and "resumed" in cuda["seconds_note"]
    assert plan_vs_actual(None, {"epochs_run": 1}) is None and drift_lines(None) == []


def test_run_summary_and_evaluate_report_show_plan_vs_reality():
    pva = plan_vs_actual(
        ESTIMATE,
        {
            "epochs_run": 1,
            "process_seconds": 200.0,
            "samples_per_s": 900.0,
            "device": "cpu",
            "peak_memory_bytes": 3 * 2**30,
        },
    )
    summary = RunSummary(
        run_id="r",
        status="SUCCEEDED",
        run_date="2026-01-01",
        best_val_auc=0.7,
        epochs_run=1,
        test_auc=0.7,
        test_gauc=0.6,
        blessed=True,
        model_name="m",
        model_version=1,
        champion_version=1,
        plan_vs_actual=pva,
    )
    text = summary.text()
    assert "  estimate DRIFT: seconds more than 2x off the plan" in text  # 200 vs 60
    metrics = Metrics(
        model_name="m",
        test_auc=0.7,
        test_gauc=0.6,
        test_logloss=0.3,
        test_ece=0.01,
        served={},
        champion={"status": "none"},
        dataset={},
        candidate={"rows": 10, "users": 2},
        plan_vs_actual=pva,
    )
    report = markdown(metrics, Decision(blessed=True, reasons=(), rule={}), {})
    assert "## Training: plan vs reality" in report
    assert "| seconds | 60.00 s | 200.00 s | x3.33 **DRIFT** |" in report
    assert "| peak memory bytes | 4.00 GiB | 3.00 GiB | x0.75 |" in report


def test_auto_probe_falls_back_to_the_model_on_too_little_data(tiny_dataset):
    config = {
        "data": str(tiny_dataset),
        "model": "debug",
        "hardware": "cpu-local",
        "global_batch": 8192,
    }
    doc = estimate(EstimateConfig(**config))  # auto: the tiny split has fewer than 2 micro-batches
    assert doc["estimate"]["throughput"]["source"] == "modelled"
    assert (
        "not probed: " in doc["rationale"]["throughput"]
        and "too few rows" in doc["rationale"]["throughput"]
    )
    with pytest.raises(
        EstimateError, match=r"--probe: .*too few rows to time steps of micro-batch \d+"
    ):
        estimate(EstimateConfig(**config, probe=True))
