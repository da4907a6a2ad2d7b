"""The estimate stage's plan.json drives a real training run (torchrun, cpu-local) unchanged."""

from __future__ import annotations

import pytest

from components.common.plan import read_plan
from components.common.train_summary import TrainSummary
from components.estimate import EstimateConfig, estimate_and_write
from components.estimate.hardware import load_profile
from components.train.launch import LaunchSpec, launch

pytestmark = pytest.mark.integration


def test_cpu_local_plan_is_what_the_trainer_runs(tiny_dataset, tmp_path):
    path, doc = estimate_and_write(
        EstimateConfig(data=str(tiny_dataset), model="debug", hardware="cpu-local"),
        tmp_path / "plan.json",
    )
    plan, on_disk = read_plan(path)
    assert plan == doc["train"]
    assert plan.nproc_per_node == load_profile("cpu-local").gpus_per_node and plan.nnodes == 1
    assert plan.micro_batch * plan.grad_accum * plan.world_size == 1024
    assert (
        on_disk["estimate"]["memory"]["total"]["total"]
        <= on_disk["estimate"]["memory"]["cap_bytes"]
    )

    out = tmp_path / "out"
    launch(LaunchSpec.of(data=str(tiny_dataset), plan=str(path), out=str(out), max_epochs=1))
    summary = TrainSummary.read(out)
    ran = summary.plan
    assert summary.world_size == plan.nproc_per_node * plan.nnodes
    for field in (
        "micro_batch",
        "grad_accum",
        "precision",
        "activation_checkpointing",
        "lr",
        "num_workers",
        "cpu_threads",
        "sparse_embeddings",
        "nproc_per_node",
        "nnodes",
        "warmup_fraction",
        "model",
    ):
        assert ran[field] == getattr(plan, field), field
    assert summary.precision == plan.precision == "fp32"
    assert summary.sparse_embeddings is True  # auto -> sparse with gloo on CPU
    assert summary.epochs_run == 1 and summary.plan_file == str(path)
