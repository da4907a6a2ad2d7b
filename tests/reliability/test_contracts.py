"""Contracts between parts, held on what the real writer wrote: a reader is tested on the real
writer's output (register's version, then retention on its registry), and a document whose
fields have the wrong type, an infinite number or a count past any real machine is refused in
one line naming the file and the field before anything is done with it; nothing is coerced."""

from __future__ import annotations

import json
import math
import os

import pytest

from components.common.document import DocumentError
from components.common.evaluation import Decision, Metrics
from components.common.tracking import sqlite_uri
from tests.evaluations import forced_evaluation

pytestmark = pytest.mark.integration
CATEGORY = "contracts"


def _register(tiny_dataset, root, out, **config):
    """Register through the real stage whatever ``out`` holds (a forced evaluation, perhaps
    damaged by the test) with a fresh untrained checkpoint."""
    from components.register.config import RegisterConfig
    from components.register.stage import register
    from tests.checkpoints import untrained_checkpoint

    checkpoint = untrained_checkpoint(out / "model.pt", tiny_dataset, seed=len(str(out)))
    metrics, decision = str(out / "metrics.json"), str(out / "decision.json")
    uri, data = sqlite_uri(root / "runs"), str(tiny_dataset)
    return register(
        RegisterConfig(str(checkpoint), metrics, decision, "ctr", uri, data=data, **config)
    )


def test_every_tag_the_code_reads_is_on_the_version_register_writes(
    tiny_dataset, tmp_path, fault_report
):
    """The readers of a version's tags (retention, the champion's window, integrity, the id
    key, re-registration) find each tag on a version the real register made."""
    from components.common.integrity import DIGEST_TAG, WEIGHTS_TAG
    from components.common.registry import KEY_TAG, PIPELINE_RUN_TAG
    from components.common.registry_read import WINDOW_TAG, connect_readonly, window_end
    from components.register.stage import ID_KEY_TAG
    from pipelines.finalize import protected_runs

    out = forced_evaluation(tmp_path / "day-1")
    done = _register(tiny_dataset, tmp_path, out, pipeline_run_id="2026-01-05-run")
    client = connect_readonly(sqlite_uri(tmp_path / "runs"))
    tags = client.get_model_version("ctr", str(done.version)).tags
    for tag in (PIPELINE_RUN_TAG, KEY_TAG, WINDOW_TAG, ID_KEY_TAG, DIGEST_TAG, WEIGHTS_TAG):
        assert tags.get(tag), f"register wrote no {tag!r} tag: {sorted(tags)}"
    assert protected_runs(sqlite_uri(tmp_path / "runs"), "ctr") == {"2026-01-05-run"}
    assert window_end(tags) is not None
    fault_report(
        CATEGORY,
        "a version's tags as the real register writes them, read by retention, the window "
        "lookup, integrity and re-registration",
        "each tag one declaration shared by writer and reader; retention protects the run that "
        "registered @champion (read from the real registry)",
    )


BROKEN = [
    ("decision.json", "blessed", "false", 'blessed "false": expected bool'),
    ("decision.json", "reasons", "forced", 'reasons "forced": expected a list'),
    ("metrics.json", "test_auc", "0.99", 'test_auc "0.99": expected float'),
    ("metrics.json", "served", [], "served []: expected an object"),
    ("metrics.json", "seconds", "abc", 'seconds "abc": expected float'),
    ("metrics.json", "test_auc", math.inf, "test_auc Infinity: expected a finite number"),
    ("decision.json", "champion_version", True, "champion_version true: expected int or null"),
]


@pytest.mark.parametrize(("name", "field", "value", "said"), BROKEN)
def test_register_refuses_a_mistyped_document_before_it_logs_anything(
    tiny_dataset, tmp_path, fault_report, name, field, value, said
):
    out = forced_evaluation(tmp_path / "evaluate")
    doc = json.loads((out / name).read_text())
    (out / name).write_text(json.dumps({**doc, field: value}))
    with pytest.raises(DocumentError) as refused:
        _register(tiny_dataset, tmp_path, out)
    assert str(refused.value) == f"{out / name}: {said}"
    assert not (tmp_path / "runs" / "mlflow.db").exists()  # no model logged, no version
    fault_report(
        CATEGORY,
        f"{name} with {field} = {json.dumps(value)}",
        f"register refuses before logging a model: `{said}`, naming the file",
    )


def test_a_document_coerces_nothing_and_accepts_what_its_writer_writes(tmp_path):
    forced_evaluation(tmp_path)
    decision, metrics = Decision.read(tmp_path), Metrics.read(tmp_path)
    assert decision.blessed is True and math.isnan(metrics.test_auc)  # NaN: not measured
    assert Decision.from_document(decision.to_document()) == decision
    with pytest.raises(
        DocumentError, match=r'^decision: reasons \["ok", 3\]: an item: expected str$'
    ):
        Decision.from_document({**decision.to_document(), "reasons": ["ok", 3]})


def test_a_stage_record_with_a_broken_time_leaves_the_run_summarised(
    tmp_path, capsys, fault_report
):
    from components.common.final_status import stage_records
    from components.common.run_summary import RunSummary
    from components.common.runs import RunFolder, claim_run_dir, record_stage

    folder = claim_run_dir(tmp_path / "runs" / "r1", "kfp-1")
    record_stage(folder, "preprocess", 1.5)
    path = RunFolder(folder).stage_record("estimate")
    path.write_text(json.dumps({"stage": "estimate", "seconds": "abc", "finished": 1e12}))
    assert set(stage_records(folder, ("preprocess", "estimate"))) == {"preprocess"}
    said = capsys.readouterr().err
    assert f"dailyrec: {path}: seconds 'abc': expected a number >= 0: not counted as done" in said
    summary = RunSummary.build(folder, tmp_path / "none", "", "ctr", "r1", status="FAILED")
    assert summary.stage_seconds["preprocess"] == 1.5 and summary.failed_stage == "estimate"
    fault_report(
        CATEGORY,
        'a stage\'s done-record with seconds "abc"',
        "not counted as done, said in one line naming the file; the run is still summarised",
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [("nproc_per_node", 10_000), ("micro_batch", 2**62), ("grad_accum", 1 << 40), ("lr", "1e-3")],
)
def test_a_plan_past_any_machine_is_refused_before_a_process_starts(
    tmp_path, fault_report, field, value
):
    from components.common.plan import TrainPlan, plan_document, read_plan

    path = tmp_path / "plan.json"
    doc = plan_document(TrainPlan())
    path.write_text(json.dumps({**doc, "train": {**doc["train"], field: value}}))
    with pytest.raises(ValueError, match=rf"^{path}: plan\.train\.{field} must be"):
        read_plan(path)
    fault_report(
        CATEGORY,
        f"plan.json asking for {field} = {value!r}",
        "refused in one line naming the file and the field, before any process starts",
    )


def test_a_day_run_again_keeps_previous_on_the_last_other_days_champion(
    tiny_dataset, tmp_path, fault_report
):
    """Day 1 then day 2 promoted (@previous = day 1); day 2 run again and promoted: @champion is
    the new day-2 model and @previous still day 1's, so a rollback reaches yesterday."""
    from components.common.registry import CHAMPION, PREVIOUS, alias_version
    from components.common.tracking import connect
    from tests.evaluations import register_forced

    uri = sqlite_uri(tmp_path / "runs")
    days = [("2026-01-01", 1), ("2026-01-02", 2), ("2026-01-02", 3)]
    for end, seed in days:
        window = {"start": "2025-12-20", "end": end}
        champion = seed - 1 or None
        register_forced(
            tiny_dataset, tmp_path / f"v{seed}", uri, seed, window=window, champion_version=champion
        )
    client = connect(uri)
    assert int(alias_version(client, "ctr", CHAMPION).version) == 3
    assert int(alias_version(client, "ctr", PREVIOUS).version) == 1
    fault_report(
        "registry",
        "a day run again after its model was promoted (make run twice on one day)",
        "@champion is the new model of that day, @previous stays the last other day's champion",
    )


@pytest.mark.parametrize("done", [("preprocess", "estimate"), None])  # None: every stage
def test_a_stop_records_what_the_run_had_done(tmp_path, done, fault_report):
    """A signal that stops a local run after every stage finished (in its exit handler) leaves it
    SUCCEEDED with the version it registered; one that stops it between stages, CANCELED in the
    first stage that did not run."""
    from components.common.registration import Registration
    from components.common.run_summary import RunSummary
    from components.common.runs import STAGES, claim_run_dir, record_stage
    from pipelines.local import write_stopped_summary

    folder = claim_run_dir(tmp_path / "runs" / "r1", "kfp-1")
    for stage in done or STAGES:
        record_stage(folder, stage, 1.0)
    if done is None:
        Registration(
            model_name="ctr", key="k", blessed=True, registered=True, version=3, champion_version=3
        ).write(folder)
    write_stopped_summary(folder, "r1", "stopped by SIGTERM")
    summary = RunSummary.read(folder)
    if done is None:
        assert (summary.status, summary.model_version, summary.champion_version) == (
            "SUCCEEDED",
            3,
            3,
        )
        assert summary.error == "stopped by SIGTERM after every stage had finished"
    else:
        assert (summary.status, summary.failed_stage) == ("CANCELED", "train")
    fault_report(
        "interrupts",
        "SIGTERM "
        + (
            "during the exit handler, every stage done"
            if done is None
            else "between estimate and train"
        ),
        "SUCCEEDED with the version registered and promoted"
        if done is None
        else "CANCELED in stage train",
    )


def test_two_next_days_at_once_append_two_days(tmp_path, fault_report):
    """Two ``make next-day`` at once: each extends what the other wrote, so two days are added
    and both say what they wrote."""
    import subprocess
    import sys

    from components.datagen.generator import written

    out = tmp_path / "raw"
    base = [sys.executable, "-m", "components.datagen", "--out", str(out)]
    small = ["--days", "2", "--users", "40", "--items", "80", "--events-per-day", "300"]
    subprocess.run(base + small, check=True, capture_output=True, timeout=300)
    procs = [
        subprocess.Popen(
            [*base, "--append-days", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for _ in range(2)
    ]
    codes = [proc.wait(timeout=300) for proc in procs]
    assert codes == [0, 0], [proc.stderr.read() for proc in procs]
    assert written(out).days == 4
    assert len([d for d in out.iterdir() if d.name.startswith("dt=")]) == 4
    fault_report(
        "concurrency",
        "two make next-day at once on the sample logs",
        "they take turns on the dataset's lock: both exit 0 and two days are appended",
    )


def test_runs_latest_is_never_written_through_a_symlink(tmp_path, fault_report):
    from components.common.run_summary import RunSummary
    from pipelines.local import write_latest

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    root = tmp_path / "root"
    (root / "runs").mkdir(parents=True)
    (root / "runs" / "latest").symlink_to(outside)
    written = write_latest(root, RunSummary("r1", "SUCCEEDED"))
    assert written == root / "runs" / "latest" / "summary.json"
    assert not (root / "runs" / "latest").is_symlink() and not list(outside.iterdir())
    fault_report(
        "security",
        "runs/latest replaced by a symlink out of the storage root",
        "removed and written as a folder of the root; nothing written where it pointed",
    )


@pytest.mark.parametrize("name", ["latest", "artifacts", "monitor", "dashboard", "screenshots"])
def test_a_run_id_cannot_take_a_folder_of_the_tools(name):
    from pipelines.params import ParameterError, check_parameters

    with pytest.raises(ParameterError, match=f"parameter run_id={name!r}"):
        check_parameters({"run_id": name})


def test_cleaning_a_root_waits_for_no_run_and_never_pulls_folders_from_a_live_one(
    tmp_path, fault_report
):
    from components.common.lock import LockBusy, storage_lock
    from pipelines.clean import clean

    (tmp_path / "datasets" / "d1").mkdir(parents=True)
    with storage_lock(tmp_path, "live", stage="local run"):
        env_token = os.environ.pop("DAILYREC_LOCK_TOKEN")  # another process's view
        try:
            with pytest.raises(LockBusy, match="another run holds the lock"):
                clean(tmp_path, "datasets")
        finally:
            os.environ["DAILYREC_LOCK_TOKEN"] = env_token
    assert (tmp_path / "datasets" / "d1").is_dir()
    assert clean(tmp_path, "datasets") == tmp_path / "datasets"
    assert not (tmp_path / "datasets").exists()
    assert clean(tmp_path, "runs") == tmp_path / "runs" and not (tmp_path / "runs").exists()
    fault_report(
        "concurrency",
        "make clean-data / clean-runs while a run holds the storage root (ROOT=...)",
        "refused naming the holder; on an idle root they delete ROOT's folders, not the checkout's",
    )


def test_a_small_sample_of_few_items_can_be_made(tmp_path, fault_report):
    """``make data ITEMS=200``: the categories' default follows a catalogue that small; one asked
    for explicitly above the items is still refused in one line."""
    import subprocess
    import sys

    from components.datagen.generator import written

    base = [sys.executable, "-m", "components.datagen", "--days", "1", "--users", "30"]
    small = ["--items", "200", "--events-per-day", "200"]
    done = subprocess.run(
        [*base, *small, "--out", str(tmp_path / "a")], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert written(tmp_path / "a").categories == 200
    refused = subprocess.run(
        [*base, *small, "--categories", "500", "--out", str(tmp_path / "b")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert refused.returncode == 2
    assert "categories (500) must not exceed items (200)" in refused.stderr
    fault_report(
        "first use",
        "make data ITEMS=200 (fewer items than the default categories)",
        "the categories follow the catalogue; --categories above the items is refused in one line",
    )


def test_a_full_disk_in_preprocess_names_the_stage_and_the_path(
    raw_days, tmp_path, monkeypatch, fault_report
):
    """numpy says a short write as ``54000 requested and 3968 written`` with no path: preprocess
    says the disk is full, where, and that a restart cannot help (exit status 28)."""
    import numpy as np

    from components.common.cli import Exit, exit_for
    from components.common.storage import NoSpaceError
    from components.preprocess.config import PreprocessConfig
    from components.preprocess.stage import preprocess

    raw, _ = raw_days(days=6, rows=200)

    def full(*args, **kwargs):
        raise OSError("54000 requested and 3968 written")

    monkeypatch.setattr(np, "save", full)
    out = tmp_path / "dataset"
    config = PreprocessConfig(
        raw=str(raw), out=str(out), days=3, history_days=1, seq_len=5, scheduler="sync"
    )
    with pytest.raises(NoSpaceError) as refused:
        preprocess(config)
    assert str(refused.value).startswith(f"preprocess: no space left on '{out}'")
    assert exit_for(refused.value) == Exit.NO_SPACE
    assert not out.exists()  # nothing half-written left under the name
    fault_report(
        "faults",
        "a full disk while preprocess writes its arrays (numpy's short write, no path)",
        "one line naming the stage and the output folder, exit status 28; no partial dataset",
    )


def test_a_cached_dataset_rewritten_with_fresh_digests_is_refused_under_a_secret(
    raw_days, tmp_path, monkeypatch, fault_report
):
    """Flip every label and record the new digests in meta.json, as one who can write the
    storage could: without the deployment's secret the seal cannot be remade, so the cached
    dataset is not reused."""
    import numpy as np

    from components.common import hashing
    from components.common.dataset import (
        FILES_KEY,
        SEAL_KEY,
        DatasetMismatch,
        record_files,
        verify_files,
    )
    from components.preprocess.config import PreprocessConfig
    from components.preprocess.stage import preprocess

    monkeypatch.setenv(hashing.KEY_ENV, "a-deployment-secret-for-the-seal-0042")
    raw, _ = raw_days(days=6, rows=200)
    out = tmp_path / "dataset"
    preprocess(PreprocessConfig(raw=str(raw), out=str(out), days=3, history_days=1, seq_len=5))
    meta = json.loads((out / "meta.json").read_text())
    assert meta[SEAL_KEY]
    labels = out / "train" / "label.npy"
    np.save(labels, 1 - np.load(labels))
    meta[FILES_KEY] = record_files(out)  # the digests re-recorded: the files match them again
    (out / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(DatasetMismatch, match="not sealed under this deployment's id secret"):
        verify_files(out, meta)
    fault_report(
        "security",
        "a cached dataset's labels flipped and its meta.json's digests re-recorded",
        "refused: the record's HMAC under the deployment's id secret cannot be remade without it; "
        "preprocess builds the dataset again",
    )
