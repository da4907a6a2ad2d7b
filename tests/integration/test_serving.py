"""Raw-id scoring: request arrays equal the dataset's, and the registered model served over HTTP.

Two datasets of the same raw events: ``before`` (days 1-4) and ``after`` (days
1-5, every day-5 event at one second). A model trained on ``before`` carries
its snapshot (counts and user events at the end of day 4); the day-5 rows of
``after`` were built from exactly that knowledge, so scoring them by raw id
must give their dataset arrays bit for bit, and evaluate's scores.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from components.common.cli import Exit
from components.common.dataset_meta import DatasetMeta
from components.common.hashing import hash_ids
from components.common.tracking import sqlite_uri
from components.register.config import RegisterConfig
from components.register.stage import register
from components.score.features import Layout, RequestError, Snapshot, request_inputs, write_snapshot
from components.train.inference import load_scorer, predict_logits, sigmoid, split_rows
from components.train.model import BATCH_KEYS, Vocab
from tests.conftest import START, write_day
from tests.serving_world import AT, DAY5, NAME, day5, requests_of
from tests.tools import require_tool

pytestmark = pytest.mark.integration


def _dataset_rows(data) -> dict:
    (batch,) = split_rows(
        data, "test", DatasetMeta.read(data), 10**6, keys=(*BATCH_KEYS, "label", "user_key", "ts")
    )
    return batch


def _sorted(arrays: dict, label: np.ndarray, ties: np.ndarray | None = None) -> dict:
    """Rows in one canonical order; ``ties`` (e.g. the dense features) orders rows whose ids share
    buckets."""
    ties = () if ties is None else tuple(np.asarray(ties).reshape(len(label), -1).T)
    order = np.lexsort(
        (
            *ties,
            label,
            arrays["target_cat"],
            arrays["target_item"],
            arrays["ts"],
            arrays["user_key"],
        )
    )
    return {k: np.asarray(v)[order] for k, v in arrays.items()}


def _layout(data) -> Layout:
    return Layout.of(Vocab.from_meta(DatasetMeta.read(data)))


@pytest.mark.parametrize("with_events", [True, False], ids=["events-in-request", "snapshot-events"])
def test_request_arrays_equal_the_dataset_rows_bit_for_bit(world, tmp_path, with_events):
    # exact times: the snapshot's own resolution moves time features only
    # (tests/integration/test_served_features.py)
    files = write_snapshot(world["before"], tmp_path, resolution=1)
    snapshot = Snapshot.load(files["count_state"], None if with_events else files["user_state"])
    arrays = request_inputs(requests_of(world, with_events), snapshot, _layout(world["after"]))
    label = day5(world)["label"].to_numpy()
    ours = _sorted({**arrays, "label": label.astype(np.uint8)}, label, arrays["dense"])
    theirs = _dataset_rows(world["after"])
    theirs = _sorted(theirs, theirs["label"], theirs["dense"])
    assert len(ours["user_key"]) == len(theirs["user_key"]) > 300
    assert (theirs["hist_len"] > 0).mean() > 0.5 and np.abs(
        theirs["dense"]
    ).sum() > 0  # features not trivial
    for key in (*BATCH_KEYS, "user_key", "ts", "label"):
        assert ours[key].dtype == theirs[key].dtype, key
        assert np.array_equal(ours[key], theirs[key]), key


def test_bad_requests_are_refused_with_one_line_reasons(world, tmp_path):
    files = write_snapshot(world["before"], tmp_path)
    with_events = Snapshot.load(files["count_state"])
    layout = _layout(world["before"])
    good = requests_of(world, True).head(3)
    cases = [
        (good.drop(columns=["item_id"]), "missing column.*item_id"),
        (good.assign(user=1), "unknown column.*user"),
        (good.assign(item_id=[1.5, 2, 3]), r"row 0: item_id 1\.5 is no usable id"),
        (
            good.assign(user_id=[None, 1, 2]),
            r"row 0: user_id null is no usable id \(an empty value\)",
        ),
        (good.assign(timestamp=["yesterday", 1, 2]), "row 0: timestamp 'yesterday' is no time"),
        (
            good.assign(events_label=[[2] * len(v) for v in good["events_item_id"]]),
            "row 0 event 0: events_label 2",
        ),
        (
            good.assign(events_timestamp=[v[:-1] for v in good["events_timestamp"]]),
            "row 0: events_timestamp has",
        ),
        (good[["user_id", "item_id", "timestamp"]], "row 0: no events given"),
        (good.iloc[:0], "no rows"),
        (good.iloc[[0] * 20_001], "the request has 20,001 rows; at most 20,000 per request"),
        (
            good.head(1)
            .assign(
                **{
                    c: [[v[0]] * 10_000 for v in good.head(1)[c]]
                    for c in (
                        "events_item_id",
                        "events_timestamp",
                        "events_label",
                        "events_category_id",
                    )
                    if c in good.columns
                }
            )
            .iloc[[0] * 21],
            "sends 210,000 events; at most 200,000 per request",
        ),
    ]
    first = good["events_item_id"].iloc[0]
    cases += [  # values that are no ids: their text would be hashed as one
        (good.assign(item_id=[[1], 2, 3]), r"row 0: item_id is a list \(\[1\]\), not an id"),
        (good.assign(user_id=[True, 1, 2]), r"row 0: user_id is a bool \(True\), not an id"),
        (
            good.assign(events_item_id=[[{"id": 1}, *first[1:]], *good["events_item_id"][1:]]),
            r"row 0 event 0: events_item_id is a dict \(\{'id': 1\}\), not an id",
        ),
        (good.assign(timestamp=[[AT], AT, AT]), r"row 0: timestamp is a list .*, not a time"),
    ]
    for frame, reason in cases:
        with pytest.raises(RequestError, match=reason):
            request_inputs(frame.reset_index(drop=True), with_events, layout)


def test_a_ranking_call_assembles_its_user_once(world, tmp_path, monkeypatch):
    """10,000 candidates of one user: each row's arrays are those of the row sent alone, and the
    assembly holds the user's snapshot state once, not once per candidate."""
    from components.score import features

    files = write_snapshot(world["before"], tmp_path)
    snapshot = Snapshot.load(files["count_state"], files["user_state"])
    layout = _layout(world["before"])
    user = day5(world)["user_id"].iloc[0]
    candidates = pd.DataFrame(
        {"user_id": user, "item_id": np.arange(10_000), "timestamp": AT + np.arange(10_000) % 7}
    )
    assembled = []
    real = features.model_inputs
    monkeypatch.setattr(
        features,
        "model_inputs",
        lambda cols, *a, **k: assembled.append(len(cols["ts"])) or real(cols, *a, **k),
    )
    together = request_inputs(candidates, snapshot, layout)
    held = len(snapshot.users.user_events(hash_ids([user])[0])[0])
    assert 0 < held <= layout.seq_len + layout.neg_len
    assert assembled == [len(candidates) + held]
    for i in (0, 1, 4_321, 9_999):
        alone = request_inputs(candidates.iloc[[i]].reset_index(drop=True), snapshot, layout)
        assert all(np.array_equal(together[k][i], alone[k][0]) for k in BATCH_KEYS), i


def test_string_and_integer_ids_are_the_same_ids(world, tmp_path):
    files = write_snapshot(world["before"], tmp_path)
    snapshot = Snapshot.load(files["count_state"], files["user_state"])
    requests = requests_of(world, False).head(20)
    as_text = requests.astype({"user_id": str, "item_id": str, "category_id": str}).assign(
        timestamp=[pd.Timestamp(t, unit="s", tz="UTC").isoformat() for t in requests["timestamp"]]
    )
    layout = _layout(world["before"])
    a, b = request_inputs(requests, snapshot, layout), request_inputs(as_text, snapshot, layout)
    assert all(np.array_equal(a[k], b[k]) for k in BATCH_KEYS)
    assert np.array_equal(a["user_key"], hash_ids(requests["user_id"])[0])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _post(port: int, payload: dict) -> tuple[int, str]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/invocations",
        data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_served_model_scores_raw_ids_like_evaluate(world, registered, tmp_path):
    port = _free_port()
    log = tmp_path / "serve.log"
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": os.getcwd(),
        "MLFLOW_TRACKING_URI": world["uri"],
        "TMPDIR": str(scratch),
    }
    with open(log, "w") as sink:
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "components.score.serve",
                "--model",
                f"models:/{NAME}@champion",
                "--port",
                str(port),
            ],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=2):
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"server did not start: {log.read_text()[-2000:]}")
                time.sleep(0.5)
        requests = requests_of(world, False)
        status, body = _post(port, {"dataframe_records": requests.to_dict(orient="records")})
        assert status == 200, body
        served = np.asarray(json.loads(body)["predictions"], np.float64)
        # the library's scoring of the same requests from the snapshot register wrote: the same
        # features (at the snapshot's time resolution), the checkpoint's weights
        arrays = request_inputs(
            requests,
            Snapshot.load(*write_snapshot(world["before"], tmp_path / "s").values()),
            _layout(world["before"]),
        )
        expected = sigmoid(predict_logits(load_scorer(world["checkpoint"]).model, [arrays]))
        np.testing.assert_allclose(served, expected, rtol=1e-5, atol=1e-6)
        assert np.std(served) > 0
        # a bad request: HTTP 400, one line, no stack trace, no server path
        status, body = _post(
            port, {"dataframe_records": [{"user_id": 1, "item_id": 2.5, "timestamp": AT}]}
        )
        assert status == 400
        message = json.loads(body)["message"]
        assert message == "row 0: item_id 2.5 is no usable id (a non-integral number or empty text)"
        assert (
            "Traceback" not in body and str(world["root"]) not in body and "stack_trace" not in body
        )
        assert "\n" not in message
        assert any(scratch.iterdir())  # the verified copy, while serving
        # SIGTERM (a pod stopped, a preempted job): the server stops, nothing keeps answering,
        # the verified copy is gone and the status says which signal
        server.send_signal(15)
        assert server.wait(timeout=30) == 128 + 15
        with pytest.raises(OSError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=2)
        assert not any(scratch.iterdir())
    finally:
        if server.poll() is None:
            os.killpg(server.pid, 9)
            server.wait(timeout=30)
    assert "Add type hints" not in log.read_text()


def test_make_serve_runs_from_a_plain_shell_and_stops_with_make(world, registered, tmp_path):
    """A user's shell has no venv on PATH: `make serve` must still start, answer, and stop with
    make on SIGTERM (the server and its verified copy with it)."""
    from tests.tools import start_make, user_env

    port, scratch, log = _free_port(), tmp_path / "tmp", tmp_path / "make-serve.log"
    scratch.mkdir()
    env = user_env(TMPDIR=str(scratch))
    assert str(Path(sys.executable).parent) not in env["PATH"]
    make = start_make(
        "serve",
        f"MODEL=models:/{NAME}/1",
        f"SERVE_PORT={port}",
        f"MLFLOW_TRACKING_URI={world['uri']}",
        log=log,
        env=env,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=2):
                    break
            except OSError:
                if make.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"make serve did not start: {log.read_text()[-2000:]}")
                time.sleep(0.5)
        request = requests_of(world, False).head(3)
        status, body = _post(port, {"dataframe_records": request.to_dict(orient="records")})
        assert status == 200 and len(json.loads(body)["predictions"]) == 3, body
        make.send_signal(15)  # to make alone, as `kill <pid>` does
        make.wait(timeout=60)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # nothing left answering
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=2).close()
            except OSError:
                break
            time.sleep(0.5)
        else:
            pytest.fail("the server outlived make")
        assert not any(scratch.iterdir())  # the verified copy removed
    finally:
        if make.poll() is None:
            make.kill()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(make.pid, 9)
    assert "not found" not in log.read_text()


def linked_run(link: str) -> str:
    """The run id of a version's link to a run page (``#/experiments/E/runs/R?view``)."""
    return link.split("/runs/")[1].split("?")[0]


def test_version_links_its_training_and_evaluation_runs(world, registered, tmp_path):
    from mlflow import MlflowClient

    client = MlflowClient(world["uri"], registry_uri=world["uri"])
    version = client.get_model_version(NAME, str(registered["registration"].version))
    training = json.loads((world["checkpoint"].parent / "train_summary.json").read_text())[
        "mlflow_run_id"
    ]
    run = client.get_run(training)
    assert run.info.status == "FINISHED" and "val_auc" in run.data.metrics
    link = f"#/experiments/{run.info.experiment_id}/runs/{training}?workflowType=machine_learning"
    assert training and version.tags["training_run"] == link
    assert f"[training run]({link})" in version.description
    # the version's model is the one its training run lists among its models
    assert [f"models:/{m.model_id}" for m in run.outputs.model_outputs] == [version.source]
    model = client.get_logged_model(run.outputs.model_outputs[0].model_id)
    assert model.source_run_id == training and model.experiment_id == run.info.experiment_id
    # tags a person scans: one short line each, no JSON
    assert {"blessed", "decision", "test_auc", "window", "plan", "training_run"} <= set(
        version.tags
    )
    assert not [k for k, v in version.tags.items() if len(v) > 160 or v[:1] in "[{"]
    assert version.tags["window"] == "{start}..{end}".format(
        **json.loads((world["before"] / "meta.json").read_text())["window"]
    )
    evaluation = client.get_run(linked_run(version.tags["evaluation_run"]))
    assert evaluation.data.metrics["test_auc"] == pytest.approx(registered["metrics"].test_auc)
    # named by the day it judged, so that days tell apart in the experiment's run list
    assert evaluation.info.run_name == f"evaluate-{DAY5}"
    assert evaluation.data.tags["blessed"] == "true"
    logged = {a.path for a in client.list_artifacts(evaluation.info.run_id, "evaluation")}
    assert {
        "evaluation/roc.png",
        "evaluation/calibration.png",
        "evaluation/report.md",
        "evaluation/history.png",
        "evaluation/metrics.json",
    } <= logged
    # the report MLflow shows as a page, its plots inline
    page = client.download_artifacts(evaluation.info.run_id, "report.html", str(tmp_path))
    page = Path(page).read_text()
    assert page.count('src="data:image/png;base64,') == 3 and "<table>" in page
    # predict has type hints: MLflow's advice to add some reaches nobody
    assert not [w for w in registered["warnings"] if "type hints" in w]
    import mlflow.pyfunc

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = mlflow.pyfunc.load_model(f"models:/{NAME}@champion")
    assert not [w for w in caught if "type hints" in str(w.message)]
    assert model.predict(requests_of(world, False).head(4)).shape == (4,)


def test_model_requirements_carry_no_local_versions(world, registered):
    import mlflow

    folder = mlflow.artifacts.download_artifacts(
        f"models:/{NAME}@champion", tracking_uri=world["uri"]
    )
    lines = [
        line for line in (Path(folder) / "requirements.txt").read_text().split() if "==" in line
    ]
    assert {line.split("==")[0] for line in lines} >= {
        "mlflow",
        "torch",
        "numpy",
        "pandas",
        "pyarrow",
    }
    assert not [line for line in lines if "+" in line]


def test_batch_scoring_of_a_raw_day_matches_the_served_model(world, registered, tmp_path, capsys):
    import mlflow.pyfunc

    from components.score.__main__ import main

    day = world["raw"][DAY5]
    bad = pd.DataFrame(
        {
            "user_id": [None, 10**12 + 1],
            "item_id": [5, 1.5],
            "category_id": [1, 1],
            "timestamp": [AT, AT],
            "label": [0, 1],
        }
    )
    raw = tmp_path / "raw"
    write_day(raw, DAY5, pd.concat([day, bad], ignore_index=True).astype({"item_id": "float64"}))
    out = tmp_path / "scores" / "day.parquet"
    argv = [
        "--raw",
        str(raw),
        "--date",
        DAY5.isoformat(),
        "--model",
        f"models:/{NAME}@champion",
        "--tracking-uri",
        world["uri"],
        "--out",
        str(out),
        "--json",
    ]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["rows"] == {
        "read": len(day) + 2,
        "scored": len(day),
        "quarantined_total": 2,
        "quarantined": {"bad_item_id": 1, "null_user_id": 1},
    }
    scores = pd.read_parquet(out)
    assert scores["row"].tolist() == list(range(len(day)))
    online = mlflow.pyfunc.load_model(f"models:/{NAME}@champion").predict(
        day[["user_id", "item_id", "category_id", "timestamp"]]
    )
    np.testing.assert_array_equal(scores["score"].to_numpy(), online)
    # ids as the file holds them (a column with a null is float here)
    assert [int(float(u)) for u in scores["user_id"]] == day["user_id"].tolist()
    assert 0.0 < result["auc"] < 1.0
    # a day that is not there: one line, bad input
    assert main([*argv[:2], "--date", "2030-01-01", *argv[4:-1]]) == Exit.USAGE
    assert (
        capsys.readouterr().err.strip()
        == f"score: error: {str(raw)!r}: no folder 'dt=2030-01-01' to score"
    )


def test_batch_scores_keep_the_ids_as_they_came_and_refuse_a_day_trained_on(
    world, registered, tmp_path, capsys
):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from components.score.__main__ import main

    raw, out = tmp_path / "raw", tmp_path / "day.parquet"
    frame = day5(world)
    write_day(raw, DAY5, frame)  # int64 ids beyond int32: a user's join key

    def score(day: dt.date) -> int:
        return main(
            ["--raw", str(raw), "--date", day.isoformat(), "--model", f"models:/{NAME}@champion"]
            + ["--tracking-uri", world["uri"], "--out", str(out), "--json"]
        )

    assert score(DAY5) == 0
    capsys.readouterr()
    scores = pq.read_table(out)
    for column in ("user_id", "item_id", "category_id"):
        assert scores.schema.field(column).type == pa.int64(), column
    rows = scores["row"].to_numpy()
    assert scores["user_id"].to_pylist() == frame["user_id"].iloc[rows].tolist()
    # a day whose files disagree on an id's type: text, as the ids print
    write_day(raw, DAY5, frame.astype({"user_id": str}).head(5), name="part-00001")
    assert score(DAY5) == 0
    capsys.readouterr()
    mixed = pq.read_table(out)
    assert mixed.schema.field("user_id").type == pa.string()
    assert set(mixed["user_id"].to_pylist()) == {str(u) for u in frame["user_id"]}
    assert mixed.schema.field("item_id").type == pa.int64()  # those agree: kept
    # a day of the version's own window: its snapshot already holds that day's later events
    inside = START + dt.timedelta(days=3)
    write_day(raw, inside, world["raw"][inside])
    assert score(inside) == Exit.USAGE
    assert capsys.readouterr().err.strip() == (
        f"score: error: {inside} is inside models:/{NAME}/1's training window (up to {inside}): "
        f"a version scores the days after its window; score {DAY5} or later, or a version "
        f"trained before {inside}"
    )


def test_a_moved_registry_still_serves_its_models(world, registered, tmp_path):
    import shutil

    import mlflow.pyfunc

    from components.common.tracking import connect

    original = world["root"] / "mlruns"
    moved = tmp_path / "elsewhere" / "mlruns"
    shutil.copytree(original, moved)
    hidden = original.with_name("mlruns-away")
    original.rename(hidden)  # the old folder is gone: nothing may still point into it
    try:
        uri = sqlite_uri(moved)
        client = connect(uri)
        experiment = client.get_experiment_by_name("dailyrec-evaluate")
        assert experiment.artifact_location.startswith(moved.as_uri())
        model = mlflow.pyfunc.load_model(f"models:/{NAME}@champion")
        assert model.predict(requests_of(world, False).head(3)).shape == (3,)
        run_id = linked_run(client.get_model_version(NAME, "1").tags["evaluation_run"])
        assert {a.path for a in client.list_artifacts(run_id, "evaluation")} >= {
            "evaluation/roc.png"
        }
    finally:
        hidden.rename(original)


def test_a_version_without_user_state_scores_requests_that_send_them(world, registered):
    import mlflow.pyfunc

    from components.score.protocol import BadRequest

    out = world["root"] / "evaluate"
    register(
        RegisterConfig(
            checkpoint=str(world["checkpoint"]),
            metrics=str(out / "metrics.json"),
            decision=str(out / "decision.json"),
            model_name="lean",
            tracking_uri=world["uri"],
            data=str(world["before"]),
            user_state=False,
        )
    )
    lean = mlflow.pyfunc.load_model("models:/lean@champion")
    full = mlflow.pyfunc.load_model(f"models:/{NAME}@champion")
    folder = Path(
        mlflow.artifacts.download_artifacts("models:/lean@champion", tracking_uri=world["uri"])
    )
    assert (folder / "artifacts" / "count_state.npz").is_file()
    assert not (folder / "artifacts" / "user_state.npz").exists()
    with pytest.raises(
        BadRequest, match="^row 0: no events given, and this model version carries no snapshot"
    ):
        lean.predict(requests_of(world, False).head(2))
    # sent every earlier event, the lean version scores what the dataset's rows hold
    with_events = requests_of(world, True)
    arrays = request_inputs(
        with_events,
        Snapshot.load(folder / "artifacts" / "count_state.npz"),
        _layout(world["before"]),
    )
    keys = ("user_key", "ts", "target_item", "target_cat")
    label = day5(world)["label"].to_numpy()
    lean_p = np.asarray(lean.predict(with_events), np.float64).ravel()
    ours = _sorted({**{k: arrays[k] for k in keys}, "p": lean_p}, label, arrays["dense"])
    batch = _dataset_rows(world["after"])
    expected = sigmoid(predict_logits(load_scorer(world["checkpoint"]).model, [batch]))
    theirs = _sorted({**{k: batch[k] for k in keys}, "p": expected}, batch["label"], batch["dense"])
    np.testing.assert_allclose(ours["p"], theirs["p"], rtol=1e-5, atol=1e-6)
    assert full.predict(requests_of(world, False)) is not None


def test_a_model_refuses_to_score_ids_hashed_under_another_key(world, registered, monkeypatch):
    """The version records its id key by fingerprint: under another key every id would land in
    another bucket and the scores would be noise, so it refuses to load, naming both keys."""
    import mlflow.pyfunc

    from components.common import hashing

    assert hashing.is_public_key()
    trained_under = hashing.key_fingerprint()
    monkeypatch.setenv(hashing.KEY_ENV, "another-deployment-s-secret")
    with pytest.raises(Exception, match=rf"hashes ids under the key {trained_under}") as err:
        mlflow.pyfunc.load_model(f"models:/{NAME}@champion")
    assert hashing.key_fingerprint() in str(err.value) and "DAILYREC_ID_KEY" in str(err.value)
    assert "another-deployment-s-secret" not in str(err.value)
    monkeypatch.delenv(hashing.KEY_ENV)
    mlflow.pyfunc.load_model(f"models:/{NAME}@champion")  # under its own key it loads
    client = mlflow.MlflowClient(world["uri"])
    version = client.get_model_version_by_alias(NAME, "champion")
    assert version.tags.get("dailyrec_id_key") == trained_under


def test_the_mlflow_pages_render_in_a_browser_in_the_model_training_view(
    world, registered, tmp_path
):
    """What a person sees, from headless Chromium: the training run named by its day in MLflow's
    Model training view (not the GenAI one), and the version with its alias."""
    from pipelines.screenshots import take

    require_tool("chromium", "apt-get install chromium (make test-tools does as root)")
    shown = take(world["uri"], tmp_path, NAME, names=("train-run", "version"))
    assert set(shown) == {"train-run", "version"}
    for page in shown.values():
        assert (tmp_path / page["png"]).stat().st_size > 20_000  # a page, not a blank
    run = shown["train-run"]["text"]
    assert f"train-{(START + dt.timedelta(days=3)).isoformat()}" in run
    assert "Model registry" in run and "Sessions" not in run  # Model training's menu, not GenAI's
    version = shown["version"]["text"]
    assert "Version 1" in version and "champion" in version
