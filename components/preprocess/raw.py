"""Finding, checking and reading raw event files (the raw-event contract).

Structural problems stop the run here, before any Dask work, with an error
that names the file and column: a missing required column, a column type
that would lose values, an unreadable, empty or misnamed file (a Parquet or
gzip file named .csv), no files, a window with no data. Paths not read are
listed with their reason (:class:`Ignored`), never skipped silently; file
names are quoted with ``repr`` in messages, so a newline or a non-UTF-8 byte
in a name cannot forge or break a log line.
"""

from __future__ import annotations

import contextlib
import csv
import datetime as dt
import hashlib
import io
import os
import re
from dataclasses import dataclass

import fsspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from fsspec.implementations.local import LocalFileSystem

from components.common import schema
from components.preprocess.clean import column_type_problem
from components.preprocess.errors import InputError

HASH_BLOCK_BYTES = 1 << 22  # read size when a file's whole content must be hashed
VOUCHED = (
    "ChecksumSHA256",
    "ChecksumCRC32C",
    "ChecksumCRC32",
    "md5Hash",
    "crc32c",
    "ETag",
    "etag",
    "generation",
    "VersionId",
    "version_id",
    "content_md5",
)
"""Keys of fsspec ``info`` (s3fs, gcsfs, adlfs) whose values change whenever an object's content does."""
HEADER_BYTES = 1 << 20  # a CSV header line longer than this is cut (and fails the column check)


@dataclass(frozen=True)
class RawFile:
    """One raw file of one day folder."""

    index: int
    path: str  # full path within the filesystem
    relpath: str  # relative to the raw root: dt=YYYY-MM-DD/[sub/folders/]name
    day: dt.date
    fmt: str  # "parquet" | "csv"
    size: int
    compression: str | None = None  # of a CSV: "gzip" | "bz2" | "zstd"

    @property
    def name(self) -> str:
        """``relpath`` as storable text (a non-UTF-8 byte of the name as ``\\xNN``)."""
        return printable_path(self.relpath)


@dataclass(frozen=True)
class Ignored:
    """A path under the raw root that is not read, and why (reported, never silent)."""

    path: str  # relative to the raw root
    reason: str
    day_numbers: tuple[int, int, int] | None = None  # what a misnamed day folder seems to mean

    @property
    def marker(self) -> bool:
        """A hidden or marker entry (``_SUCCESS``, ``.crc``, a sample's ``_truth/``): by the
        convention a reader passes over it; recorded, not warned about."""
        return self.path.rstrip("/").rsplit("/", 1)[-1].startswith(HIDDEN)


@dataclass(frozen=True)
class Piece:
    """The unit of parallel work: a Parquet row group or a whole CSV file."""

    file: RawFile
    row_group: int | None
    row_offset: int  # index of the piece's first data row within its file


HIDDEN = (".", "_")  # Hadoop/Spark convention: _SUCCESS, _temporary/, .part-0.crc, .spark-staging
MAX_DEPTH = 8  # sub-folder levels read inside a day folder (hour=00/minute=05/... is 2)
ACCEPTED = ", ".join(schema.RAW_FORMATS)
# leading bytes -> what a file holds, for errors that say what a misnamed file is
MAGIC = {
    b"PAR1": ("a Parquet file", "rename it to .parquet"),
    b"\x1f\x8b": ("gzip-compressed data", "rename it to .csv.gz"),
    b"\x28\xb5\x2f\xfd": ("zstd-compressed data", "rename it to .csv.zst"),
    b"BZh": ("bzip2-compressed data", "rename it to .csv.bz2"),
    b"PK\x03\x04": ("a ZIP archive", "unzip it"),
    b"\x04\x22\x4d\x18": ("lz4-compressed data", "decompress it or write gzip/zstd CSV"),
    b"\xff\xfe": ("UTF-16 text", "re-encode it as UTF-8"),
    b"\xfe\xff": ("UTF-16 text", "re-encode it as UTF-8"),
}
EXPECTED_MAGIC = {
    ("parquet", None): b"PAR1",
    ("csv", "gzip"): b"\x1f\x8b",
    ("csv", "zstd"): b"\x28\xb5\x2f\xfd",
    ("csv", "bz2"): b"BZh",
}


def printable_path(path: str) -> str:
    """A path as UTF-8-safe text: bytes of a non-UTF-8 name (surrogate-escaped by Python) as \\xNN."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _basename(entry: dict) -> str:
    return entry["name"].rstrip("/").rsplit("/", 1)[-1]


def _kind(fs, entry: dict) -> str:
    """ "directory", "file", "broken link" or "other"; a symbolic link counts as what it points to."""
    if entry["type"] in ("directory", "file") and not entry.get("islink"):
        return entry["type"]
    if entry.get("islink") or entry["type"] == "other":
        name = entry["name"]
        if fs.isdir(name):
            return "directory"
        if fs.isfile(name):
            return "file"
        return "broken link" if entry.get("islink") else "other"
    return entry["type"]


def list_days(
    raw: str, ignored: list[Ignored] | None = None
) -> tuple[fsspec.AbstractFileSystem, dict[dt.date, str]]:
    """The filesystem and ``{day: folder path}`` of a raw root.

    Every other entry of the root is appended to ``ignored`` with its reason; a
    ``dt=`` folder that is no valid day (``dt=2026-1-5``, ``dt=2026-02-30``)
    keeps the numbers it seems to mean, so :func:`check_misnamed_days` can
    refuse one that may belong to the window.
    """
    ignored = [] if ignored is None else ignored
    fs, root = fsspec.core.url_to_fs(raw)
    if not fs.isdir(root):
        raise InputError(f"{raw!r}: raw events folder does not exist")
    days = {}
    for entry in sorted(fs.ls(root, detail=True), key=lambda e: e["name"]):
        name = _basename(entry)
        kind = _kind(fs, entry)
        day = schema.parse_day_folder(name) if kind == "directory" else None
        if day is not None:
            days[day] = entry["name"].rstrip("/")
        elif (
            kind == "directory"
            and not name.startswith(HIDDEN)
            and (name.lower().startswith("dt=") or schema.loose_day_numbers(name))
        ):
            numbers = schema.loose_day_numbers(name)
            ignored.append(Ignored(name, _misnamed_reason(numbers), numbers))
        elif kind in ("broken link", "other"):
            ignored.append(
                Ignored(
                    name,
                    "broken symbolic link" if kind == "broken link" else "not a file or folder",
                )
            )
        elif name.startswith(HIDDEN):
            ignored.append(
                Ignored(
                    name,
                    f"hidden or marker {'folder' if kind == 'directory' else 'file'} "
                    "(name starts with '.' or '_')",
                )
            )
        elif kind == "directory":
            ignored.append(Ignored(name, "not a day folder (expected dt=YYYY-MM-DD)"))
        else:
            ignored.append(
                Ignored(name, "file outside a day folder (raw files go in dt=YYYY-MM-DD/)")
            )
    if not days:
        raise InputError(
            f"{raw!r}: no day folders named dt=YYYY-MM-DD"
            + (
                f" (not day folders: {', '.join(repr(i.path) for i in ignored[:3])})"
                if ignored
                else ""
            )
        )
    return fs, days


def _misnamed_reason(numbers: tuple[int, int, int] | None) -> str:
    if numbers is None:
        return "not a day folder name (expected dt=YYYY-MM-DD)"
    try:
        day = dt.date(*numbers)
    except ValueError:
        return "not a calendar date (expected dt=YYYY-MM-DD)"
    return f"misnamed day folder (expected {schema.day_folder_name(day)!r})"


def check_misnamed_days(
    raw: str, ignored: list[Ignored], first: dt.date, last: dt.date, open_ended: bool
) -> None:
    """Refuse a misnamed ``dt=`` folder that may hold days the window reads.

    ``open_ended``: the window ends at the latest day present, so a misnamed
    folder after it may be the real latest day (the window would silently end early).
    """
    for item in ignored:
        numbers = item.day_numbers
        if numbers is None:
            continue
        low = (first.year, first.month, first.day)
        high = (last.year, last.month, last.day)
        if numbers >= low and (open_ended or numbers <= high):
            raise InputError(
                f"{raw!r}: folder {item.path!r} is a {item.reason} and may hold days of the window "
                f"{first} .. {last}; rename it to dt=YYYY-MM-DD or move it out of the raw folder"
            )


def list_files(
    fs, day_paths: dict[dt.date, str], ignored: list[Ignored] | None = None
) -> list[RawFile]:
    """All raw files of the given day folders (sub-folders included), in (day, path) order.

    Paths not read are appended to ``ignored`` with their reason; a data file
    compressed in a way the reader does not take is refused.
    """
    ignored = [] if ignored is None else ignored
    files: list[RawFile] = []
    for day in sorted(day_paths):
        for path, rel, size, fmt in _walk(fs, day_paths[day], schema.day_folder_name(day), ignored):
            files.append(
                RawFile(
                    index=len(files),
                    path=path,
                    relpath=rel,
                    day=day,
                    fmt=fmt[0],
                    size=size,
                    compression=fmt[1],
                )
            )
    return files


def _walk(
    fs, folder: str, rel: str, ignored: list[Ignored], depth: int = 0, seen: frozenset = frozenset()
):
    """(path, relpath, size, (format, compression)) of the raw files under one day folder."""
    real = _real_path(fs, folder)
    if real in seen:
        ignored.append(Ignored(rel, "symbolic link loop"))
        return
    for entry in sorted(fs.ls(folder, detail=True), key=lambda e: e["name"]):
        name = _basename(entry)
        path = f"{rel}/{name}"
        kind = _kind(fs, entry)
        if name.startswith(HIDDEN):
            ignored.append(
                Ignored(
                    path,
                    f"hidden or marker {'folder' if kind == 'directory' else 'file'} "
                    "(name starts with '.' or '_')",
                )
            )
        elif kind == "directory":
            if depth + 1 >= MAX_DEPTH:
                raise InputError(
                    f"{path!r}: folders nested deeper than {MAX_DEPTH} levels in a day folder"
                )
            yield from _walk(fs, entry["name"].rstrip("/"), path, ignored, depth + 1, seen | {real})
        elif kind != "file":
            ignored.append(
                Ignored(
                    path,
                    "broken symbolic link" if kind == "broken link" else "not a file or folder",
                )
            )
        elif (fmt := schema.raw_format(name)) is not None:
            yield (
                entry["name"],
                path,
                int(fs.size(entry["name"]) if entry.get("islink") else entry["size"]),
                fmt,
            )
        elif _unread_compression(name):
            raise InputError(
                f"{path!r}: compressed as {_unread_compression(name)!r}, which is not read; "
                f"accepted: {ACCEPTED}"
            )
        else:
            ignored.append(Ignored(path, f"not a raw data file (accepted: {ACCEPTED})"))


def _unread_compression(name: str) -> str | None:
    lower = name.lower()
    for data in (".csv", ".parquet", ".pq"):
        for ending in schema.UNREAD_COMPRESSIONS:
            if lower.endswith(data + ending):
                return ending
    return None


def _real_path(fs, path: str) -> str:
    """Where a local folder really is (symbolic links followed), to stop a link loop."""
    protocols = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
    return os.path.realpath(path) if {"file", "local"} & set(protocols) else path


def _check_columns(file: RawFile, columns: list[str], types: pa.Schema | None = None) -> None:
    missing = [c for c in schema.REQUIRED_COLUMNS if c not in columns]
    if missing:
        raise InputError(
            f"{file.relpath!r}: missing required column {missing[0]!r} "
            f"(has: {', '.join(map(repr, columns)) or 'no columns'}; "
            f"required: {', '.join(schema.REQUIRED_COLUMNS)})"
        )
    for name in schema.CONTRACT_COLUMNS:
        # Two columns of one name: which one is meant is a guess.
        if columns.count(name) > 1:
            raise InputError(
                f"{file.relpath!r}: column {name!r} appears {columns.count(name)} times; keep one"
            )
        # A type that cannot hold the column's values without loss is refused for the whole file.
        problem = (
            column_type_problem(name, types.field(name).type)
            if types is not None and name in columns
            else None
        )
        if problem:
            raise InputError(f"{file.relpath!r}: column {name!r} {problem}")


def sniff(head: bytes) -> tuple[str, str] | None:
    """(what the bytes are, how to fix the name) from a file's first bytes, or None for text."""
    return next((v for magic, v in MAGIC.items() if head.startswith(magic)), None)


def _check_magic(fs, file: RawFile) -> None:
    """Name what a file holds when it is not what its name says (a Parquet or gzip file named .csv)."""
    with fs.open(file.path, "rb") as fh:
        head = fh.read(4)
    expected = EXPECTED_MAGIC.get((file.fmt, file.compression))
    if expected is not None and head.startswith(expected):
        return
    found = sniff(head)
    if expected is None and (found is None or found[0] == "UTF-16 text"):
        return  # plain CSV text (UTF-16 is named by the header check, which tells the encoding)
    what = {("parquet", None): "a Parquet file", ("csv", None): "CSV text"}.get(
        (file.fmt, file.compression), f"{file.compression}-compressed CSV"
    )
    text = head and all(32 <= b < 127 or b in b"\t\r\n" for b in head)
    holds = found[0] if found else ("text" if text else "no known format")
    fix = (
        found[1]
        if found
        else ("rename it to .csv if it is CSV" if text else "check how it was written")
    )
    raise InputError(f"{file.relpath!r}: named as {what} but holds {holds}; {fix}")


def plan_pieces(fs, files: list[RawFile]) -> list[Piece]:
    """Check every file's header and split it into pieces (no data rows read)."""
    pieces: list[Piece] = []
    for file in files:
        if file.size == 0:
            raise InputError(
                f"{file.relpath!r}: file is empty (0 bytes); remove it or write a header"
            )
        _check_magic(fs, file)
        if file.fmt == "parquet":
            try:
                with fs.open(file.path, "rb") as fh:
                    parquet = pq.ParquetFile(fh)
                    meta, arrow_schema = parquet.metadata, parquet.schema_arrow
            except Exception as exc:  # pyarrow raises several types for corrupt files
                raise InputError(
                    f"{file.relpath!r}: unreadable Parquet file ({_one_line(exc)})"
                ) from exc
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


@contextlib.contextmanager
def _open_csv(fs, file: RawFile):
    """The file's CSV bytes, decompressed as its name says."""
    with fs.open(file.path, "rb") as fh:
        if file.compression is None:
            yield fh
            return
        with pa.CompressedInputStream(fh, file.compression) as stream:
            yield stream


def read_csv_header(fs, file: RawFile) -> list[str]:
    try:
        with _open_csv(fs, file) as fh:
            first = fh.read(HEADER_BYTES)
    except OSError as exc:  # a broken gzip/zstd stream
        raise InputError(
            f"{file.relpath!r}: unreadable {file.compression} data ({_one_line(exc)})"
        ) from exc
    # Arrow also ends a line at a lone "\r" (old Mac files): cut there too, or the "header" is
    # the whole file.
    cut = re.split(rb"\r|\n", first, maxsplit=1)
    if len(cut) == 1 and len(first) == HEADER_BYTES:
        raise InputError(
            f"{file.relpath!r}: no end of the header line in its first {HEADER_BYTES} bytes"
        )
    try:
        line = cut[0].decode("utf-8-sig").strip()
    except UnicodeDecodeError as exc:
        found = sniff(first)
        hint = f"it holds {found[0]}; {found[1]}" if found else "re-encode the file as UTF-8"
        raise InputError(f"{file.relpath!r}: header is not UTF-8 ({exc}); {hint}") from exc
    # the csv module, not split(","): a quoted name may hold a comma
    try:
        return [c.strip() for c in next(csv.reader([line]))] if line else []
    except csv.Error as exc:
        raise InputError(f"{file.relpath!r}: unreadable CSV header ({exc})") from exc


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
        with _open_csv(fs, file) as fh:
            data = fh.read()
        header = read_csv_header(fs, file)
        names = [c for c in schema.CONTRACT_COLUMNS if c in header]
        return _float_written_ids_as_integers(
            pacsv.read_csv(
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
        )
    except InputError:
        raise
    except Exception as exc:
        kind = f"{file.compression} CSV" if file.compression else file.fmt.upper()
        raise InputError(
            f"{file.relpath!r}: unreadable {kind} data ({_one_line(exc)}"
            f"{_csv_column_hint(file, str(exc), header)})"
        ) from exc


_FLOAT_WRITTEN_INTEGER = r"^-?\d+\.0+$"


def _float_written_ids_as_integers(table: pa.Table) -> pa.Table:
    """An id column of a CSV whose every value reads like ``17.0`` is an integer column written
    through float (pandas writes an integer column holding a null so): read ``17.0`` as ``17``,
    the id the same events have on a day without nulls. Text ids in other files keep their text."""
    for name in (schema.USER_ID, schema.ITEM_ID, schema.CATEGORY_ID):
        if name not in table.column_names:
            continue
        column = table.column(name)
        floaty = pc.match_substring_regex(column, _FLOAT_WRITTEN_INTEGER)
        if pc.any(floaty).as_py() and pc.all(pc.or_kleene(floaty, column.is_null())).as_py():
            table = table.set_column(
                table.schema.get_field_index(name),
                name,
                pc.replace_substring_regex(column, r"\.0+$", ""),
            )
    return table


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
    """Path, size and what says the content is unchanged (:func:`content_token`)."""
    digest = hashlib.sha256(f"{file.relpath}\0{file.size}\0".encode("utf-8", "surrogateescape"))
    digest.update(content_token(fs, file.path).encode())
    return digest.hexdigest()


def content_token(fs, path: str) -> str:
    """What the filesystem vouches for about a file's content, without reading it where it can.

    A local file: its modification time in nanoseconds (any write moves it; copying without
    keeping times only costs a recompute). An object store: the checksum or ETag it keeps with
    the object (``VOUCHED``, as fsspec's ``info`` gives them). A filesystem that gives neither:
    a SHA-256 of the whole content. A sample of the file would miss an edit in its middle.
    """
    if isinstance(fs, LocalFileSystem):
        return f"mtime_ns={os.stat(path).st_mtime_ns}"
    info = fs.info(path)
    vouched = {key: str(info[key]) for key in VOUCHED if info.get(key)}
    if vouched:
        return "info:" + ",".join(f"{k}={v}" for k, v in sorted(vouched.items()))
    digest = hashlib.sha256()
    with fs.open(path, "rb") as fh:
        for block in iter(lambda: fh.read(HASH_BLOCK_BYTES), b""):
            digest.update(block)
    return f"sha256={digest.hexdigest()}"
