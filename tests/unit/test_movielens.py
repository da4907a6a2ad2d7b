"""MovieLens-100K as raw day folders (benchmarks.movielens): the mapping, the digests, the
atomic and idempotent write, on a small wheel built here (the real one: tests/integration)."""

from __future__ import annotations

import datetime as dt
import hashlib
import zipfile

import pandas as pd
import pytest

from benchmarks import movielens

RATINGS = (
    "user_id:token\titem_id:token\trating:float\ttimestamp:float\n"
    # 1998-01-01 23:59:59 and 1998-01-02 00:00:00 UTC: two days
    "7\t10\t4\t883699199\n"
    "7\t11\t3\t883699200\n"
    "8\t12\t5\t883699200\n"
    "8\t10\t1\t883702800\n"
)
MOVIES = (
    "item_id:token\tmovie_title:token_seq\trelease_year:token\tclass:token_seq\n"
    "10\tA\t1995\tComedy Drama\n"
    "11\tB\t1996\tunknown\n"
    "12\tC\t1997\tSci-Fi Thriller\n"
)


@pytest.fixture
def wheel(tmp_path, monkeypatch):
    files = {movielens.RATINGS: RATINGS.encode(), movielens.MOVIES: MOVIES.encode()}
    monkeypatch.setattr(
        movielens, "SHA256", {k: hashlib.sha256(v).hexdigest() for k, v in files.items()}
    )
    path = tmp_path / "recbole-1.2.1-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in files.items():
            archive.writestr(movielens.FOLDER + name, data)
    return path


def test_ratings_become_raw_events_one_folder_per_utc_day(wheel, tmp_path):
    out = tmp_path / "raw"
    files = movielens.read_wheel(wheel)
    record = movielens.write_days(movielens.events(files), out, movielens.SHA256)
    assert sorted(p.name for p in out.glob("dt=*")) == ["dt=1998-01-01", "dt=1998-01-02"]
    assert record["rows"] == 4 and record["days"] == 2
    frame = pd.concat(pd.read_parquet(p) for p in sorted(out.glob("dt=*/*.parquet")))
    assert list(frame.columns) == ["user_id", "item_id", "category_id", "timestamp", "label"]
    by_item = {(r.user_id, r.item_id): r for r in frame.itertuples()}
    # 4 and 5 stars are clicks, 1 and 3 are not; the first genre is the category
    assert [by_item[k].label for k in ((7, 10), (7, 11), (8, 12), (8, 10))] == [1, 0, 1, 0]
    assert by_item[(8, 12)].category_id == "Sci-Fi" and by_item[(7, 11)].category_id == "unknown"
    for folder in out.glob("dt=*"):
        day = dt.date.fromisoformat(folder.name[3:])
        stamps = pd.read_parquet(next(folder.glob("*.parquet")))["timestamp"]
        assert all(dt.datetime.fromtimestamp(t, dt.UTC).date() == day for t in stamps)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".raw.")]  # no leftovers


def test_a_file_that_is_not_the_published_one_is_refused(wheel, monkeypatch):
    monkeypatch.setitem(movielens.SHA256, movielens.RATINGS, "0" * 64)
    with pytest.raises(movielens.MovieLensError, match=r"ml-100k\.inter is not the published"):
        movielens.read_wheel(wheel)


def test_a_complete_copy_is_kept_and_a_partial_one_replaced(wheel, tmp_path, monkeypatch):
    out = tmp_path / "raw"
    downloads = []

    def download(dest):
        downloads.append(dest)
        return wheel

    monkeypatch.setattr(movielens, "download", download)
    movielens.fetch(out)
    movielens.fetch(out)  # the marker says complete: nothing fetched again
    assert len(downloads) == 1
    (out / movielens.MARKER).unlink()  # as a copy interrupted before its marker
    (out / "dt=1998-01-01" / "part-0.parquet").write_bytes(b"partial")
    movielens.fetch(out)
    assert len(downloads) == 2
    assert len(pd.read_parquet(out / "dt=1998-01-01" / "part-0.parquet")) == 1


def test_no_package_index_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(movielens, "WHEEL", "recbole==0.0.0.does-not-exist")
    with pytest.raises(movielens.MovieLensError, match=r"could not download recbole==0\.0\.0"):
        movielens.download(tmp_path)
