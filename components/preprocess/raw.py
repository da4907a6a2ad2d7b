"""Finding, checking and reading raw event files (the raw-event contract).

Structural problems stop the run here, before any Dask work, with an error
that names the file and column: a missing required column, an unreadable or
empty file, no files, a window with no data.
"""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
import io
import re
from dataclasses import dataclass

import fsspec
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from components.common import schema
from components.preprocess.errors import InputError

SAMPLE_BYTES = 1 << 20  # fingerprint reads this much from each end of a file
HEADER_BYTES = 1 << 20  # a CSV header line longer than this is cut (and fails the column check)


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


def _check_columns(file: RawFile, columns: list[str], types: pa.Schema | None = None) -> None:
    missing = [c for c in schema.REQUIRED_COLUMNS if c not in columns]
    if missing:
        raise InputError(
            f"{file.relpath}: missing required column {missing[0]!r} "
            f"(has: {', '.join(columns) or 'no columns'}; required: {', '.join(schema.REQUIRED_COLUMNS)})"
        )
    for name in schema.CONTRACT_COLUMNS:
        # Two columns of one name: which one is meant is a guess (pandas then fails on a frame).
        if columns.count(name) > 1:
            raise InputError(f"{file.relpath}: column {name!r} appears {columns.count(name)} times; "
                             "keep one")
        # A list/struct/map value is no id, time or label (and is unhashable further on).
        if types is not None and name in columns and pa.types.is_nested(types.field(name).type):
            raise InputError(f"{file.relpath}: column {name!r} has nested type {types.field(name).type}; "
                             "expected strings, numbers, booleans or timestamps")


def plan_pieces(fs, files: list[RawFile]) -> list[Piece]:
    """Check every file's header and split it into pieces (no data rows read)."""
    pieces: list[Piece] = []
    for file in files:
        if file.size == 0:
            raise InputError(f"{file.relpath}: file is empty (0 bytes); remove it or write a header")
        if file.fmt == "parquet":
            try:
                with fs.open(file.path, "rb") as fh:
                    parquet = pq.ParquetFile(fh)
                    meta, arrow_schema = parquet.metadata, parquet.schema_arrow
            except Exception as exc:  # pyarrow raises several types for corrupt files
                raise InputError(f"{file.relpath}: unreadable Parquet file ({_one_line(exc)})") from exc
            # Top-level (Arrow) names: the Parquet schema lists a nested column's leaves instead
            # ("element" for a list), which read as a missing column.
            _check_columns(file, list(arrow_schema.names), arrow_schema)
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
        first = fh.readline(HEADER_BYTES)
    # Arrow also ends a line at a lone "\r" (old Mac files): cut there too, or the "header" is
    # the whole file.
    cut = re.split(rb"\r|\n", first, maxsplit=1)
    if len(cut) == 1 and len(first) == HEADER_BYTES:
        raise InputError(f"{file.relpath}: no end of the header line in its first {HEADER_BYTES} bytes")
    try:
        line = cut[0].decode("utf-8-sig").strip()
    except UnicodeDecodeError as exc:
        raise InputError(f"{file.relpath}: header is not UTF-8 ({exc}); re-encode the file as UTF-8") from exc
    # the csv module, not split(","): a quoted name may hold a comma
    try:
        return [c.strip() for c in next(csv.reader([line]))] if line else []
    except csv.Error as exc:
        raise InputError(f"{file.relpath}: unreadable CSV header ({exc})") from exc


def read_piece(fs, piece: Piece) -> pa.Table:
    """The contract columns of one piece, as Arrow (CSV columns all as strings)."""
    file = piece.file
    header: list[str] | None = None
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
            # the header as checked (names stripped of blanks), so " label" is the column "label"
            read_options=pacsv.ReadOptions(encoding="utf8", column_names=header, skip_rows=1),
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
        raise InputError(f"{file.relpath}: unreadable {file.fmt.upper()} data ({_one_line(exc)}"
                         f"{_csv_column_hint(file, str(exc), header)})") from exc


def _one_line(exc: Exception) -> str:
    """Arrow's message on one line and printable (a thrift error spans lines and may quote a
    control byte): the stage's errors are one-line reasons, and the CLI prints them as such."""
    text = " ".join(str(exc).split())
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def _csv_column_hint(file: RawFile, message: str, header: list[str] | None) -> str:
    """The column's name for Arrow's "In CSV column #N" (a position), so the message names it."""
    match = re.search(r"CSV column #(\d+)", message)
    if file.fmt != "csv" or not match or not header or int(match.group(1)) >= len(header):
        return ""
    return f"; column {header[int(match.group(1))]!r}"


def file_fingerprint(fs, file: RawFile) -> str:
    """Path, size and a hash of the first and last MiB: cheap, and changes with the content."""
    digest = hashlib.sha256(f"{file.relpath}\0{file.size}\0".encode())
    with fs.open(file.path, "rb") as fh:
        digest.update(fh.read(SAMPLE_BYTES))
        if file.size > SAMPLE_BYTES:
            fh.seek(max(SAMPLE_BYTES, file.size - SAMPLE_BYTES))
            digest.update(fh.read())
    return digest.hexdigest()
