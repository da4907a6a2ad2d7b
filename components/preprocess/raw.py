"""Finding, checking and reading raw event files (the raw-event contract).

Structural problems stop the run here, before any Dask work, with an error
that names the file and column: a missing required column, an unreadable or
empty file, no files, a window with no data.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
from dataclasses import dataclass

import fsspec
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from components.common import schema
from components.preprocess.errors import InputError

SAMPLE_BYTES = 1 << 20  # fingerprint reads this much from each end of a file


@dataclass(frozen=True)
class RawFile:
    """One raw file of one day folder."""

    index: int
    path: str  # full path within the filesystem
    relpath: str  # relative to the raw root: dt=YYYY-MM-DD/name
    day: dt.date
    fmt: str  # "parquet" | "csv"
    size: int


@dataclass(frozen=True)
class Piece:
    """The unit of parallel work: a Parquet row group or a whole CSV file."""

    file: RawFile
    row_group: int | None
    row_offset: int  # index of the piece's first data row within its file


def list_days(raw: str) -> tuple[fsspec.AbstractFileSystem, dict[dt.date, str]]:
    """The filesystem and ``{day: folder path}`` of a raw root."""
    fs, root = fsspec.core.url_to_fs(raw)
    if not fs.isdir(root):
        raise InputError(f"{raw}: raw events folder does not exist")
    days = {}
    for entry in fs.ls(root, detail=True):
        if entry["type"] != "directory":
            continue
        day = schema.parse_day_folder(entry["name"].rstrip("/").rsplit("/", 1)[-1])
        if day is not None:
            days[day] = entry["name"].rstrip("/")
    if not days:
        raise InputError(f"{raw}: no day folders named dt=YYYY-MM-DD")
    return fs, days


def list_files(fs, day_paths: dict[dt.date, str]) -> list[RawFile]:
    """All raw files of the given day folders, in (day, name) order."""
    files: list[RawFile] = []
    for day in sorted(day_paths):
        for entry in sorted(fs.ls(day_paths[day], detail=True), key=lambda e: e["name"]):
            name = entry["name"].rsplit("/", 1)[-1]
            suffix = name[name.rfind("."):].lower() if "." in name else ""
            if entry["type"] != "file" or name.startswith((".", "_")) or suffix not in schema.RAW_SUFFIXES:
                continue
            files.append(RawFile(
                index=len(files), path=entry["name"], relpath=f"{schema.day_folder_name(day)}/{name}",
                day=day, fmt=suffix[1:], size=int(entry["size"]),
            ))
    return files


def _check_columns(file: RawFile, columns: list[str]) -> None:
    missing = [c for c in schema.REQUIRED_COLUMNS if c not in columns]
    if missing:
        raise InputError(
            f"{file.relpath}: missing required column {missing[0]!r} "
            f"(has: {', '.join(columns) or 'no columns'}; required: {', '.join(schema.REQUIRED_COLUMNS)})"
        )


def plan_pieces(fs, files: list[RawFile]) -> list[Piece]:
    """Check every file's header and split it into pieces (no data rows read)."""
    pieces: list[Piece] = []
    for file in files:
        if file.size == 0:
            raise InputError(f"{file.relpath}: file is empty (0 bytes); remove it or write a header")
        if file.fmt == "parquet":
            try:
                with fs.open(file.path, "rb") as fh:
                    meta = pq.ParquetFile(fh).metadata
            except Exception as exc:  # pyarrow raises several types for corrupt files
                raise InputError(f"{file.relpath}: unreadable Parquet file ({exc})") from exc
            _check_columns(file, list(meta.schema.names))
            offset = 0
            for group in range(meta.num_row_groups):
                rows = meta.row_group(group).num_rows
                pieces.append(Piece(file, group, offset))
                offset += rows
        else:
            _check_columns(file, read_csv_header(fs, file))
            pieces.append(Piece(file, None, 0))
    return pieces


def read_csv_header(fs, file: RawFile) -> list[str]:
    with fs.open(file.path, "rb") as fh:
        first = fh.readline()
    try:
        line = first.decode("utf-8-sig").strip()
    except UnicodeDecodeError as exc:
        raise InputError(f"{file.relpath}: header is not UTF-8 ({exc}); re-encode the file as UTF-8") from exc
    return [c.strip().strip('"') for c in line.split(",")] if line else []


def read_piece(fs, piece: Piece) -> pa.Table:
    """The contract columns of one piece, as Arrow (CSV columns all as strings)."""
    file = piece.file
    try:
        if file.fmt == "parquet":
            with fs.open(file.path, "rb") as fh:
                pf = pq.ParquetFile(fh)
                names = [c for c in schema.CONTRACT_COLUMNS if c in pf.schema_arrow.names]
                return pf.read_row_group(piece.row_group, columns=names)
        with fs.open(file.path, "rb") as fh:
            data = fh.read()
        header = read_csv_header(fs, file)
        names = [c for c in schema.CONTRACT_COLUMNS if c in header]
        return pacsv.read_csv(
            io.BytesIO(data),
            read_options=pacsv.ReadOptions(encoding="utf8"),
            convert_options=pacsv.ConvertOptions(
                column_types={c: pa.string() for c in header},
                include_columns=names,
                null_values=[""],
                strings_can_be_null=True,
            ),
        )
    except InputError:
        raise
    except Exception as exc:
        raise InputError(f"{file.relpath}: unreadable {file.fmt.upper()} data ({exc})") from exc


def file_fingerprint(fs, file: RawFile) -> str:
    """Path, size and a hash of the first and last MiB: cheap, and changes with the content."""
    digest = hashlib.sha256(f"{file.relpath}\0{file.size}\0".encode())
    with fs.open(file.path, "rb") as fh:
        digest.update(fh.read(SAMPLE_BYTES))
        if file.size > SAMPLE_BYTES:
            fh.seek(max(SAMPLE_BYTES, file.size - SAMPLE_BYTES))
            digest.update(fh.read())
    return digest.hexdigest()
