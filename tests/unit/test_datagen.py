"""Synthetic event generator: raw contract, truth sidecar, determinism, planted signal, CLI."""

from __future__ import annotations

import datetime as dt
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from components.common import schema
from components.common.metrics import roc_auc
from components.common.schema import datagen_summary
from components.datagen import generator
from components.datagen.__main__ import main
from components.datagen.config import DatagenConfig
from components.datagen.generator import generate

REPO_ROOT = Path(__file__).resolve().parents[2]
SMALL = dict(
    days=3,
    users=400,
    items=1500,
    categories=40,
    events_per_day=6000,
    seed=11,
    start_date=dt.date(2026, 3, 1),
    rows_per_file=2500,
)
TINY = dict(days=2, users=100, items=300, categories=10, events_per_day=1500, seed=5)


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("small") / "raw"
    return out, generate(DatagenConfig(out=out, **SMALL))


def read_day(out: Path, date: str, truth: bool = False) -> pd.DataFrame:
    folder = out / (generator.TRUTH_DIR if truth else "") / f"dt={date}"
    return pd.concat(
        [pd.read_parquet(f) for f in sorted(folder.glob("part-*.parquet"))], ignore_index=True
    )


def pairwise_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """AUC by comparing every positive with every negative (ties count half)."""
    pos, neg = scores[labels == 1], scores[labels == 0]
    greater = (pos[:, None] > neg[None, :]).sum()
    ties = (pos[:, None] == neg[None, :]).sum()
    return (greater + 0.5 * ties) / (len(pos) * len(neg))


def data_files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*.parquet"))}


# --- the raw contract ----------------------------------------------------------


def test_layout_columns_and_dtypes(small):
    out, summary = small
    dates = [(SMALL["start_date"] + dt.timedelta(days=d)).isoformat() for d in range(SMALL["days"])]
    assert sorted(p.name for p in out.glob("dt=*")) == [f"dt={d}" for d in dates]
    assert list(summary["rows_per_day"]) == dates
    for date in dates:
        parts = sorted(p.name for p in (out / f"dt={date}").iterdir())
        # 6000 rows at 2500 per file: two full parts and a remainder.
        assert parts == ["part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]
        truth_parts = sorted(p.name for p in (out / "_truth" / f"dt={date}").iterdir())
        assert truth_parts == parts
        for part in parts:
            raw_schema = pq.read_schema(out / f"dt={date}" / part)
            assert raw_schema.names == list(schema.CONTRACT_COLUMNS)
            assert [raw_schema.field(c).type for c in raw_schema.names] == [
                pa.int64(),
                pa.int64(),
                pa.int64(),
                pa.int64(),
                pa.int8(),
            ]
            assert pq.read_schema(out / "_truth" / f"dt={date}" / part).names == ["p"]
            assert (
                pq.read_schema(out / "_truth" / f"dt={date}" / part).field("p").type == pa.float32()
            )


def test_rows_sorted_inside_their_day_with_valid_values(small):
    out, _ = small
    for folder in sorted(out.glob("dt=*")):
        day = schema.parse_day_folder(folder.name)
        start = schema.day_start_epoch(day)
        previous_last = -math.inf
        for part in sorted(folder.glob("part-*.parquet")):
            table = pq.read_table(part)
            ts = table.column(schema.TIMESTAMP).to_numpy()
            assert len(ts) <= SMALL["rows_per_file"]
            assert np.all(np.diff(ts) >= 0), f"{part} not sorted by timestamp"
            assert ts[0] >= previous_last  # parts follow each other in time too
            previous_last = ts[-1]
            assert ts.min() >= start and ts.max() < start + schema.SECONDS_PER_DAY
            assert set(np.unique(table.column(schema.LABEL).to_numpy())) <= {0, 1}
            users = table.column(schema.USER_ID).to_numpy()
            items = table.column(schema.ITEM_ID).to_numpy()
            cats = table.column(schema.CATEGORY_ID).to_numpy()
            assert users.min() >= 1 and users.max() <= SMALL["users"]
            assert items.min() >= 1 and items.max() <= SMALL["items"]
            assert cats.min() >= 1 and cats.max() <= SMALL["categories"]


def test_item_always_has_the_same_category(small):
    out, _ = small
    frame = pd.concat([read_day(out, d) for d in small[1]["rows_per_day"]])
    assert frame.groupby(schema.ITEM_ID)[schema.CATEGORY_ID].nunique().max() == 1


def test_truth_sidecar_is_row_aligned(small):
    out, _ = small
    for raw_part in sorted(out.glob("dt=*/part-*.parquet")):
        truth_part = out / "_truth" / raw_part.parent.name / raw_part.name
        raw_meta, truth_meta = pq.read_metadata(raw_part), pq.read_metadata(truth_part)
        assert raw_meta.num_rows == truth_meta.num_rows
        p = pq.read_table(truth_part).column("p").to_numpy()
        assert np.all((p > 0) & (p < 1))


def test_row_groups_are_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(generator, "ROW_GROUP_ROWS", 400)
    out = tmp_path / "raw"
    generate(DatagenConfig(out=out, **{**TINY, "days": 1, "rows_per_file": 1000}))
    for part in sorted(out.rglob("part-*.parquet")):
        meta = pq.read_metadata(part)
        sizes = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
        assert max(sizes) <= 400
        assert meta.num_rows <= 1000


# --- _datagen.json ------------------------------------------------------------------


def test_summary_matches_files(small):
    out, summary = small
    assert json.loads((out / "_datagen.json").read_text()) == summary
    assert summary["parameters"]["seed"] == SMALL["seed"]
    assert summary["parameters"]["start_date"] == "2026-03-01"
    assert summary["rows_total"] == sum(summary["rows_per_day"].values())
    assert summary["rows_per_second"] > 0
    for date, rows in summary["rows_per_day"].items():
        raw, truth = read_day(out, date), read_day(out, date, truth=True)
        assert len(raw) == rows == SMALL["events_per_day"] == len(truth)
        assert summary["parts_per_day"][date] == len(list((out / f"dt={date}").glob("*.parquet")))
        labels = raw[schema.LABEL].to_numpy()
        assert summary["click_rate"][date] == pytest.approx(labels.mean(), abs=1e-6)
        # The generator's rank-based AUC against a brute-force one on the stored p.
        expected = pairwise_auc(truth["p"].to_numpy(), labels)
        assert summary["oracle_auc"][date] == pytest.approx(expected, abs=2e-6)


def test_popularity_auc_is_the_item_appeal_auc(small):
    out, summary = small
    # The world is the first thing drawn from the seeded generator, so it can be rebuilt.
    config = DatagenConfig(out=out, **SMALL)
    world = generator._World(config, np.random.default_rng(config.seed))
    for date, reported in summary["popularity_auc"].items():
        raw = read_day(out, date)
        appeal = world.item_appeal[raw[schema.ITEM_ID].to_numpy() - 1]
        assert reported == pytest.approx(
            pairwise_auc(appeal, raw[schema.LABEL].to_numpy()), abs=2e-6
        )


# --- realism and the planted signal ------------------------------------------------------


@pytest.mark.parametrize("target", [0.03, 0.08, 0.3])
def test_click_rate_follows_target(tmp_path, target):
    summary = generate(
        DatagenConfig(
            out=tmp_path / "raw", **{**TINY, "events_per_day": 5000, "click_rate": target}
        )
    )
    rates = list(summary["click_rate"].values())
    overall = np.mean(rates)
    # Binomial noise on 10k rows is ~0.003-0.005; calibration itself is much tighter.
    assert abs(overall - target) < max(0.15 * target, 0.006)


def test_oracle_auc_is_a_ceiling_well_above_popularity(small):
    _, summary = small
    oracle = np.array(list(summary["oracle_auc"].values()))
    popularity = np.array(list(summary["popularity_auc"].values()))
    assert np.all((oracle > 0.6) & (oracle < 0.95)), oracle
    assert np.all(popularity < oracle - 0.05), (oracle, popularity)


@pytest.fixture(scope="module")
def with_previous_click(small) -> pd.DataFrame:
    """All rows per user in time order, with the user's previous click as a model sees it."""
    out, summary = small
    frame = pd.concat([read_day(out, d) for d in summary["rows_per_day"]], ignore_index=True)
    frame = frame.sort_values([schema.USER_ID, schema.TIMESTAMP], kind="stable")
    clicks = frame.where(frame[schema.LABEL] == 1)
    by_user = frame[schema.USER_ID]
    for column in (schema.ITEM_ID, schema.CATEGORY_ID, schema.TIMESTAMP):
        frame[f"previous_{column}"] = (
            clicks[column].groupby(by_user).transform(lambda s: s.shift().ffill())
        )
    return frame


def test_recent_same_category_click_lifts_ctr(with_previous_click):
    """The planted recency effect, net of the (history-independent) hidden interest.

    Hidden interests alone make a same-category exposure likelier to be clicked at
    any age; the recency-weighted term makes that lift larger when the click is fresh.
    """
    frame = with_previous_click
    label = frame[schema.LABEL]
    same = frame[schema.CATEGORY_ID] == frame["previous_category_id"]
    age = frame[schema.TIMESTAMP] - frame["previous_timestamp"]
    recent, old = age < 3600, age > 6 * 3600

    def lift(when):
        return label[same & when].mean() / label[~same & when].mean()

    assert lift(recent) > 1.2 * lift(old), (lift(recent), lift(old))


def test_repeat_of_a_clicked_item_lifts_ctr(with_previous_click):
    frame = with_previous_click
    label = frame[schema.LABEL]
    same_item = frame[schema.ITEM_ID] == frame["previous_item_id"]
    same_category_other_item = (
        frame[schema.CATEGORY_ID] == frame["previous_category_id"]
    ) & ~same_item
    # Without the repeat effect this ratio is ~1.0-1.35 (clicked items have higher appeal).
    assert label[same_item].mean() > 1.6 * label[same_category_other_item].mean()


def test_hidden_interest_lifts_ctr_on_favourite_categories(small):
    out, summary = small
    config = DatagenConfig(out=out, **SMALL)
    world = generator._World(config, np.random.default_rng(config.seed))
    first_day = read_day(out, next(iter(summary["rows_per_day"])))  # before any drift
    users = first_day[schema.USER_ID].to_numpy() - 1
    categories = first_day[schema.CATEGORY_ID].to_numpy() - 1
    favourite = (world.favourite_categories[users] == categories[:, None]).any(axis=1)
    label = first_day[schema.LABEL]
    # Without the interest term this ratio is ~1.0-1.3 (favourites are also themes).
    assert label[favourite].mean() > 1.5 * label[~favourite].mean()


def test_evening_busier_than_night(small):
    out, summary = small
    frame = pd.concat([read_day(out, d) for d in summary["rows_per_day"]], ignore_index=True)
    hour = (frame[schema.TIMESTAMP] % schema.SECONDS_PER_DAY) // 3600
    assert (hour.between(18, 22)).sum() > 3 * (hour.between(2, 6)).sum()


# --- determinism and id formats ----------------------------------------------------------


def test_same_seed_same_bytes_other_seed_differs(tmp_path):
    first = generate(DatagenConfig(out=tmp_path / "a", **TINY))
    second = generate(DatagenConfig(out=tmp_path / "b", **TINY))
    other = generate(DatagenConfig(out=tmp_path / "c", **{**TINY, "seed": TINY["seed"] + 1}))
    files_a, files_b, files_c = (data_files(tmp_path / n) for n in "abc")
    assert len(files_a) == 2 * TINY["days"]
    assert files_a == files_b
    assert files_a.keys() == files_c.keys()
    assert all(files_a[name] != files_c[name] for name in files_a)
    timing = {"seconds", "rows_per_second", "phase_seconds"}
    assert {k: v for k, v in first.items() if k not in timing} == {
        k: v for k, v in second.items() if k not in timing
    }
    assert first["oracle_auc"] != other["oracle_auc"]


def test_str_ids_are_the_int_ids_with_prefixes(tmp_path):
    generate(DatagenConfig(out=tmp_path / "int", **TINY))
    generate(DatagenConfig(out=tmp_path / "str", **{**TINY, "id_format": "str"}))
    for part in sorted((tmp_path / "int").glob("dt=*/part-*.parquet")):
        as_int = pq.read_table(part)
        as_str = pq.read_table(tmp_path / "str" / part.relative_to(tmp_path / "int"))
        for column, prefix in (("user_id", "u"), ("item_id", "i"), ("category_id", "c")):
            assert as_str.schema.field(column).type == pa.string()
            expected = [f"{prefix}{v}" for v in as_int.column(column).to_pylist()]
            assert as_str.column(column).to_pylist() == expected
        for column in (schema.TIMESTAMP, schema.LABEL):
            assert as_str.column(column).equals(as_int.column(column))


# --- atomic output -----------------------------------------------------------------


def test_rerun_replaces_previous_output(tmp_path):
    out = tmp_path / "raw"
    generate(DatagenConfig(out=out, **{**TINY, "days": 2}))
    generate(DatagenConfig(out=out, **{**TINY, "days": 1, "start_date": dt.date(2026, 5, 1)}))
    assert sorted(p.name for p in out.glob("dt=*")) == ["dt=2026-05-01"]
    assert sorted(p.name for p in (out / "_truth").iterdir()) == ["dt=2026-05-01"]
    assert not list(tmp_path.glob("raw.tmp-*"))


def test_refuses_to_replace_a_foreign_folder(tmp_path):
    out = tmp_path / "precious"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    with pytest.raises(ValueError, match="refusing"):
        generate(DatagenConfig(out=out, **TINY))
    assert (out / "notes.txt").read_text() == "keep me"


def test_failed_run_leaves_no_output(tmp_path, monkeypatch):
    out = tmp_path / "raw"
    real_day = generator._Simulator.day
    calls = []

    def fail_on_second_day(self, day, writer):
        calls.append(day)
        if len(calls) == 2:
            raise RuntimeError("killed")
        return real_day(self, day, writer)

    monkeypatch.setattr(generator._Simulator, "day", fail_on_second_day)
    with pytest.raises(RuntimeError, match="killed"):
        generate(DatagenConfig(out=out, **TINY))
    assert len(calls) == 2
    assert list(tmp_path.iterdir()) == []


# --- config validation and CLI ---------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("days", 0),
        ("users", -1),
        ("items", 0),
        ("events_per_day", 0),
        ("categories", 0),
        ("rows_per_file", 0),
        ("users", 2.5),
        ("days", True),
        ("seed", -1),
        ("click_rate", 0.0),
        ("click_rate", 1.0),
        ("click_rate", "high"),
        ("id_format", "uuid"),
        ("start_date", "2026-13-01"),
        ("start_date", 20260101),
        ("out", ""),
        ("categories", 400),  # more categories than items
        ("days", 10**7),  # runs past year 9999
    ],
)
def test_config_rejects_bad_values_naming_the_field(tmp_path, field, value):
    kwargs = {"out": tmp_path / "raw", **TINY, field: value}
    with pytest.raises(ValueError, match=field):
        DatagenConfig(**kwargs)


def test_config_accepts_iso_date_string(tmp_path):
    config = DatagenConfig(
        out=str(tmp_path / "raw"), **{**TINY, "start_date": "2026-02-27", "days": 3}
    )
    assert config.start_date == dt.date(2026, 2, 27)
    assert config.dates[-1] == dt.date(2026, 3, 1)
    assert isinstance(config.out, Path)


def test_cli_writes_dataset_and_prints_summary(tmp_path, capsys):
    out = tmp_path / "raw"
    code = main(
        [
            "--out",
            str(out),
            "--days",
            "2",
            "--users",
            "50",
            "--items",
            "200",
            "--categories",
            "8",
            "--events-per-day",
            "800",
            "--seed",
            "3",
            "--start-date",
            "2026-02-01",
            "--click-rate",
            "0.2",
            "--id-format",
            "str",
            "--rows-per-file",
            "500",
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "1,600 rows" in printed and "rows/s" in printed and "oracle AUC" in printed
    summary = json.loads(datagen_summary(out).read_text())
    assert summary["parameters"]["id_format"] == "str"
    assert summary["parts_per_day"] == {"2026-02-01": 2, "2026-02-02": 2}


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["--users", "0"], "users"),
        (["--click-rate", "1.5"], "click_rate"),
        (["--days", "two"], "--days"),
        (["--start-date", "2026-02-30"], "--start-date"),
        (["--id-format", "hex"], "--id-format"),
    ],
)
def test_cli_bad_arguments_fail_with_one_line(tmp_path, capsys, args, reason):
    try:
        code = main(["--out", str(tmp_path / "raw"), *args])
    except SystemExit as exit_:
        code = exit_.code
    assert code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert reason in err and "Traceback" not in err
    assert not (tmp_path / "raw").exists()


def test_cli_process_exit_code_on_bad_input(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "components.datagen",
            "--out",
            str(tmp_path / "raw"),
            "--items",
            "5",
            "--categories",
            "10",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "categories" in result.stderr
    assert "Traceback" not in result.stderr


# --- building blocks ------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.booleans()), min_size=1, max_size=40))
def test_roc_auc_matches_pairwise_with_ties(pairs):
    scores = np.array([s for s, _ in pairs], dtype=np.float64)
    labels = np.array([y for _, y in pairs], dtype=np.int8)
    if labels.min() == labels.max():
        assert math.isnan(roc_auc(scores, labels))
    else:
        assert roc_auc(scores, labels) == pytest.approx(pairwise_auc(scores, labels), abs=1e-12)


def test_click_history_keeps_latest_clicks_first():
    rng = np.random.default_rng(0)
    n_users, length = 6, generator.HISTORY_LENGTH
    history = generator._ClickHistory(n_users)
    reference: list[list[tuple[int, int]]] = [[] for _ in range(n_users)]
    clock = 0
    for n_clicks in (0, 3, 25, 1, 40):
        users = rng.integers(0, n_users, n_clicks)
        items = rng.integers(0, 1000, n_clicks).astype(np.int32)
        times = clock + np.arange(
            n_clicks, dtype=np.int64
        )  # time-ordered, as the generator records
        clock += n_clicks
        history.record(users, items, items % 7, times)
        for u, i, t in zip(users, items, times, strict=True):
            reference[u].insert(0, (int(i), int(t)))
        for u in range(n_users):
            kept = reference[u][:length]
            assert history.count[u] == len(kept)
            assert history.items[u, : len(kept)].tolist() == [i for i, _ in kept]
            assert history.times[u, : len(kept)].tolist() == [t for _, t in kept]
            assert history.categories[u, : len(kept)].tolist() == [i % 7 for i, _ in kept]
            assert np.all(history.items[u, len(kept) :] == generator.NO_CLICK)


def test_history_signal_decays_with_age():
    history = generator._ClickHistory(1)
    history.record(
        np.array([0]), np.array([42], np.int32), np.array([3], np.int32), np.array([1000])
    )
    users = np.zeros(4, dtype=np.int32)
    items = np.array([42, 42, 7, 7], np.int32)
    categories = np.array([3, 3, 3, 5], np.int32)
    timestamps = np.array([1000, 1000 + 6 * 3600, 1000, 1000])
    affinity, repeat = history.signal(users, items, categories, timestamps)
    assert affinity[0] == pytest.approx(1.0) and repeat[0] == pytest.approx(1.0)
    assert affinity[1] == pytest.approx(math.exp(-6 * 3600 / generator.CATEGORY_RECENCY_TAU_S))
    assert repeat[1] == pytest.approx(math.exp(-6 * 3600 / generator.REPEAT_RECENCY_TAU_S))
    assert affinity[2] == pytest.approx(1.0) and repeat[2] == 0.0  # same category, other item
    assert affinity[3] == 0.0 and repeat[3] == 0.0


def test_append_days_keeps_existing_days_byte_identical(tmp_path):
    out = tmp_path / "raw"
    generate(
        DatagenConfig(out=out, days=2, users=50, items=80, categories=5, events_per_day=300, seed=4)
    )
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*.parquet")}
    assert main(["--out", str(out), "--append-days", "1"]) == 0
    after = {p.relative_to(out): p.read_bytes() for p in out.rglob("*.parquet")}
    assert all(after[path] == data for path, data in before.items())
    new_days = {path.parts[-2] for path in set(after) - set(before)}
    assert new_days == {"dt=2026-01-03"}
    assert json.loads(datagen_summary(out).read_text())["parameters"]["days"] == 3
    with pytest.raises(ValueError, match="_datagen.json"):
        generator.extended(tmp_path / "nothing", 1)
