"""Every pipeline parameter is checked before the first task, with one line naming it; the exit
handler keeps the run-id check; an undefined comparison and a one-label validation split are said
to be what they are, never read as a result."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from components.common.cli import Exit
from components.common.evaluation import Metrics
from components.evaluate.decision import GateRule, decide
from components.evaluate.metrics import clustered_delong
from components.evaluate.report import markdown
from pipelines.local import main, pipeline_parameters
from pipelines.params import ParameterError, check_parameters
from tests.conftest import call_exit_handler

BAD = [
    (
        "run_id=../../escape",
        r"parameter run_id='../../escape': must be 1-128 characters .*'/' and '\.\.' would",
    ),
    ("run_date=2026-13-45", r"parameter run_date='2026-13-45': is not a calendar date"),
    ("run_date=2026-1-5", r"parameter run_date='2026-1-5': must be a date YYYY-MM-DD"),
    ("run_date=20260105", r"parameter run_date='20260105': must be a date YYYY-MM-DD"),
    ("run_date=0001-01-01", r"parameter run_date='0001-01-01': must be between 1970-01-01 and"),
    ("run_date=9999-12-31", r"parameter run_date='9999-12-31': must be between 1970-01-01 and"),
    ("run_date=1970-01-05", r"parameter run_date='1970-01-05': its window and history start"),
    ("run_id=latest", r"parameter run_id='latest': names what storage_root/runs keeps"),
    ("run_id=artifacts", r"parameter run_id='artifacts': names what storage_root/runs keeps"),
    ("run_id=mlflow.db", r"parameter run_id='mlflow.db': names what storage_root/runs keeps"),
    ("window_days=0", r"parameter window_days=0: must be in \[3, 366\]"),
    ("seq_len=100000000", r"parameter seq_len=100000000: must be in \[1, 1024\]"),
    ("global_batch=2000000", r"parameter global_batch=2000000: must be in \[1, 1048576\]"),
    ("max_epochs=-1", r"parameter max_epochs=-1: must be in \[1, 1000\]"),
    ("min_auc=1.5", r"parameter min_auc=1.5: must be in \[0, 1\]"),
    ("tolerance=NaN", r"parameter tolerance=nan: must be in \[0, 1\)"),
    ("launcher=slurm", r"parameter launcher='slurm': must be one of local, trainjob"),
    (
        "launcher=trainjob",
        r"parameter cluster_target: launcher=trainjob needs its \"trainjob\" block",
    ),
    ("model_name=a'b", r"parameter model_name=\"a'b\": must be 1-128 characters"),
    ("model_config=huge", r"parameter model_config='huge': unknown model config 'huge'"),
    ("hardware_profile=tpu", r"parameter hardware_profile='tpu': unknown hardware profile 'tpu'"),
    (
        "tracking_uri=ftp://host/x",
        r"parameter tracking_uri='ftp://host/x': must be an http\(s\)://",
    ),
    ("cluster_target=[1]", r"parameter cluster_target='\[1\]': must be a JSON object"),
    (
        "model_name=ok\nFAKE LOG LINE",
        r"parameter model_name: 'ok\\nFAKE LOG LINE' contains control characters",
    ),
    (
        "raw_uri=s3://AKIAKEY:s3cretKEY@bucket/raw",
        r"parameter raw_uri='s3://\*\*\*@bucket/raw': carries credentials",
    ),
    (
        "model_config=https://host/c.json?token=s3cretKEY",
        r"parameter model_config='https://host/c.json\?token=\*\*\*",
    ),
    (
        'cluster_target={"trainjob": {"env": {"MLFLOW_TRACKING_PASSWORD": "s3cretKEY"}}}',
        r"parameter cluster_target: holds credentials \(trainjob.env.MLFLOW_TRACKING_PASSWORD\); give pods",
    ),
]


@pytest.mark.parametrize(
    "setting,message", BAD, ids=[b[0].split("=")[0] + ":" + b[0][:40] for b in BAD]
)
def test_bad_parameters_are_refused_before_anything_runs(
    setting, message, tmp_path, capsys, fault_report
):
    (tmp_path / "raw").mkdir()
    data = (
        [] if setting.startswith("raw_uri=") else ["--data", str(tmp_path / "raw")]
    )  # --data would win
    code = main(
        ["--config", "configs/debug.json", *data, "--root", str(tmp_path), "--set", setting]
    )
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("run: error: parameter"), err
    assert __import__("re").search(message, err), err
    assert not (tmp_path / "runs").exists()  # nothing started, nothing written
    assert "s3cretKEY" not in err  # a refused credential is never echoed
    fault_report(
        "parameters", f"make run --set {setting!r}", err.strip()[len("run: error: ") :][:160]
    )


def test_every_daily_parameter_is_known_to_the_checker():
    from pipelines.params import RULES

    unchecked = {"warm_start", "guards_report_only"}  # bools: typed when the config is loaded
    assert set(pipeline_parameters()) - set(RULES) == unchecked
    assert check_parameters(pipeline_parameters()) == pipeline_parameters()  # the defaults pass
    with pytest.raises(
        ParameterError, match=r"parameter cluster_target: dask_workers > 0 needs its \"dask\" block"
    ):
        check_parameters({"dask_workers": 2, "cluster_target": '{"trainjob": {}}'})


@pytest.mark.parametrize("root", ["/data/dailyrec", "/mnt/dailyrec-other", "/mnt"])
def test_a_cluster_run_refuses_a_storage_root_off_the_shared_volume(root, fault_report):
    """Every pod mounts the shared volume at one fixed path: a storage root elsewhere would be a
    pod-local folder that the next task, the TrainJob and the Dask workers never see."""
    target = '{"trainjob": {"namespace": "dailyrec"}}'
    with pytest.raises(
        ParameterError, match=r"parameter storage_root=.* mounts the shared volume at /mnt/dailyrec"
    ) as caught:
        check_parameters({"storage_root": root, "cluster_target": target, "launcher": "trainjob"})
    for fine in ("/mnt/dailyrec", "/mnt/dailyrec/", "/mnt/dailyrec/team-a"):
        check_parameters({"storage_root": fine, "cluster_target": target, "launcher": "trainjob"})
    check_parameters({"storage_root": root, "cluster_target": ""})  # a local run: any folder
    fault_report("parameters", f"cluster storage_root={root}", str(caught.value)[:160])


@pytest.mark.parametrize(
    "setting", ["run_date=2026-02-30", "model_config=http://u:pw@models.example/tuned.json"]
)
def test_make_trigger_checks_parameters_before_contacting_the_cluster(setting, capsys):
    from pipelines.deploy import main as deploy_main

    # an unreachable host: the check must refuse before any connection is tried
    code = deploy_main(["trigger", "--host", "http://127.0.0.1:9", "--set", setting])
    assert code == Exit.USAGE
    err = capsys.readouterr().err
    assert (
        err.startswith(f"deploy: error: parameter {setting.split('=')[0]}=")
        and err.count("\n") == 1
    )
    assert "pw@" not in err


def test_run_id_given_twice_must_agree(tmp_path, capsys):
    (tmp_path / "raw").mkdir()
    assert (
        main(
            [
                "--config",
                "configs/debug.json",
                "--data",
                str(tmp_path / "raw"),
                "--root",
                str(tmp_path),
                "--set",
                "run_id=a",
                "--run-id",
                "b",
            ]
        )
        == 2
    )
    assert "--run-id 'b' and parameter run_id='a' differ" in capsys.readouterr().err


def test_exit_handler_refuses_a_run_id_outside_runs(tmp_path, fault_report):

    from pipelines.daily import finalize

    root = tmp_path / "store"
    (root / "raw").mkdir(parents=True)
    call_exit_handler(
        finalize.python_func,
        root,
        message="resolve-window failed",
        run_id="../raw/dt=2099-01-01",
        kfp_run_id="kfp-123",
    )
    assert (
        not (root / "raw" / "dt=2099-01-01").exists()
        and [p.name for p in (root / "raw").iterdir()] == []
    )
    summary = json.loads((root / "runs" / "kfp-123" / "summary.json").read_text())
    assert summary["run_id"] == "kfp-123" and summary["status"] == "FAILED"
    assert "run_id '../raw/dt=2099-01-01' must be 1-128 characters" in summary["error"]
    assert "resolve-window failed" in summary["error"]
    fault_report(
        "parameters",
        "exit handler with run_id ../raw/dt=2099-01-01",
        "nothing written outside runs/; the summary goes to runs/<KFP run id>/ and names the refusal",
    )


def test_the_same_explicit_run_id_in_two_cluster_runs_never_shares_a_folder(tmp_path, fault_report):
    """A second KFP run with a live run's run_id is refused at resolve-window; its exit handler writes
    under its own KFP run id and leaves the live run's folder (and TrainJob) alone."""
    from kfp import dsl

    from components.common.runs import RunFolderTaken, claim_run_dir
    from pipelines.daily import finalize

    root = tmp_path / "store"
    live = root / "runs" / "nightly"
    claim_run_dir(live, "kfp-live")
    with pytest.raises(RunFolderTaken, match="in use by KFP run kfp-live"):
        claim_run_dir(live, "kfp-second")
    status = dsl.PipelineTaskFinalStatus(
        state="FAILED",
        pipeline_job_resource_name="x",
        pipeline_task_name="daily-run",
        error_code=1,
        error_message="resolve-window failed",
    )
    finalize.python_func(
        status=status,
        storage_root=str(root),
        run_id="nightly",
        kfp_run_id="kfp-second",
        model_name="m",
        tracking_uri="",
        launcher="local",
        cluster_target="",
        retention_days=0,
    )
    assert sorted(p.name for p in live.iterdir()) == [
        "owner.json"
    ]  # no summary: still the live run's
    summary = json.loads((root / "runs" / "kfp-second" / "summary.json").read_text())
    assert summary["run_id"] == "kfp-second" and summary["status"] == "FAILED"
    assert f"run folder {live} is in use by KFP run kfp-live" in summary["error"]
    fault_report(
        "concurrency",
        "two cluster runs started with the same explicit run_id",
        "the second is refused naming the live one; its summary goes under its KFP run id and the "
        "live run's folder and TrainJob are untouched",
    )


def test_undefined_interval_is_reported_as_undefined(fault_report):
    labels = np.array([1] + [0] * 50)  # a test day with a single click
    rng = np.random.default_rng(0)
    comparison = clustered_delong(rng.random(51), rng.random(51), labels, np.arange(51) % 5)
    assert math.isnan(comparison["ci_high"])
    champion = {"status": "scored", "version": 4}
    verdict = decide(0.7, champion, comparison, GateRule(min_auc=0.5))
    assert not verdict.blessed
    assert "undefined" in verdict.reasons[1] and "significantly worse" not in verdict.reasons[1]
    assert (
        "the test split has 1 clicks and 50 non-clicks from 5 users" in verdict.reasons[1]
        and "not blessed, the champion stays" in verdict.reasons[1]
    )
    # a day of one user is as undefined: one unit says nothing of the spread between users
    labels = np.array([1, 0] * 20)
    one_user = clustered_delong(rng.random(40), rng.random(40), labels, np.zeros(40))
    assert math.isnan(one_user["ci_high"])
    assert "from 1 users" in decide(0.7, champion, one_user, GateRule(min_auc=0.5)).reasons[1]
    assert decide(
        0.7, champion, comparison, GateRule(min_auc=0.5, if_champion_unusable="ignore")
    ).blessed
    assert not decide(
        0.4, champion, comparison, GateRule(min_auc=0.5, if_champion_unusable="ignore")
    ).blessed
    metrics = Metrics(
        model_name="m",
        test_auc=0.7,
        test_gauc=math.nan,
        test_logloss=math.nan,
        test_ece=math.nan,
        served={},
        champion={"version": 4, "metrics": None},
        comparison=comparison,
        candidate={"rows": 51, "users": 5, "auc": 0.7},
        dataset={"window": {"test_days": "d"}},
    )
    text = markdown(metrics, verdict, {})
    assert (
        "undefined: the interval needs at least 2 clicks, 2 non-clicks and 2 users; the test "
        "split has 1 clicks and 50 non-clicks from 5 users"
        in text
        and "nan" not in text.lower()
    )
    fault_report(
        "evaluate",
        "a test day with a single click, or of a single user (interval NaN)",
        "reported as undefined with the counts; the rule blocks (champion stays) unless "
        "if_champion_unusable=ignore",
    )


@pytest.mark.integration
def test_a_zero_width_interval_is_no_comparison(fault_report):
    labels = np.array([1, 1, 1, 0, 0, 0])  # a six-row test day both models rank perfectly
    candidate, champion_scores = np.array([0.9, 0.8, 0.7, 0.3, 0.2, 0.1]), np.full(6, 0.5)
    champion_scores[:3] += 0.1
    comparison = clustered_delong(candidate, champion_scores, labels, np.arange(6))
    assert comparison["ci_low"] == comparison["ci_high"]  # se 0: zero width
    verdict = decide(1.0, {"status": "scored", "version": 2}, comparison, GateRule(min_auc=0.5))
    assert not verdict.blessed
    assert "undefined (a zero-width interval" in verdict.reasons[1]
    assert "the test split has 3 clicks and 3 non-clicks" in verdict.reasons[1]
    fault_report(
        "evaluate",
        "a six-row test day: the interval has zero width",
        "an undefined comparison (not 'as good'): the champion stays under the default policy",
    )


def test_validation_split_with_one_label_is_refused(tiny_dataset, tmp_path, fault_report):
    from components.common.dataset import DatasetError
    from components.common.storage import atomic_write_json
    from components.train.trainer import TrainConfig, train

    data = tmp_path / "data"
    shutil.copytree(tiny_dataset, data)
    meta = json.loads((data / "meta.json").read_text())
    label = np.load(data / "val" / "label.npy", mmap_mode="r+")
    label[:] = 0  # a validation day without a click, consistently in the arrays and the meta
    label.flush()
    meta["splits"]["val"]["positives"] = 0
    atomic_write_json(data / "meta.json", meta)
    with pytest.raises(
        DatasetError,
        match=rf"{data}/meta.json: the val split has \d+ rows and 0 clicks; "
        r"validation AUC \(early stopping, the best epoch\) needs both",
    ):
        train(TrainConfig(data=str(data), out=str(tmp_path / "out")))
    assert not (tmp_path / "out" / "best.pt").exists()
    fault_report(
        "training",
        "a validation split without clicks",
        "refused before the first epoch, naming meta.json and the counts (no NaN AUC, no silent epoch 1)",
    )


def test_parameters_json_never_holds_a_refused_uri(tmp_path, capsys):
    (tmp_path / "raw").mkdir()
    assert (
        main(
            [
                "--config",
                "configs/debug.json",
                "--data",
                str(tmp_path / "raw"),
                "--root",
                str(tmp_path),
                "--set",
                "tracking_uri=http://alice:s3cr3tPW@mlflow:5000",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert (
        "s3cr3tPW" not in err
        and "http://***@mlflow:5000" in err
        and "MLFLOW_TRACKING_PASSWORD" in err
    )
    assert not any(
        "s3cr3tPW" in p.read_text(errors="replace")
        for p in Path(tmp_path).rglob("*")
        if p.is_file()
    )
