"""The estimate stage: memory terms, profiles, planner properties, infeasible requests, the probe."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from components.common.cli import Exit
from components.common.plan import read_plan
from components.estimate import (
    EstimateConfig,
    EstimateError,
    HardwareError,
    InfeasibleError,
    estimate,
    estimate_and_write,
    load_profile,
)
from components.estimate import memory as mem
from components.estimate.__main__ import main as cli_main
from components.estimate.hardware import available_profiles
from components.estimate.planner import flops_per_sample, largest_micro_batch, setup_for
from components.estimate.probe import ProbeRunner, SavedTensorCounter, fit_linear, probe
from components.train.model import (
    NAMED_CONFIGS,
    REFERENCE_VOCAB,
    Vocab,
    build_model,
    count_parameters,
)
from tests.planning import fake_dataset, profile_file

DEBUG = NAMED_CONFIGS["debug"]
SMALL = Vocab(item=4096, category=64, user=2048, gap=16, seq_len=20)
GB = 2**30


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # 2 intra-op threads are ~60x slower on the 2-vCPU VM
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return fake_dataset(tmp_path_factory.mktemp("est") / "data")


# ----------------------------------------------------------------------------- memory terms


def test_weights_are_fp32_parameters():
    params = mem.parameter_split(DEBUG, SMALL)
    counts = count_parameters(DEBUG, SMALL)
    assert params["embedding"] + params["dense"] == counts["total"]
    assert mem.weight_bytes(params) == {
        "embedding": 4 * counts["embedding"],
        "dense": 4 * counts["dense"],
    }


def test_gradients_dense_tables_full_size_sparse_tables_per_batch():
    params = mem.parameter_split(DEBUG, SMALL)
    dense = mem.gradient_bytes(mem.MemorySetup(DEBUG, SMALL, micro_batch=64, sparse=False), params)
    assert dense == {"embedding": 4 * params["embedding"], "dense": 4 * params["dense"]}
    sparse = mem.gradient_bytes(mem.MemorySetup(DEBUG, SMALL, micro_batch=64, sparse=True), params)
    rows = 64 * ((SMALL.seq_len + 1) * (8 + 4 * DEBUG.d_model) + (8 + 4 * DEBUG.user_width))
    assert sparse["embedding"] == 4 * params["other_tables"] + rows
    # per batch, not per table: doubles with the micro-batch and with accumulation
    assert mem.sparse_gradient_bytes(DEBUG, SMALL, 128) == 2 * mem.sparse_gradient_bytes(
        DEBUG, SMALL, 64
    )
    assert mem.sparse_gradient_bytes(DEBUG, SMALL, 64, 3) == 3 * mem.sparse_gradient_bytes(
        DEBUG, SMALL, 64
    )
    big = dataclasses.replace(SMALL, item=SMALL.item * 16)
    assert mem.sparse_gradient_bytes(DEBUG, big, 64) == mem.sparse_gradient_bytes(DEBUG, SMALL, 64)


def test_optimizer_state_two_moments_for_everything():
    params = mem.parameter_split(DEBUG, SMALL)
    assert mem.optimizer_bytes(params) == {
        "embedding": 8 * params["embedding"],
        "dense": 8 * params["dense"],
    }


def test_autocast_copies_only_under_mixed_precision():
    params = mem.parameter_split(DEBUG, SMALL)
    assert mem.autocast_copy_bytes("fp32", params)["dense"] == 0
    assert mem.autocast_copy_bytes("bf16", params) == {"embedding": 0, "dense": 2 * params["dense"]}


def test_ddp_buckets_only_with_several_processes():
    params = mem.parameter_split(DEBUG, SMALL)
    one = mem.ddp_bucket_bytes(mem.MemorySetup(DEBUG, SMALL, 64, world_size=1), params)
    assert one == {"embedding": 0, "dense": 0}
    two = mem.ddp_bucket_bytes(
        mem.MemorySetup(DEBUG, SMALL, 64, world_size=2, sparse=False), params
    )
    total = two["embedding"] + two["dense"]
    assert total >= 4 * params["total"] and total % mem.DDP_BUCKET_BYTES == 0
    sparse = mem.ddp_bucket_bytes(
        mem.MemorySetup(DEBUG, SMALL, 64, world_size=2, sparse=True), params
    )
    assert sum(sparse.values()) <= total  # sparse tables are not bucketed


def test_activation_terms_scale_with_shape():
    t = SMALL.seq_len + 1
    base = mem.encoder_layer_activation_bytes(DEBUG, t)
    assert mem.encoder_layer_activation_bytes(DEBUG.replace(ffn=2 * DEBUG.ffn), t) > base
    assert mem.encoder_layer_activation_bytes(DEBUG.replace(d_model=16), t) > base
    assert (
        mem.encoder_layer_activation_bytes(DEBUG.replace(heads=4), t) > base
    )  # CPU math attention
    assert mem.encoder_layer_activation_bytes(DEBUG, t, "bf16", "cuda") < base
    no_dropout = DEBUG.replace(dropout=0.0, head_dropout=0.0)
    assert mem.encoder_layer_activation_bytes(no_dropout, t) < base
    per = mem.activation_bytes_per_sample(DEBUG, SMALL)
    two_layers = mem.activation_bytes_per_sample(DEBUG.replace(layers=2), SMALL)
    assert (
        two_layers["dense"] - per["dense"] == base and two_layers["embedding"] == per["embedding"]
    )
    deep = DEBUG.replace(layers=6)
    ckpt = mem.activation_bytes_per_sample(deep, SMALL, checkpointing=True)
    assert ckpt["dense"] < mem.activation_bytes_per_sample(deep, SMALL)["dense"]
    assert mem.embedding_activation_bytes(DEBUG, SMALL) >= 8 * 3 * t


def test_loader_and_workspace_terms():
    setup = mem.MemorySetup(DEBUG, SMALL, 100, num_workers=2, prefetch_factor=4)
    assert mem.loader_bytes(setup) == 9 * 100 * mem.batch_bytes_per_sample(SMALL)
    assert mem.workspace_bytes(setup, 1000) == 100
    cuda = mem.MemorySetup(DEBUG, SMALL, 100, device="cuda")
    assert mem.workspace_bytes(cuda, 0) == mem.CUDA_WORKSPACE_BYTES


def test_breakdown_adds_up_and_separates_parts():
    b = mem.memory_breakdown(
        mem.MemorySetup(
            DEBUG,
            SMALL,
            256,
            world_size=2,
            precision="bf16",
            sparse=False,
            device="cuda",
            num_workers=2,
        )
    )
    terms = b["terms"]
    for part in terms.values():
        assert part["total"] == part["embedding"] + part["dense"]
    assert b["total"]["total"] == sum(p["total"] for p in terms.values())
    assert (
        b["tensors"]["total"]
        == b["total"]["total"] - terms["loader"]["total"] - terms["workspace"]["total"]
    )


def test_memory_setup_validates():
    with pytest.raises(ValueError, match="micro_batch"):
        mem.MemorySetup(DEBUG, SMALL, 0)
    with pytest.raises(ValueError, match="precision"):
        mem.MemorySetup(DEBUG, SMALL, 1, precision="int8")


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 200),
    st.integers(1, 60),
    st.integers(1, 4096),
    st.sampled_from(["fp32", "bf16"]),
    st.booleans(),
    st.sampled_from(["cpu", "cuda"]),
)
def test_longer_sequences_never_need_less_memory(seq_len, extra, batch, precision, ckpt, device):
    short = dataclasses.replace(SMALL, seq_len=seq_len)
    long = dataclasses.replace(SMALL, seq_len=seq_len + extra)
    for config in (DEBUG, NAMED_CONFIGS["local"], NAMED_CONFIGS["prod"]):
        a = mem.total_bytes(
            mem.MemorySetup(
                config,
                short,
                batch,
                precision=precision,
                activation_checkpointing=ckpt,
                device=device,
            )
        )
        b = mem.total_bytes(
            mem.MemorySetup(
                config,
                long,
                batch,
                precision=precision,
                activation_checkpointing=ckpt,
                device=device,
            )
        )
        assert b >= a


# ----------------------------------------------------------------------------- profiles


def test_named_profiles_load():
    assert {"a100-40gb", "a100-80gb", "h100-80gb", "h200-141gb", "cpu-local"} <= set(
        available_profiles()
    )
    for name in available_profiles():
        p = load_profile(name)
        assert p.memory_bytes > 0 and p.gpus_per_node >= 1
    cpu = load_profile("cpu-local")
    assert cpu.detected and not cpu.bf16 and cpu.kind == "cpu"


def test_user_profile_errors_name_file_and_field(tmp_path):
    good = profile_file(tmp_path, "mine")
    assert load_profile(good).name == "mine"
    bad = profile_file(tmp_path, "bad", memory_bytes=-1)
    with pytest.raises(HardwareError, match=r"bad\.json.*memory_bytes"):
        load_profile(bad)
    path = tmp_path / "missing.json"
    doc = json.loads(Path(good).read_text())
    del doc["gpus_per_node"]
    path.write_text(json.dumps(doc))
    with pytest.raises(HardwareError, match=r"missing\.json.*gpus_per_node"):
        load_profile(path)
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(HardwareError, match="broken.json"):
        load_profile(tmp_path / "broken.json")
    with pytest.raises(HardwareError, match="unknown hardware profile"):
        load_profile("tpu-v9")


# ----------------------------------------------------------------------------- planner


def test_estimate_config_validates(dataset):
    with pytest.raises(EstimateError, match="global_batch"):
        EstimateConfig(data=str(dataset), probe=False, global_batch=0)
    with pytest.raises(EstimateError, match="unknown model config"):
        EstimateConfig(data=str(dataset), probe=False, model="huge")
    with pytest.raises(EstimateError, match="memory_fraction"):
        EstimateConfig(data=str(dataset), probe=False, memory_fraction=1.5)
    with pytest.raises(EstimateError, match="deadline_hours"):
        EstimateConfig(data=str(dataset), probe=False, deadline_hours=0)


def test_plan_for_a100_prod(dataset, tmp_path):
    path, doc = estimate_and_write(
        EstimateConfig(data=str(dataset), probe=False, model="prod", hardware="a100-80gb"),
        tmp_path / "plan.json",
    )
    plan, on_disk = read_plan(path)
    assert plan == doc["train"]
    assert plan.precision == "bf16" and plan.sparse_embeddings == "auto"
    assert plan.global_batch == 1024 and plan.lr == pytest.approx(2e-3)
    assert plan.max_epochs == 3 and not plan.activation_checkpointing
    assert plan.micro_batch & (plan.micro_batch - 1) == 0
    for field in ("micro_batch", "grad_accum", "precision", "lr", "nproc_per_node", "throughput"):
        assert field in on_disk["rationale"]
    est = on_disk["estimate"]
    assert est["memory"]["total"]["total"] <= est["memory"]["cap_bytes"]
    assert est["throughput"]["mfu"] == load_profile("a100-80gb").mfu == 0.05  # cited, not probed
    assert est["times"]["epoch_seconds"] > 0 and est["parameters"]["total"] > 0


def test_plan_for_cpu_local(dataset):
    doc = estimate(
        EstimateConfig(data=str(dataset), probe=False, model="local", hardware="cpu-local")
    )
    plan = doc["train"]
    profile = load_profile("cpu-local")
    assert plan.precision == "fp32" and plan.num_workers == 0 and plan.cpu_threads == 1
    assert plan.nproc_per_node == profile.gpus_per_node and plan.nnodes == 1
    assert "modelled" in doc["rationale"]["throughput"]
    odd = estimate(
        EstimateConfig(
            data=str(dataset),
            probe=False,
            model="debug",
            hardware="cpu-local",
            global_batch=profile.gpus_per_node * 8 + 1,
        )
    )["train"]
    assert (
        odd.global_batch == profile.gpus_per_node * 8 + 1
    )  # fewer processes when cores don't divide
    with pytest.raises(
        InfeasibleError,
        match=r"deadline 1e-09 h \(3.6e-06 s\) cannot be met on cpu-local.*start-up",
    ):
        estimate(
            EstimateConfig(
                data=str(dataset),
                probe=False,
                model="debug",
                hardware="cpu-local",
                deadline_hours=1e-9,
            )
        )


@settings(max_examples=25, deadline=None)
@given(
    st.sampled_from([1, 2, 8, 96, 256, 1000, 1024, 4096, 65536]),
    st.sampled_from(["a100-40gb", "h100-80gb", "cpu-local"]),
    st.sampled_from(["debug", "local", "prod"]),
)
def test_accumulation_times_micro_times_world_is_global_batch(dataset, batch, hardware, model):
    try:
        plan = estimate(
            EstimateConfig(
                data=str(dataset), probe=False, model=model, hardware=hardware, global_batch=batch
            )
        )["train"]
    except InfeasibleError:  # e.g. a world size that does not divide the batch
        return
    assert plan.micro_batch * plan.grad_accum * plan.world_size == batch


@settings(max_examples=30, deadline=None)
@given(
    st.floats(0.05, 200),
    st.floats(1.0, 8.0),
    st.sampled_from(["debug", "local", "prod"]),
    st.sampled_from([64, 1024, 8192]),
)
def test_more_device_memory_never_gives_a_smaller_micro_batch(gib, factor, model, per_process):
    config, vocab = NAMED_CONFIGS[model], REFERENCE_VOCAB[model]
    profile = load_profile("a100-80gb")

    def micro(mem_gib):
        p = dataclasses.replace(profile, memory_bytes=int(mem_gib * GB))
        found = largest_micro_batch(
            config, vocab, p, 0.88 * p.memory_bytes, per_process, 1, "bf16", False, 4, 4
        )
        return found[0] if found else 0

    assert micro(gib * factor) >= micro(gib)


def test_infeasible_memory(dataset, tmp_path):
    tiny = profile_file(tmp_path, "tiny", memory_bytes=10 * 2**20, max_nodes=1)
    with pytest.raises(InfeasibleError, match=r"does not fit.*micro-batch 1.*GiB.*cap"):
        estimate(EstimateConfig(data=str(dataset), probe=False, model="prod", hardware=tiny))


def test_infeasible_deadline(dataset):
    with pytest.raises(
        InfeasibleError,
        match=r"deadline 1e-06 h \(0.0036 s\) cannot be met on a100-40gb \(at most 32 devices\).*h .*s\) at best",
    ):
        estimate(
            EstimateConfig(
                data=str(dataset),
                probe=False,
                model="prod",
                hardware="a100-40gb",
                deadline_hours=1e-6,
            )
        )


def test_deadline_adds_devices(tmp_path):
    # a compute-bound request (big global batch): more GPUs finish sooner
    data = fake_dataset(tmp_path / "big", rows=2_000_000_000)
    config = {
        "data": str(data),
        "model": "prod",
        "hardware": "h100-80gb",
        "global_batch": 65536,
        "probe": False,
    }
    free = estimate(EstimateConfig(**config))
    hours = free["estimate"]["times"]["total_seconds"] / 3600
    tight = estimate(EstimateConfig(**config, deadline_hours=hours / 1.3))
    assert tight["train"].world_size > free["train"].world_size == 1
    assert (
        tight["estimate"]["times"]["total_seconds"] * 1.15 <= hours / 1.3 * 3600
    )  # with the headroom
    assert tight["train"].global_batch == 65536
    # the fastest plan: tighten the deadline (no headroom) until no plan meets it; each plan
    # then takes over seconds / 1.04, more than a 10% longer deadline less 15% headroom allows
    fastest = tight
    while True:
        seconds = fastest["estimate"]["times"]["total_seconds"]
        try:
            fastest = estimate(
                EstimateConfig(**config, deadline_hours=seconds / 1.04 / 3600, deadline_margin=0.0)
            )
        except InfeasibleError:
            break
    assert fastest["train"].world_size > tight["train"].world_size
    # a deadline 10% over the fastest plan's time is met only without headroom for the error
    hours = seconds * 1.1 / 3600
    assert estimate(EstimateConfig(**config, deadline_hours=hours, deadline_margin=0.0))
    with pytest.raises(
        InfeasibleError, match=r"cannot be met on h100-80gb .*15% headroom for the estimate's error"
    ):
        estimate(EstimateConfig(**config, deadline_hours=hours))
    with pytest.raises(EstimateError, match=r"deadline_margin must be in \[0, 1\), got 1.5"):
        EstimateConfig(**config, deadline_margin=1.5)


def test_checkpointing_only_when_needed(dataset, tmp_path):
    doc = estimate(
        EstimateConfig(data=str(dataset), probe=False, model="prod", hardware="a100-40gb")
    )
    assert not doc["train"].activation_checkpointing
    # a device where micro-batch 1 fits only with checkpointing
    vocab = Vocab.from_meta(json.loads((dataset / "meta.json").read_text()))
    profile = load_profile("a100-40gb")

    def need(ckpt):
        setup = setup_for(
            NAMED_CONFIGS["prod"],
            vocab,
            profile,
            micro=1,
            accum=8,
            world=1,
            precision="bf16",
            checkpointing=ckpt,
            num_workers=8,
            prefetch=4,
        )
        return mem.total_bytes(setup)

    assert need(True) < need(False)
    cap = (need(True) + need(False)) / 2
    tight = profile_file(tmp_path, "tight", memory_bytes=int(cap / 0.88), max_nodes=1)
    doc = estimate(
        EstimateConfig(data=str(dataset), probe=False, model="prod", hardware=tight, global_batch=8)
    )
    assert doc["train"].activation_checkpointing and doc["train"].micro_batch == 1
    assert doc["rationale"]["activation_checkpointing"].startswith("on")


def test_flops_per_sample_counts_checkpoint_recompute():
    plain = flops_per_sample(NAMED_CONFIGS["prod"], REFERENCE_VOCAB["prod"])
    assert flops_per_sample(NAMED_CONFIGS["prod"], REFERENCE_VOCAB["prod"], True) > plain > 0


def test_cli_prints_one_line_on_error(dataset, tmp_path, capsys):
    assert (
        cli_main(
            [
                "--data",
                str(dataset),
                "--model",
                "prod",
                "--hardware",
                "a100-40gb",
                "--deadline-hours",
                "0.000001",
                "--no-probe",
                "--out",
                str(tmp_path / "p.json"),
            ]
        )
        == Exit.USAGE  # a deadline no plan can meet: a request to change, not a failed run
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("estimate: error: deadline")
    assert not (tmp_path / "p.json").exists()
    assert (
        cli_main(
            [
                "--data",
                str(dataset),
                "--model",
                "debug",
                "--hardware",
                "h200-141gb",
                "--no-probe",
                "--out",
                str(tmp_path / "p.json"),
            ]
        )
        == 0
    )
    assert "micro_batch" in capsys.readouterr().out and (tmp_path / "p.json").is_file()


# ----------------------------------------------------------------------------- probe


def test_saved_tensor_counter_counts_unique_storages():
    x = torch.randn(10, 4, requires_grad=True)
    counter = SavedTensorCounter()
    with counter.hooks():
        y = (x * x).sum()  # x saved twice: one storage
    assert counter.bytes == x.nbytes
    y.backward()


def test_fit_linear():
    assert fit_linear((2, 6), (10.0, 30.0)) == (5.0, 0.0)
    with pytest.raises(ValueError, match="the probe needs two different micro-batch sizes"):
        fit_linear((2, 2), (1.0, 1.0))


def test_analytic_model_matches_probe_on_debug():
    """The analytic tensors (weights + grads + optimizer + activations) vs the probe's
    measurement of the real model (sparse tables, SparseAdam + fused AdamW, fp32, CPU) at two
    micro-batch sizes. The model counts every tensor the CPU kernels save (torch 2.13: it
    matches to the byte); the tolerances (10% per-sample activations, 5% totals) leave room
    for a torch upgrade that changes a kernel's saved tensors, not for a missing term."""
    vocab = REFERENCE_VOCAB["debug"]
    result = probe(DEBUG, vocab, sparse=True, device="cpu", micro_batches=(64, 256), timing_steps=0)
    per_sample = mem.activation_bytes_per_sample(DEBUG, vocab)
    assert result["saved_bytes_per_sample"] == pytest.approx(sum(per_sample.values()), rel=0.10)
    for batch, measured in zip(result["micro_batches"], result["measured"], strict=True):
        predicted = mem.memory_breakdown(mem.MemorySetup(DEBUG, vocab, batch, sparse=True))
        assert predicted["tensors"]["total"] == pytest.approx(measured["total"], rel=0.05)
        assert predicted["terms"]["gradients"]["total"] == pytest.approx(
            measured["gradients"], rel=0.05
        )
        assert predicted["model_state"]["total"] - predicted["terms"]["gradients"][
            "total"
        ] == pytest.approx(measured["weights"] + measured["optimizer"], rel=0.01)


def test_probe_runner_uses_the_trainers_optimizers():
    runner = ProbeRunner(DEBUG, SMALL, sparse=True)
    assert runner.optim.sparse is not None and runner.optim.dense.defaults["fused"]
    assert runner.samples_per_s(16, steps=1) > 0
    model = build_model(DEBUG, SMALL, sparse=True)
    assert sum(p.numel() for p in model.parameters()) == count_parameters(DEBUG, SMALL)["total"]


def test_estimate_with_probe_uses_measurements(tiny_dataset):
    doc = estimate(
        EstimateConfig(data=str(tiny_dataset), model="debug", hardware="cpu-local", probe=True)
    )
    est = doc["estimate"]
    assert (
        est["throughput"]["source"] == "probe" and est["throughput"]["measured_samples_per_s"] > 0
    )
    assert est["speed_probe"]["samples"] > 0 and est["speed_probe"]["eval_samples_per_s"] > 0
    assert "probe-measured" in doc["rationale"]["throughput"]
    modelled = est["memory"]["terms"]["activations"]["total"]
    assert abs(est["memory"]["probe_adjustment_bytes"]) <= 0.05 * modelled  # the model agrees


def test_probe_of_a_gpu_profile_needs_a_visible_gpu(dataset, monkeypatch):
    """Asking to probe a GPU profile where no CUDA device is visible is refused, on any machine."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(EstimateError, match="no CUDA device is visible here"):
        estimate(EstimateConfig(data=str(dataset), model="debug", hardware="a100-40gb", probe=True))
    # auto (probe=None) plans from the profile's cited constants instead
    doc = estimate(EstimateConfig(data=str(dataset), model="debug", hardware="a100-40gb"))
    assert doc["estimate"]["throughput"]["source"] == "modelled"
    assert "not probed: no such device here" in doc["rationale"]["throughput"]


def test_checkpointed_activations_match_what_autograd_keeps():
    """With checkpointing, what stays saved until backward (layer inputs, embeddings, head) is
    counted exactly; the model adds one layer's full activations for the recompute in backward."""
    runner = ProbeRunner(DEBUG, SMALL, sparse=True, activation_checkpointing=True)
    a, b = runner.measure(64)["saved"], runner.measure(256)["saved"]
    model = mem.activation_bytes_per_sample(DEBUG, SMALL, checkpointing=True)
    layer = mem.encoder_layer_activation_bytes(DEBUG, SMALL.seq_len + 1)
    assert (b - a) / 192 == pytest.approx(sum(model.values()) - layer, rel=0.05)


# ----------------------------------------------------------------------------- exact memory terms


def test_sparse_gradients_grow_with_accumulation_inside_the_breakdown():
    params = mem.parameter_split(DEBUG, SMALL)
    setup = mem.MemorySetup(DEBUG, SMALL, micro_batch=64, grad_accum=3, sparse=True)
    rows = 64 * 3 * ((SMALL.seq_len + 1) * (8 + 4 * DEBUG.d_model) + (8 + 4 * DEBUG.user_width))
    assert mem.gradient_bytes(setup, params) == {
        "embedding": 4 * params["other_tables"] + rows,
        "dense": 4 * params["dense"],
    }


def test_ddp_buckets_round_up_to_whole_buckets_on_the_bigger_part():
    bucket = mem.DDP_BUCKET_BYTES
    assert bucket == 25 * 1024 * 1024
    setup = mem.MemorySetup(DEBUG, SMALL, 64, world_size=2, sparse=False)
    # dense part bigger: the rounding goes to it
    params = {"embedding": 1000, "other_tables": 10, "dense": 3000}
    assert mem.ddp_bucket_bytes(setup, params) == {"embedding": 4000, "dense": bucket - 4000}
    # tables bigger (one bucket plus 4 bytes in all): two buckets, the rounding on the tables
    params = {"embedding": bucket // 4, "other_tables": 10, "dense": 1}
    assert mem.ddp_bucket_bytes(setup, params) == {"embedding": 2 * bucket - 4, "dense": 4}
    # a tie: the rounding goes to the tables
    params = {"embedding": 1, "other_tables": 1, "dense": 1}
    assert mem.ddp_bucket_bytes(setup, params) == {"embedding": bucket - 4, "dense": 4}
    # exactly whole buckets: nothing added
    params = {"embedding": bucket // 4, "other_tables": bucket // 8, "dense": bucket // 4}
    assert mem.ddp_bucket_bytes(setup, params) == {"embedding": bucket, "dense": bucket}
    # sparse tables are not bucketed: only the other tables are reduced densely (half a bucket here)
    sparse = mem.MemorySetup(DEBUG, SMALL, 64, world_size=2, sparse=True)
    assert mem.ddp_bucket_bytes(sparse, params) == {
        "embedding": bucket // 2,
        "dense": bucket + bucket // 2,
    }


def test_loader_workspace_and_batch_bytes_exactly():
    # one row: 3 ids per click and per skipped exposure, 2 lengths, target item and category, user,
    # 2 context ids (int64); the fp32 count features and label
    assert mem.batch_bytes_per_sample(SMALL) == 8 * (3 * SMALL.seq_len + 7) + 4
    wide = dataclasses.replace(SMALL, neg_len=5, dense=21)
    assert mem.batch_bytes_per_sample(wide) == 8 * (3 * 20 + 3 * 5 + 7) + 4 * 22
    assert mem.loader_bytes(mem.MemorySetup(DEBUG, SMALL, 10)) == 10 * mem.batch_bytes_per_sample(
        SMALL
    )
    assert mem.loader_bytes(
        mem.MemorySetup(DEBUG, SMALL, 10, num_workers=3, prefetch_factor=2)
    ) == 7 * 10 * mem.batch_bytes_per_sample(SMALL)
    cpu = mem.MemorySetup(DEBUG, SMALL, 10)
    assert mem.workspace_bytes(cpu, 1009) == 100  # 10%, rounded down
    assert (
        mem.workspace_bytes(mem.MemorySetup(DEBUG, SMALL, 10, device="cuda"), 1009)
        == 100 + 256 * 1024 * 1024
    )


def test_optimizer_weights_and_autocast_exactly():
    params = {"embedding": 7, "dense": 11, "other_tables": 0}
    assert mem.weight_bytes(params) == {"embedding": 28, "dense": 44}
    assert mem.optimizer_bytes(params) == {"embedding": 56, "dense": 88}
    assert [mem.autocast_copy_bytes(p, params) for p in ("fp32", "bf16", "fp16")] == [
        {"embedding": 0, "dense": 0},
        {"embedding": 0, "dense": 22},
        {"embedding": 0, "dense": 22},
    ]


def test_sparse_rows_and_parameter_split():
    assert mem.sparse_rows_per_sample(SMALL) == (SMALL.seq_len + 1, 1)
    split = mem.parameter_split(DEBUG, SMALL)
    counts = count_parameters(DEBUG, SMALL)
    assert split == {
        "sparse_tables": counts["sparse"],
        "other_tables": counts["embedding"] - counts["sparse"],
        "dense": counts["dense"],
        "embedding": counts["embedding"],
        "total": counts["total"],
    }
    assert split["embedding"] + split["dense"] == split["total"]


@pytest.mark.parametrize("field", ["micro_batch", "grad_accum", "world_size", "prefetch_factor"])
@pytest.mark.parametrize("value", [0, -1, True, 1.0, "2"])
def test_memory_setup_counts_are_integers_from_one(field, value):
    base = {"micro_batch": 1, "grad_accum": 1, "world_size": 1, "prefetch_factor": 1}
    assert mem.MemorySetup(DEBUG, SMALL, **base).micro_batch == 1  # 1 is allowed everywhere
    with pytest.raises(ValueError, match=rf"^{field} must be an integer >= 1, got {value!r}$"):
        mem.MemorySetup(DEBUG, SMALL, **(base | {field: value}))


def test_memory_setup_precision_and_device_choices():
    for precision in ("fp32", "bf16", "fp16"):
        assert mem.MemorySetup(DEBUG, SMALL, 1, precision=precision).precision == precision
    assert mem.MemorySetup(DEBUG, SMALL, 1, device="cuda").device == "cuda"
    with pytest.raises(ValueError, match=r"^precision must be fp32, bf16 or fp16, got 'int8'$"):
        mem.MemorySetup(DEBUG, SMALL, 1, precision="int8")
    with pytest.raises(ValueError, match=r"^device must be cpu or cuda, got 'tpu'$"):
        mem.MemorySetup(DEBUG, SMALL, 1, device="tpu")
