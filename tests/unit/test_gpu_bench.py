"""The GPU benchmark measures the step the estimate plans for a GPU, and derives the hardware
profile's constants from that measurement."""

from __future__ import annotations

import pytest

from benchmarks.gpu import PLAN_MODE, constants
from components.estimate import EstimateConfig, estimate
from tests.planning import fake_dataset


@pytest.mark.parametrize("hardware", ["h200-141gb", "a100-80gb"])
def test_sweep_runs_the_step_as_gpu_plans_run_it(tmp_path, hardware):
    dataset = fake_dataset(tmp_path / "data")
    plan = estimate(EstimateConfig(data=str(dataset), probe=False, hardware=hardware))["train"]
    assert plan.compile == PLAN_MODE


def _run(batch: int, step_ms: float, mode: str = PLAN_MODE) -> dict:
    return {
        "batch": batch,
        "step_ms": step_ms,
        "samples_per_s": batch / step_ms * 1000,
        "mode": mode,
    }


def test_constants_take_mfu_at_the_fastest_size_and_the_floor_at_the_smallest():
    sweep = [_run(4096, 10.0), _run(256, 4.0), _run(16384, 32.0), _run(1024, 5.0)]
    c = constants(sweep, peak=1e15, flops=4e7)
    assert c["at_batch"] == 16384 and c["samples_per_s"] == pytest.approx(512_000)
    assert c["mfu"] == pytest.approx(4e7 * 512_000 / 1e15)
    assert c["mfu_by_batch"]["256"] == pytest.approx(4e7 * 64_000 / 1e15)
    assert c["step_latency_seconds"] == pytest.approx(0.004) and c["step_latency_batch"] == 256
    assert c["mode"] == PLAN_MODE
    assert constants(sweep, peak=None, flops=4e7)["mfu"] is None


def test_a_gpu_micro_batch_stays_below_what_cudnn_attention_takes(tmp_path):
    # cuDNN's fused attention backward fails at 2^16 rows and more (PyTorch issue 181085)
    data = fake_dataset(tmp_path / "big", rows=2_000_000_000)
    config = EstimateConfig(
        data=str(data), model="prod", hardware="h200-141gb", global_batch=1 << 18, probe=False
    )
    plan = estimate(config)["train"]
    assert plan.micro_batch == 1 << 15
    assert plan.micro_batch * plan.grad_accum * plan.world_size == 1 << 18
