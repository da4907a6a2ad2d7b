"""Retention: a daily schedule keeps its storage root bounded and never removes what is needed."""

from __future__ import annotations

import json
import os

import pytest
import torch

from components.common.retention import DAY_S, apply_retention, tree_bytes
from components.common.run_record import RunRecord
from components.common.run_summary import RunSummary
from components.common.runs import claim_run_dir, point_latest
from tests.run_records import run_record

START = 1_800_000_000.0
RUN_BYTES, DATASET_BYTES = 200_000, 1_000_000


def day_of_runs(root, day: int, finished: bool = True) -> str:
    """What one daily run leaves: a run folder (plan, checkpoint, summary) and its dataset."""
    when = START + day * DAY_S
    rid = f"run-{day:02d}"
    data = root / "datasets" / f"2026-01-{day + 1:02d}-key{day}"
    data.mkdir(parents=True)
    (data / "meta.json").write_text("{}")
    (data / "train.npy").write_bytes(b"\0" * DATASET_BYTES)
    os.utime(data / "meta.json", (when, when))
    folder = claim_run_dir(root / "runs" / rid, f"kfp-{day}")
    owner = json.loads((folder / "owner.json").read_text())
    (folder / "owner.json").write_text(json.dumps({**owner, "claimed_at": when}))
    run_record(folder, rid, str(data))
    (folder / "train").mkdir()
    torch.save({"w": torch.zeros(RUN_BYTES // 4)}, folder / "train" / "best.pt")
    point_latest(data)
    if finished:
        RunSummary(rid, "SUCCEEDED").write(folder)
        os.utime(folder / "summary.json", (when + 3600, when + 3600))
    return rid


def footprint(root) -> int:
    return tree_bytes(root / "runs") + tree_bytes(root / "datasets")


def test_thirty_days_stay_bounded_and_the_champions_lineage_stays_loadable(tmp_path):
    root = tmp_path
    (root / "runs").mkdir()
    (root / "runs" / "mlflow.db").write_bytes(b"registry")  # never a candidate
    (root / "runs" / "artifacts" / "1").mkdir(parents=True)
    (root / "runs" / "artifacts" / "1" / "model.bin").write_bytes(b"m" * 1000)
    champion, previous, sizes, freed = "run-03", None, [], 0
    for day in range(30):
        rid = day_of_runs(root, day)
        if day == 20:  # a new champion; the old one becomes @previous
            champion, previous = rid, champion
        protected = {champion} | ({previous} if previous else set())
        report = apply_retention(
            root, 7, protected, current_run=rid, now=START + day * DAY_S + 7200
        )
        freed += report.freed_bytes
        sizes.append(footprint(root))
        assert not report.errors
    per_day = RUN_BYTES + DATASET_BYTES
    # at most 8 days (7 kept plus today) and the two protected lineages, whatever the day
    assert max(sizes) <= (8 + 2) * per_day * 1.1
    assert sizes[-1] < 30 * per_day / 2 and freed > 15 * per_day
    for rid in (champion, previous):
        folder = root / "runs" / rid
        assert torch.load(folder / "train" / "best.pt", weights_only=True)["w"].numel() > 0
        data = RunRecord.read(folder).data_dir
        assert (root / "datasets" / os.path.basename(data) / "meta.json").is_file()
    assert (root / "runs" / "mlflow.db").read_bytes() == b"registry"
    assert (root / "runs" / "artifacts" / "1" / "model.bin").is_file()
    assert (root / "datasets" / "latest").resolve().name.startswith("2026-01-30")
    assert not (root / "runs" / "run-10").exists() and (root / "runs" / "run-25").exists()


def test_a_live_run_is_never_removed_and_a_dead_one_is_judged_by_its_claim(tmp_path):
    day_of_runs(tmp_path, 0, finished=False)  # dead: claimed 30 days before the pass
    day_of_runs(tmp_path, 29, finished=False)  # live: claimed an hour ago, no summary yet
    report = apply_retention(tmp_path, 7, now=START + 29 * DAY_S + 3600)
    assert report.removed_runs == ["run-00"]
    assert (tmp_path / "runs" / "run-29").is_dir()
    assert any(d.endswith("key29") for d in os.listdir(tmp_path / "datasets"))


def test_retention_off_removes_nothing(tmp_path):
    for day in range(3):
        day_of_runs(tmp_path, day)
    before = footprint(tmp_path)
    report = apply_retention(tmp_path, 0, now=START + 400 * DAY_S)
    assert footprint(tmp_path) == before and report.line().startswith("retention off")


@pytest.mark.parametrize("keep", [1, 3])
def test_only_what_the_pipeline_wrote_is_a_candidate(tmp_path, keep):
    day_of_runs(tmp_path, 0)
    (tmp_path / "runs" / "notes").mkdir()  # a folder without run.json / owner.json
    (tmp_path / "datasets" / "scratch").mkdir()  # a folder without meta.json
    stray = tmp_path / "runs" / "notes" / "x.txt"
    stray.write_text("mine")
    old = START - 100 * DAY_S
    os.utime(stray, (old, old))
    apply_retention(tmp_path, keep, now=START + 100 * DAY_S)
    assert stray.is_file() and (tmp_path / "datasets" / "scratch").is_dir()
    assert not (tmp_path / "runs" / "run-00").exists()
