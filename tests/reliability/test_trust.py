"""What the pipeline takes in is verified, not trusted: cached datasets against their digests,
plans and losses for being finite, days for carrying labels, sample folders for holding only
what the generator wrote."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from components.common.cli import Exit
from components.common.plan import TrainPlan, write_plan
from components.datagen.__main__ import main
from components.datagen.config import DatagenConfig
from components.datagen.generator import generate
from components.preprocess.config import PreprocessConfig
from components.preprocess.errors import InputError
from components.preprocess.stage import preprocess
from components.train.trainer import TrainConfig, train
from tests.conftest import call_exit_handler, write_day

pytestmark = pytest.mark.integration

SMALL = {
    "days": 4,
    "history_days": 2,
    "seq_len": 4,
    "neg_len": 3,
    "rows_per_partition": 250,
    "item_buckets": 1000,
    "category_buckets": 64,
    "user_buckets": 128,
}
TINY = dict(days=2, users=100, items=300, categories=10, events_per_day=1500, seed=5)
FAST = {"model": "debug", "micro_batch": 512, "num_workers": 0, "lr": 3e-3, "eval_batch": 2048}


def run(raw, out, **overrides) -> dict:
    return preprocess(PreprocessConfig(raw=str(raw), out=str(out), **(SMALL | overrides)))


def plan_file(path, **overrides):
    return str(write_plan(path, TrainPlan(**(FAST | overrides))))


def test_a_cached_dataset_changed_since_is_built_again_never_reused(
    raw_days, tmp_path, caplog, fault_report
):
    raw, _ = raw_days(days=6, rows=300)
    out = tmp_path / "ds"
    first = run(raw, out)
    assert set(first.files) >= {"train/label.npy", "count_state.npz", "test/dense.npy"}
    labels = out / "train" / "label.npy"
    written = labels.read_bytes()
    np.save(labels, 1 - np.load(labels))  # every label flipped, the size unchanged
    assert run(raw, out).fingerprint == first.fingerprint
    assert "not reusing the cached dataset" in caplog.text
    assert "train/label.npy: its content is not what preprocess wrote" in caplog.text
    assert labels.read_bytes() == written  # built again from the raw logs
    fault_report(
        "trust",
        "every label of a cached dataset flipped after it was written",
        "its SHA-256 no longer matches meta.json's record: not reused, built again from the raw "
        "logs, saying which file changed; later stages refuse a changed file naming it",
    )


def test_a_split_without_clicks_is_refused_before_any_training(raw_days, tmp_path, fault_report):
    raw, frames = raw_days(days=6, rows=300)
    last = max(frames)
    write_day(raw, last, frames[last].assign(label=0))  # the test day's clicks not logged
    with pytest.raises(
        InputError,
        match=r"the test split \(2026-03-06 .. 2026-03-06\) has 3\d\d rows and no clicks",
    ):
        run(raw, tmp_path / "ds")
    assert not (tmp_path / "ds").exists()
    write_day(raw, last, frames[last].assign(label=1))
    with pytest.raises(InputError, match=r"the test split .* and only clicks"):
        run(raw, tmp_path / "ds")
    fault_report(
        "trust",
        "a test day whose clicks were not logged (all labels 0, or all 1)",
        "preprocess refuses it in one line naming the split and its days, before any training",
    )


def test_a_non_finite_loss_stops_training_at_its_step_and_is_never_retried(
    tiny_dataset, tmp_path, fault_report
):
    from components.train.steps import Diverged
    from components.train.trainer import main_with_errors

    broken = tmp_path / "nan"
    shutil.copytree(tiny_dataset, broken)
    dense = np.load(broken / "train" / "dense.npy")
    dense[:, 0] = np.nan  # same size: only the digest tells, which a --data run does not read
    np.save(broken / "train" / "dense.npy", dense)
    with pytest.raises(Diverged, match=r"epoch 1 step 1/\d+: the training loss is nan"):
        train(
            TrainConfig(
                data=str(broken), out=str(tmp_path / "o"), plan=plan_file(tmp_path / "p.json")
            )
        )
    assert not (tmp_path / "o" / "best.pt").exists()
    config = TrainConfig(
        data=str(broken), out=str(tmp_path / "o2"), plan=plan_file(tmp_path / "p2.json")
    )
    assert main_with_errors(config) == Exit.NO_SPACE  # the status torchrun and the JobSet keep
    fault_report(
        "trust",
        "training diverges (NaN dense features)",
        "the first non-finite loss stops the run naming epoch and step, no checkpoint, the "
        "status no restart repeats; no AUC, GAUC, logloss or DeLong is computed from NaN scores",
    )


def test_a_plan_with_a_non_finite_value_is_refused_naming_the_field(tmp_path, fault_report):
    from components.common.plan import read_plan

    path = tmp_path / "plan.json"
    write_plan(path, TrainPlan(**FAST))
    document = json.loads(path.read_text())
    document["train"]["weight_decay"] = float("nan")
    path.write_text(json.dumps(document))  # Python's json writes and reads NaN
    with pytest.raises(
        ValueError, match=r"plan.train.weight_decay must be a finite number, got nan"
    ):
        read_plan(path)
    document["train"]["weight_decay"] = "0.01"
    path.write_text(json.dumps(document))
    with pytest.raises(ValueError, match=r"plan.train.weight_decay must be float, got '0.01'"):
        read_plan(path)
    fault_report(
        "trust",
        "plan.json with weight_decay NaN, or a number given as text",
        "refused before training, naming plan.train.<field> and the value",
    )


def test_regenerating_refuses_to_delete_what_datagen_did_not_write(tmp_path, capsys, fault_report):
    out = tmp_path / "raw"
    generate(DatagenConfig(out=out, **{**TINY, "days": 2}))
    days = sorted(p.name for p in out.glob("dt=*"))
    later = out / "dt=2099-01-01"  # e.g. a real day copied in, or one from another run
    later.mkdir()
    (later / "part-00000.parquet").write_bytes(b"kept")
    (out / days[0] / "notes.txt").write_text("mine")
    before = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    assert main(["--out", str(out), "--append-days", "1"]) != 0
    error = capsys.readouterr().err
    assert "notes.txt: not written by datagen" in error and "nor 1 more" in error
    assert "nothing was changed" in error and "Traceback" not in error
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == before
    later.joinpath("part-00000.parquet").unlink()
    later.rmdir()
    (out / days[0] / "notes.txt").unlink()
    assert main(["--out", str(out), "--append-days", "1"]) == 0
    assert len(list(out.glob("dt=*"))) == 3
    fault_report(
        "day after day",
        "make next-day on a sample folder holding a day or a file datagen did not write",
        "refused naming it, nothing changed; once moved out, the next day is appended",
    )


def test_dask_workers_without_the_deployments_key_stop_preprocess(
    raw_days, tmp_path, monkeypatch, fault_report
):
    """On a cluster the workers get the id secret from their own Secret reference: workers and
    the task disagreeing on the key would hash one user two ways, and the rows join no history."""
    import dask

    from components.common import hashing

    raw, _ = raw_days(days=6, rows=300)
    monkeypatch.delenv(hashing.KEY_ENV, raising=False)  # a worker's own environment wins
    with (
        dask.config.set(
            {"distributed.nanny.environ": {hashing.KEY_ENV: "the-workers-other-secret"}}
        ),
        pytest.raises(
            InputError, match=r"the Dask workers hash ids under key [0-9a-f]{16}, this"
        ) as err,
    ):
        run(raw, tmp_path / "ds", scheduler="local-cluster", workers=1)
    workers = hashing.id_hash_key({hashing.KEY_ENV: "the-workers-other-secret"})
    assert hashing.key_fingerprint(workers) in str(err.value)
    assert "DAILYREC_ID_KEY" in str(err.value) and not (tmp_path / "ds").exists()
    fault_report(
        "security",
        "Dask workers hashing under another id key than the preprocess task",
        "preprocess stops naming both key fingerprints (never the key); nothing is written",
    )


def test_a_model_version_refuses_ids_hashed_under_another_key(
    tiny_dataset, monkeypatch, fault_report
):
    """A checkpoint records the id key's fingerprint: scoring ids hashed under another key would
    read other buckets, so every scorer refuses at load and evaluate finds such a champion
    unusable."""
    import json as _json

    from components.common import hashing
    from components.score.features import Layout
    from components.train.model import Vocab

    meta = _json.loads((tiny_dataset / "meta.json").read_text())
    vocab = Vocab.from_meta(meta)
    assert vocab.id_key == hashing.key_fingerprint() == meta["buckets"]["key_fingerprint"]
    Layout.of(vocab)
    monkeypatch.setenv(hashing.KEY_ENV, "a-rotated-deployment-secret")
    with pytest.raises(hashing.IdKeyError, match=rf"hashes ids under the key {vocab.id_key}"):
        Layout.of(vocab)
    fault_report(
        "security",
        "a model version served or scored under another id key than it was trained with",
        "refused at load naming both fingerprints; evaluate takes such a champion as unusable "
        "(ids hashed under another key)",
    )


def _retried_components() -> dict[str, object]:
    """The component of every task the cluster's retry policy retries, by task name."""
    from pipelines.daily import check_parameters, finalize
    from pipelines.ops.estimate import estimate_op
    from pipelines.ops.evaluate import evaluate_op
    from pipelines.ops.preprocess import preprocess_op, resolve_window
    from pipelines.ops.register import register_op
    from pipelines.ops.train import train_op
    from pipelines.steps import TASK_POLICY

    ops = (resolve_window, preprocess_op, estimate_op, train_op, evaluate_op, register_op)
    by_name = {op.name: op for op in (*ops, finalize, check_parameters)}
    assert set(by_name) == set(TASK_POLICY), "a task without its component here"
    return {name: by_name[name] for name, (retries, _) in TASK_POLICY.items() if retries}


def test_a_deterministic_failure_is_never_repeated_by_a_retry(tmp_path, monkeypatch, fault_report):
    """KFP's retry policy cannot look at why a task failed: each retried task records a failure
    another attempt would repeat (bad input, exit 2) and its retry stops at once with it."""
    import inspect

    from components.common.attempts import RUN_ID_ENV, FinalError
    from components.common.cli import exit_for
    from components.preprocess import stage
    from pipelines import finalize as finalizing

    retried = _retried_components()
    assert {"resolve-window", "finalize"} <= set(retried)
    missing = [
        n for n, op in retried.items() if "attempt(" not in inspect.getsource(op.python_func)
    ]
    assert not missing, f"retried tasks that would repeat a final failure: {missing}"

    monkeypatch.setenv(RUN_ID_ENV, "kfp-7")
    root = tmp_path / "store"
    raw = root / "raw"
    generate(DatagenConfig(out=raw, **(TINY | {"days": 3})))
    listed = []
    real = stage.resolve_inputs
    monkeypatch.setattr(stage, "resolve_inputs", lambda c: listed.append(1) or real(c))
    args = dict(
        raw_uri="",
        storage_root=str(root),
        run_date="2031-01-01",  # not in the logs: bad input
        schedule_time="",
        window_days=3,
        history_days=0,
        seq_len=4,
        run_id="",
        kfp_run_id="kfp-7",
    )
    resolve = retried["resolve-window"].python_func
    with pytest.raises(InputError) as first:
        resolve(**args)
    assert exit_for(first.value) == Exit.USAGE and listed == [1]
    with pytest.raises(FinalError, match="resolve-window: not retried: .*2031") as again:
        resolve(**args)
    assert listed == [1] and again.value.exit_status == Exit.USAGE  # nothing listed again
    fault_report(
        "retries",
        "a bad-input failure (exit 2) of a task the cluster retries: resolve-window asked for "
        "days the logs do not hold",
        "recorded as final; the retry fails at once with the first attempt's message and status, "
        "listing nothing (every retried task -- resolve-window, preprocess, estimate, train, "
        "evaluate, register, finalize -- runs inside one attempt record)",
    )

    calls = []

    def bad(*a, **k):
        calls.append(1)
        raise ValueError("retention_days must be >= 0")

    monkeypatch.setattr(finalizing, "finalize_run", bad)
    handler = dict(run_id="", kfp_run_id="kfp-7")
    with pytest.raises(ValueError):
        call_exit_handler(retried["finalize"].python_func, root, **handler)
    with pytest.raises(FinalError, match="finalize: not retried"):
        call_exit_handler(retried["finalize"].python_func, root, **handler)
    assert calls == [1]
