"""The plan's time model as pure functions, every term computed by hand on round numbers.

FLOPs of one sample, embedding-row traffic, ring all-reduce, the whole run's seconds term by
term, the checkpoint cadence, patience and the device counts tried. No dataset and no torch
steps: fast enough to run against every mutant of the time model (``make mutation``).
"""

from __future__ import annotations

import dataclasses

import pytest

from components.estimate import load_profile
from components.estimate.memory import parameter_split
from components.estimate.timemodel import (
    allreduce_seconds,
    checkpoint_buffer_bytes,
    checkpoint_interval,
    choose_patience,
    embedding_bytes_per_sample,
    flops_per_sample,
    time_model,
    world_candidates,
)
from components.train.model import ModelConfig, Vocab, head_width

# d = 4, f = 10, T = seq_len + 1 = 3, three layers
CFG = ModelConfig(
    name="hand",
    d_model=4,
    layers=3,
    heads=2,
    ffn=10,
    dropout=0.1,
    mlp=(6,),
    user_dim=5,
    context_dim=3,
    dense_embed=2,
    match_dim=2,
)
VOCAB = Vocab(item=50, category=7, user=30, gap=5, seq_len=2, neg_len=3, dense=2)
PLAIN = Vocab(item=50, category=7, user=30, gap=5, seq_len=2)

PROFILE = dataclasses.replace(
    load_profile("a100-80gb"),
    bf16_flops=1e12,
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
    inter_node_bandwidth_bytes_per_s=2.5e8,
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
    val_rows=1001,
    checkpoint_bytes=1e8,
    max_epochs=3,
    max_lost_seconds=600,
    mfu=0.5,
)


# ----------------------------------------------------------------------------- FLOPs


def test_flops_per_sample_by_hand():
    # a layer: T*2*(4d^2 + 2df) projections and feed-forward + 2*2*T^2*d attention
    layer = 3 * 2 * (4 * 16 + 2 * 4 * 10) + 2 * 2 * 9 * 4  # 864 + 144 = 1008
    width = head_width(CFG, VOCAB)
    head = (
        2 * width * 6
        + 2 * 6 * 1  # MLP: width -> 6 -> 1
        + 2 * 3 * 4  # the target's attention over 3 skipped exposures
        + 2 * 2 * 2 * 8 * 2
    )  # 2 dense features: 8 frequencies, sin/cos -> 2 wide
    assert flops_per_sample(CFG, VOCAB) == 3 * (3 * layer + head)
    # checkpointing runs the encoder's forward once more
    assert flops_per_sample(CFG, VOCAB, checkpointing=True) == 3 * (3 * layer + head) + 3 * layer


def test_flops_without_optional_inputs():
    """No skipped exposures, no dense features; dense features without a periodic embedding add
    only to the head's input width."""
    config = CFG.replace(mlp=(6, 5))
    width = head_width(config, PLAIN)
    assert flops_per_sample(config, PLAIN) == 3 * (3 * 1008 + 2 * width * 6 + 2 * 6 * 5 + 2 * 5 * 1)
    flat, dense = config.replace(dense_embed=0), dataclasses.replace(PLAIN, dense=2)
    width = head_width(flat, dense)
    assert flops_per_sample(flat, dense) == 3 * (3 * 1008 + 2 * width * 6 + 2 * 6 * 5 + 2 * 5 * 1)


def test_flops_default_is_without_checkpointing():
    assert flops_per_sample(CFG, VOCAB) == flops_per_sample(CFG, VOCAB, False)


# ----------------------------------------------------------------------------- memory traffic


def test_embedding_row_traffic_by_hand():
    """Rows (count x width x 4 bytes): item 3x4, category 3x4, gap 2x4, user 1x5, context 2x3;
    2 passes each (gather, gradient), 9 for the sparse tables' rows (SparseAdam's update too)."""
    assert embedding_bytes_per_sample(CFG, VOCAB, sparse=False) == (48 + 48 + 32 + 20 + 24) * 2
    assert embedding_bytes_per_sample(CFG, VOCAB, sparse=True) == (48 + 20) * 9 + (48 + 32 + 24) * 2


# ----------------------------------------------------------------------------- all-reduce


def test_ring_allreduce_by_hand():
    assert allreduce_seconds(4e6, PROFILE, 1, 1) == 0.0
    # in a node: 2*(W-1)/W of the bytes over the intra-node link, plus the latency
    assert allreduce_seconds(4e6, PROFILE, 2, 1) == pytest.approx(2 * 0.5 * 4e6 / 1e9 + 1e-3)
    assert allreduce_seconds(4e6, PROFILE, 4, 1) == pytest.approx(2 * 0.75 * 4e6 / 1e9 + 1e-3)
    # across nodes the inter-node link
    assert allreduce_seconds(4e6, PROFILE, 2, 2) == pytest.approx(2 * 0.75 * 4e6 / 2.5e8 + 1e-3)
    assert allreduce_seconds(4e6, PROFILE, 1, 2) == pytest.approx(2 * 0.5 * 4e6 / 2.5e8 + 1e-3)


# ----------------------------------------------------------------------------- the whole run


def test_every_term_of_a_latency_bound_run():
    t = time_model(profile=PROFILE, **CASE)
    assert t["compute_seconds"] == pytest.approx(100 * 1e6 / (1e12 * 0.5))  # 2e-4
    assert t["memory_seconds"] == pytest.approx(
        (100 * 1000 + 1000 * 28 / 2) / (1e9 * 0.5)
    )  # 2.28e-4
    assert t["latency_floor_seconds"] == 1e-3 and t["bound"] == "latency"
    assert t["micro_step_seconds"] == 1e-3
    assert t["allreduce_seconds"] == pytest.approx(2 * 0.5 * 4e6 / 1e9 + 1e-3)  # 5e-3
    assert t["step_seconds"] == pytest.approx(2 * 1e-3 / 0.8 + 5e-3)  # 7.5e-3
    # every process validates its share, rounded up: ceil(1001 / 2) = 501 rows, forward only
    assert t["validation_seconds"] == pytest.approx(501 * (1e-3 / 100) / 4)
    assert t["checkpoint_write_seconds"] == pytest.approx(1.0)
    assert t["checkpoint_every_steps"] == 0 and t["checkpoint_seconds"] == pytest.approx(2.0)
    epoch = 10 * 7.5e-3 + 501 * 1e-5 / 4 + 2.0
    assert t["epoch_seconds"] == pytest.approx(epoch)
    assert t["startup_seconds"] == pytest.approx(10 + 3 + 5 + 20)
    assert t["total_seconds"] == pytest.approx(38 + 3 * epoch)
    assert t["steps_per_epoch"] == 10


def test_compute_and_memory_bound_runs_name_their_bound():
    compute = time_model(profile=PROFILE, **(CASE | {"flops": 1e9}))
    assert compute["bound"] == "compute" and compute["micro_step_seconds"] == pytest.approx(0.2)
    assert compute["validation_seconds"] == pytest.approx(501 * (0.2 / 100) / 4)
    memory = time_model(profile=PROFILE, **(CASE | {"embedding_bytes": 1e6}))
    assert memory["bound"] == "memory"
    assert memory["micro_step_seconds"] == pytest.approx((100 * 1e6 + 1000 * 28 / 2) / 5e8)
    # the optimizer's traffic is paid once per optimizer step: spread over the micro-steps
    four = time_model(profile=PROFILE, **(CASE | {"embedding_bytes": 1e6, "grad_accum": 4}))
    assert four["memory_seconds"] == pytest.approx((100 * 1e6 + 1000 * 28 / 4) / 5e8)


def test_one_process_has_no_allreduce_and_no_parallel_loss():
    one = time_model(profile=PROFILE, **(CASE | {"nproc": 1}))
    assert one["allreduce_seconds"] == 0.0 and one["step_seconds"] == pytest.approx(2 * 1e-3)
    assert one["validation_seconds"] == pytest.approx(1001 * 1e-5 / 4)
    assert one["startup_seconds"] == pytest.approx(10 + 5 + 20)


def test_several_nodes_share_validation_and_pay_the_inter_node_link():
    t = time_model(profile=PROFILE, **(CASE | {"nproc": 3, "nnodes": 2}))
    comm = 2 * 5 / 6 * 4e6 / 2.5e8 + 1e-3
    assert t["allreduce_seconds"] == pytest.approx(comm)
    assert t["step_seconds"] == pytest.approx(2 * 1e-3 / 0.8 + comm)
    assert t["validation_seconds"] == pytest.approx(167 * 1e-5 / 4)  # ceil(1001 / 6)
    assert t["startup_seconds"] == pytest.approx(10 + 2 * 3 + 5 + 20)  # per process in a node


def test_measured_rates_replace_the_modelled_ones():
    measured = {"samples_per_s": 1000.0, "eval_samples_per_s": 4000.0, "setup_seconds": 2.0}
    t = time_model(profile=PROFILE, **(CASE | {"nproc": 1}), measured=measured)
    assert t["bound"] == "measured" and t["micro_step_seconds"] == pytest.approx(0.1)
    assert t["step_seconds"] == pytest.approx(2 * 0.1)
    assert t["validation_seconds"] == pytest.approx(1001 / 4000)
    assert t["startup_seconds"] == pytest.approx(10 + 5 + 20 + 2)  # + the probe's setup
    # the modelled terms are still reported
    assert t["compute_seconds"] == pytest.approx(2e-4) and t["latency_floor_seconds"] == 1e-3
    no_setup = time_model(
        profile=PROFILE,
        **(CASE | {"nproc": 1}),
        measured={"samples_per_s": 1000.0, "eval_samples_per_s": 4000.0},
    )
    assert no_setup["startup_seconds"] == pytest.approx(35.0)


def test_a_probe_launched_in_the_plans_world_replaces_allreduce_and_start_up():
    """Measured micro-steps of the plan's own world size already paid DDP's all-reduce, and the
    launched probe timed the whole start-up: neither the modelled all-reduce, the parallel loss nor
    the per-process start-up is added; pods and image pull still are."""
    launched = {
        "samples_per_s": 1000.0,
        "eval_samples_per_s": 4000.0,
        "setup_seconds": 2.0,
        "processes": 2,
        "startup_seconds": 7.5,
    }
    t = time_model(profile=PROFILE, **CASE, measured=launched)
    assert t["allreduce_seconds"] == 0 and t["step_seconds"] == pytest.approx(2 * 0.1)
    assert t["validation_seconds"] == pytest.approx(501 / 4000)  # each of the 2 processes its share
    assert t["startup_seconds"] == pytest.approx(7.5 + 5 + 20)
    assert t["total_seconds"] == pytest.approx(32.5 + 3 * t["epoch_seconds"])
    # measured in another world size: the modelled all-reduce and parallel loss come back
    other = time_model(profile=PROFILE, **CASE, measured=launched | {"processes": 1})
    assert other["allreduce_seconds"] == pytest.approx(2 * 0.5 * 4e6 / 1e9 + 1e-3)
    assert other["step_seconds"] == pytest.approx(2 * 0.1 / 0.8 + 5e-3)
    assert other["startup_seconds"] == pytest.approx(7.5 + 5 + 20)  # the launch was still timed
    # no processes recorded (an in-process probe measured one process): in a world of 2 the modelled
    # all-reduce and parallel loss are added
    unrecorded = time_model(
        profile=PROFILE, **CASE, measured={"samples_per_s": 1000.0, "eval_samples_per_s": 4000.0}
    )
    assert unrecorded["step_seconds"] == pytest.approx(2 * 0.1 / 0.8 + 5e-3)
    # ... and in a world of 1 there is nothing to add
    single = time_model(
        profile=PROFILE,
        **(CASE | {"nproc": 1}),
        measured={"samples_per_s": 1000.0, "eval_samples_per_s": 4000.0},
    )
    assert single["step_seconds"] == pytest.approx(2 * 0.1) and single["allreduce_seconds"] == 0


def test_long_epochs_write_mid_epoch_checkpoints():
    # 10,000 steps of 7.5 ms = 75 s > 60 s: a checkpoint every 60 / 0.0075 = 8000 steps, once
    t = time_model(profile=PROFILE, **(CASE | {"steps_per_epoch": 10_000, "max_lost_seconds": 60}))
    assert t["checkpoint_every_steps"] == 8000
    assert t["checkpoint_seconds"] == pytest.approx((2 + 1) * 1.0)
    assert t["epoch_seconds"] == pytest.approx(10_000 * 7.5e-3 + 501 * 1e-5 / 4 + 3.0)
    # a write of 3 s (3e8 bytes at 1e8 bytes/s): last, best and the mid-epoch one, 3 s each
    t = time_model(
        profile=PROFILE,
        **(CASE | {"steps_per_epoch": 10_000, "max_lost_seconds": 60, "checkpoint_bytes": 3e8}),
    )
    assert t["checkpoint_write_seconds"] == pytest.approx(3.0) and t[
        "checkpoint_seconds"
    ] == pytest.approx(9.0)
    # 20,000 steps: twice
    t = time_model(profile=PROFILE, **(CASE | {"steps_per_epoch": 20_000, "max_lost_seconds": 60}))
    assert t["checkpoint_seconds"] == pytest.approx(4.0)


# ----------------------------------------------------------------------------- cadence, patience


def test_checkpoint_interval_edges():
    assert checkpoint_interval(600, 2.0, 600) == 0  # an epoch exactly as long as the bound
    assert checkpoint_interval(600.5, 2.0, 600) == 300  # just longer: mid-epoch checkpoints
    assert checkpoint_interval(3600, 1000.0, 600) == 1  # a step longer than the bound: every step
    # 600 / 0.1 is 5999.999... in floats: the relative 1e-12 keeps it at 6000 steps
    assert checkpoint_interval(10_000, 0.1, 600) == 6000
    assert checkpoint_interval(10_000, 0.7, 600) == 857  # 857 * 0.7 = 599.9 s
    # a zero step time is treated as 1 ns
    assert checkpoint_interval(10, 0.0, 5) == 5_000_000_000


def test_patience_by_max_epochs():
    assert [choose_patience(n) for n in range(1, 12)] == [1, 1, 1, 1, 2, 2, 3, 3, 3, 3, 3]
    assert choose_patience(100) == 3


# ----------------------------------------------------------------------------- device counts


def test_world_candidates_for_gpus_and_cpus():
    gpu = dataclasses.replace(PROFILE, gpus_per_node=8, max_nodes=3)
    assert world_candidates(gpu) == [(1, 1), (2, 1), (4, 1), (8, 1), (8, 2), (8, 3)]
    six = dataclasses.replace(PROFILE, gpus_per_node=6, max_nodes=2)
    assert world_candidates(six) == [(1, 1), (2, 1), (4, 1), (6, 1), (6, 2)]
    single = dataclasses.replace(PROFILE, gpus_per_node=1, max_nodes=1)
    assert world_candidates(single) == [(1, 1)]
    cpu = dataclasses.replace(load_profile("cpu-local"), gpus_per_node=4, max_nodes=1)
    assert not cpu.is_gpu and world_candidates(cpu) == [(4, 1), (3, 1), (2, 1), (1, 1)]


def test_checkpoint_buffer_is_two_copies_of_weights_and_moments():
    assert checkpoint_buffer_bytes(CFG, VOCAB) == 2 * 12 * parameter_split(CFG, VOCAB)["total"]
