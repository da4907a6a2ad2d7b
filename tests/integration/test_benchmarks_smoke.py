"""The benchmark scripts run end to end at tiny sizes (--quick / --dry) and write their JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def run_script(name: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", f"benchmarks.{name}", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=ROOT,
    )


def run_ok(name: str, *args: str) -> subprocess.CompletedProcess:
    proc = run_script(name, *args)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "|---" in proc.stdout  # the table was printed
    return proc


def positive(*values) -> bool:
    return all(isinstance(v, int | float) and v > 0 for v in values)


def test_loader_benchmark_quick(tiny_dataset, tmp_path):
    out = tmp_path / "loader.json"
    run_ok("loader", "--data", str(tiny_dataset), "--quick", "--no-readme", "--results", str(out))
    result = json.loads(out.read_text())
    assert result["benchmark"] == "loader" and result["quick"] is True
    assert result["machine"]["cpus"] >= 1 and result["micro_batch"] == 1024
    model = result["model_step"]
    assert (
        model["model"] == "local" and model["threads"] == 1 and model["sparse_embeddings"] is True
    )
    assert positive(model["steps_per_s"], model["samples_per_s"])
    # the numbers are consistent with one another: samples = steps x micro-batch
    assert model["samples_per_s"] == pytest.approx(
        model["steps_per_s"] * model["micro_batch"], rel=1e-9
    )
    assert [r["num_workers"] for r in result["loaders"]] == [0, 1, 2]
    for r in result["loaders"]:
        assert positive(
            r["batches_per_s"], r["samples_per_s"], r["main_cpu_ms_per_batch"], r["ratio"]
        )
        assert 0 < r["rows"] <= r["batches"] * result["micro_batch"]
        assert r["samples_per_s"] / r["batches_per_s"] == pytest.approx(r["rows"] / r["batches"])
        assert r["ratio"] == pytest.approx(r["batches_per_s"] / model["steps_per_s"])
    assert result["best_ratio"] == max(r["ratio"] for r in result["loaders"])
    assert result["target_ratio"] == 10.0
    assert result["meets_target"] is (result["best_ratio"] >= result["target_ratio"])


def test_train_benchmark_quick(tiny_dataset, tmp_path):
    out = tmp_path / "train.json"
    run_ok(
        "train",
        "--data",
        str(tiny_dataset),
        "--quick",
        "--no-readme",
        "--results",
        str(out),
        "--work",
        str(tmp_path),
    )
    result = json.loads(out.read_text())
    assert result["benchmark"] == "train" and result["global_batch"] == 1024
    assert result["rows"]["train"] == 2048  # the --quick subset
    naive = result["naive"]
    assert naive["steps"] >= 1 and naive["threads"] >= 1
    assert positive(naive["samples_per_s"]) and 0 <= naive["data_wait_fraction"] < 1
    assert [r["processes"] for r in result["tuned"]] == [1, 2]
    for r in result["tuned"]:
        assert r["global_batch"] == 1024 and r["micro_batch"] * r["processes"] == 1024
        assert r["threads"] == 1 and r["sparse_embeddings"] is True
        assert positive(r["samples_per_s"]) and 0 <= r["data_wait_fraction"] < 1
    # the summary is derived from the runs above, as the published table states it
    one, two = result["tuned"]
    s = result["summary"]
    assert s["speedup"] == pytest.approx(one["samples_per_s"] / naive["samples_per_s"])
    assert s["speedup_2proc"] == pytest.approx(two["samples_per_s"] / naive["samples_per_s"])
    assert s["scaling_efficiency"] == pytest.approx(
        two["samples_per_s"] / (2 * one["samples_per_s"])
    )
    assert s["tuned_data_wait_fraction"] == one["data_wait_fraction"]
    assert (s["target_speedup"], s["target_data_wait"]) == (2.0, 0.05)
    assert s["meets_speedup_target"] is (s["speedup"] >= s["target_speedup"])
    assert s["meets_data_wait_target"] is (one["data_wait_fraction"] <= s["target_data_wait"])
    assert not list(tmp_path.glob("bench-train-*"))  # the temporary subset and runs are cleaned up


def test_gpu_benchmark_dry(tmp_path):
    out = tmp_path / "gpu.json"
    run_ok(
        "gpu",
        "--dry",
        "--peak-flops",
        "1e12",
        "--profile",
        "h200-141gb",
        "--no-readme",
        "--results",
        str(out),
    )
    result = json.loads(out.read_text())
    assert result["benchmark"] == "gpu" and result["dry"] is True and result["model"] == "prod"
    assert result["device"]["type"] == "cpu" and result["sparse_embeddings"] is False
    # FlopCounterMode's count is the analytic one: 3 x the forward's matrix products
    assert result["flops_per_sample"] == result["analytic_flops_per_sample"] > 0
    assert [r["precision"] for r in result["runs"]] == ["fp32", "bf16"]
    for r in result["runs"]:
        assert positive(
            r["samples_per_s"], r["step_ms"], r["peak_memory_bytes"], r["achieved_flops"], r["mfu"]
        )
        assert r["achieved_flops"] == pytest.approx(result["flops_per_sample"] * r["samples_per_s"])
        assert r["mfu"] == pytest.approx(r["achieved_flops"] / 1e12)  # --peak-flops 1e12
    fp32, bf16 = result["runs"]
    assert result["bf16_speedup"] == pytest.approx(bf16["samples_per_s"] / fp32["samples_per_s"])
    assert [r["batch"] for r in result["sweep"]] == [8, 32]
    for r in result["sweep"]:
        assert r["precision"] == "bf16" and positive(r["estimate"]["predicted_bytes"], r["mfu"])
        assert r["estimate"]["profile"] == "h200-141gb" and positive(
            r["estimate"]["predicted_step_ms"]
        )
    c = result["constants"]
    assert (
        c["step_latency_batch"] == 8
        and c["step_latency_seconds"] == result["sweep"][0]["step_ms"] / 1000
    )
    assert c["mfu"] == max(r["mfu"] for r in result["sweep"])


def test_gpu_benchmark_without_cuda_fails_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no device visible, on GPU hosts too
    proc = run_script("gpu", "--results", str(tmp_path / "gpu.json"), "--no-readme")
    assert proc.returncode != 0
    assert proc.stderr.strip().count("\n") == 0 and "no CUDA device" in proc.stderr
    assert not (tmp_path / "gpu.json").exists()


def test_estimate_benchmark_quick(tiny_dataset, tmp_path):
    out = tmp_path / "estimate.json"
    run_ok(
        "estimate",
        "--quick",
        "--data",
        str(tiny_dataset),
        "--no-readme",
        "--results",
        str(out),
        "--work",
        str(tmp_path / "work"),
    )
    result = json.loads(out.read_text())
    assert result["benchmark"] == "estimate" and result["quick"] is True and result["epochs"] == 1
    for row in result["time"]:
        assert positive(
            row["measured_seconds"], row["calibrated_seconds"], row["uncalibrated_seconds"]
        )
        # the seconds are stored rounded to 0.01 s, the error computed from the unrounded values
        measured = row["measured_seconds"]
        slack = 0.006 * (1 + row["calibrated_seconds"] / measured) / measured
        assert row["calibrated_error"] == pytest.approx(
            (row["calibrated_seconds"] - row["measured_seconds"]) / row["measured_seconds"],
            abs=slack,
        )
        # refused exactly when the planner said why (its one-line infeasibility message)
        assert row["deadline_refused"] is (row["deadline_message"] is not None)
        if row["deadline_refused"]:
            assert "cannot be met" in row["deadline_message"]
    assert result["impossible_deadline"]["refused"] is True
    assert "cannot be met on a100-80gb" in result["impossible_deadline"]["message"]
    for row in result["memory"]:
        assert positive(row["measured_peak_rss_bytes"], row["predicted_bytes"])
        assert row["error"] == pytest.approx(
            (row["predicted_bytes"] - row["measured_peak_rss_bytes"])
            / row["measured_peak_rss_bytes"]
        )
    s = result["summary"]
    assert (s["memory_min_error"], s["memory_max_error"]) == (
        min(r["error"] for r in result["memory"]),
        max(r["error"] for r in result["memory"]),
    )
    assert s["calibrated_max_abs_error"] == max(abs(r["calibrated_error"]) for r in result["time"])
    assert s["uncalibrated_max_abs_error"] == max(
        abs(r["uncalibrated_error"]) for r in result["time"]
    )
    assert (s["deadlines_refused"], s["deadlines_tried"]) == (
        sum(r["deadline_refused"] for r in result["time"]),
        len(result["time"]),
    )
    assert s["time_target_met"] is (
        s["calibrated_max_abs_error"] <= s["target_abs_error"]
        and s["calibrated_max_abs_error"] < s["uncalibrated_max_abs_error"]
    )


def test_benchmark_results_hold_no_machine_paths():
    from benchmarks.readme import ROOT, repo_relative

    result = {
        "data": str(ROOT / "benchmarks" / "scratch" / "d"),
        "runs": [str(ROOT / "x.json"), "/srv/y"],
    }
    assert repo_relative(result) == {"data": "benchmarks/scratch/d", "runs": ["x.json", "/srv/y"]}
