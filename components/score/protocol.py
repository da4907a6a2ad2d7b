"""MLflow's scoring protocol, read strictly: an ``/invocations`` body -> a table of raw values.

The scoring server (:mod:`components.score.app`) takes the bodies MLflow's own
server takes: JSON (``dataframe_records``, ``dataframe_split``, ``inputs`` or
``instances``, each with optional ``params``), CSV with a header row, and
Parquet. Unlike MLflow's parser it keeps every value as the client wrote it:
a JSON integer stays an exact Python int (an int64 id beside a null is not
turned into a float), a CSV cell stays text (events as JSON lists in their
cells), a Parquet column keeps its Arrow type. Anything it does not know is
refused, never dropped: top-level keys, ``params`` and (in
:func:`components.score.features.request_inputs`) columns. Every refusal is a
:class:`ProtocolError` of one line.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE

JSON, CSV, PARQUET = "application/json", "text/csv", "application/x-parquet"
CONTENT_TYPES = (JSON, CSV, PARQUET)
MAX_BYTES = 16 * 2**20
"""Largest body the server reads (a request at the row and event bounds of
:mod:`components.score.features` fits); a larger one is answered 413 unread."""
TABLE_KEYS = ("dataframe_records", "dataframe_split", "inputs", "instances")


@dataclass(frozen=True)
class Param:
    """An integer request parameter (``{"params": {name: value}}``): its default and bounds."""

    default: int
    low: int
    high: int
    doc: str


PARAMS = {"batch_size": Param(8192, 1, 65_536, "rows the model scores at a time")}
"""The parameters a request may set (the model signature's params schema)."""


class ProtocolError(ValueError):
    """A body that is not a request table; ``status``: 400, or 413 (too large), 415 (type)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(" ".join(message.split()))
        self.status = status


def parse_body(body: bytes, content_type: str | None) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The request table (object columns of the values as sent) and its ``params`` (all of
    :data:`PARAMS`, checked, defaults filled in)."""
    if len(body) > MAX_BYTES:
        raise ProtocolError(too_large(len(body)), 413)
    mime, _, options = (content_type or "").partition(";")
    mime = mime.strip().lower()
    charset = next(
        (
            v.strip().lower()
            for k, _, v in (o.partition("=") for o in options.split(";"))
            if k.strip() == "charset"
        ),
        "utf-8",
    )
    if mime not in CONTENT_TYPES:
        raise ProtocolError(
            f"content type {mime or '(none)'!r} is not one of {', '.join(CONTENT_TYPES)}", 415
        )
    if charset != "utf-8":
        raise ProtocolError(f"charset {charset!r}: the server reads utf-8 only", 415)
    if mime == PARQUET:
        return _parquet(body), check_params({})
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"the body is not utf-8 (byte {exc.start})") from None
    if mime == CSV:
        return _csv(text), check_params({})
    return _json(text)


def too_large(size: int | None) -> str:
    shown = "more than" if size is None else f"{size:,} bytes;"
    return (
        f"the request body is {shown} {MAX_BYTES:,} bytes at most; split it into several requests"
    )


def _json(text: str) -> tuple[pd.DataFrame, dict[str, Any]]:
    def constant(name: str):
        raise ProtocolError(f"{name} is not a JSON value (send null, or leave the field out)")

    try:
        doc = json.loads(text, parse_constant=constant)
    except json.JSONDecodeError as exc:
        raise ProtocolError(
            f"the body is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except ValueError as exc:  # Python's own bound: an integer of thousands of digits
        raise ProtocolError(f"the body holds a number no id or time can be: {exc}") from None
    except RecursionError:
        raise ProtocolError(
            "the body is not JSON a table can be read from: nested too deeply"
        ) from None
    if not isinstance(doc, dict):
        raise ProtocolError(
            f"the body must be a JSON object with one of {', '.join(TABLE_KEYS)}, "
            f"got a {type(doc).__name__}"
        )
    unknown = [k for k in doc if k not in (*TABLE_KEYS, "params")]
    tables = [k for k in doc if k in TABLE_KEYS]
    if unknown:
        raise ProtocolError(
            f"unknown field(s) {', '.join(map(repr, unknown))}; a request has one of "
            f"{', '.join(TABLE_KEYS)} and optionally params"
        )
    if len(tables) != 1:
        raise ProtocolError(
            f"a request has exactly one of {', '.join(TABLE_KEYS)}; got "
            f"{', '.join(tables) if tables else 'none'}"
        )
    (key,) = tables
    value = doc[key]
    if key == "dataframe_split":
        frame = _split(value)
    elif isinstance(value, list):
        frame = _records(value, key)
    elif isinstance(value, dict) and key == "inputs":
        frame = _columns(value, key)
    else:
        raise ProtocolError(
            f"{key} must be a list of records{' or an object of columns' if key == 'inputs' else ''}, "
            f"got {_kind(value)}"
        )
    return frame, _params(doc.get("params"))


def _records(records: list, key: str) -> pd.DataFrame:
    columns: dict[str, None] = {}
    for i, record in enumerate(records):
        if not isinstance(record, dict):
            raise ProtocolError(
                f"{key}[{i}] must be an object of column values, got {_kind(record)}"
            )
        columns.update(dict.fromkeys(record))
    return _frame({c: [r.get(c) for r in records] for c in columns}, len(records))


def _split(value) -> pd.DataFrame:
    if not isinstance(value, dict):
        raise ProtocolError(f"dataframe_split must be an object, got {_kind(value)}")
    extra = [k for k in value if k not in ("columns", "data", "index")]
    if extra or "data" not in value or "columns" not in value:
        raise ProtocolError(
            "dataframe_split has columns and data (and optionally index)"
            + (f"; unknown {', '.join(map(repr, extra))}" if extra else "")
        )
    columns, data = value["columns"], value["data"]
    if not isinstance(columns, list) or not all(isinstance(c, str) for c in columns):
        raise ProtocolError("dataframe_split.columns must be a list of column names")
    if len(set(columns)) != len(columns):
        raise ProtocolError("dataframe_split.columns names a column twice")
    if not isinstance(data, list):
        raise ProtocolError(f"dataframe_split.data must be a list of rows, got {_kind(data)}")
    for i, row in enumerate(data):
        if not isinstance(row, list) or len(row) != len(columns):
            raise ProtocolError(
                f"dataframe_split.data[{i}] must be a list of {len(columns)} values, got "
                f"{_kind(row)}"
            )
    return _frame({c: [row[j] for row in data] for j, c in enumerate(columns)}, len(data))


def _columns(value: dict, key: str) -> pd.DataFrame:
    lengths = {c: len(v) if isinstance(v, list) else None for c, v in value.items()}
    bad = [c for c, n in lengths.items() if n is None]
    if bad:
        raise ProtocolError(f"{key}.{bad[0]} must be a list of the column's values")
    if len(set(lengths.values())) > 1:
        raise ProtocolError(
            f"{key}: the columns have different lengths "
            f"({', '.join(f'{c} {n}' for c, n in lengths.items())})"
        )
    return _frame(value, next(iter(lengths.values()), 0))


def _params(params) -> dict[str, Any]:
    if params is None:
        return check_params({})
    if not isinstance(params, dict):
        raise ProtocolError(f"params must be an object, got {_kind(params)}")
    return check_params(params)


def check_params(params: dict[str, Any]) -> dict[str, int]:
    """Every parameter, checked (its default where not given); unknown ones refused."""
    unknown = [k for k in params if k not in PARAMS]
    if unknown:
        raise ProtocolError(
            f"unknown param(s) {', '.join(map(repr, unknown))}; this model takes {', '.join(PARAMS)}"
        )
    out = {}
    for name, spec in PARAMS.items():
        value = params.get(name, spec.default)
        if (
            isinstance(value, bool)
            or not isinstance(value, int | np.integer)
            or not spec.low <= value <= spec.high
        ):
            raise ProtocolError(
                f"params.{name} must be an integer in {spec.low}..{spec.high}, got {_short(value)}"
            )
        out[name] = int(value)
    return out


def _csv(text: str) -> pd.DataFrame:
    if not text.strip():
        raise ProtocolError("the CSV body is empty; it needs a header row and a row per request")
    try:
        frame = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
    except (ValueError, pd.errors.ParserError) as exc:
        raise ProtocolError(f"the CSV body is no table: {str(exc).splitlines()[0]}") from None
    columns = {}
    for c in frame.columns:
        cells = [None if v == "" else v for v in frame[c].tolist()]
        if str(c).startswith("events_"):  # a cell holds the row's list as JSON: [1, 2]
            cells = [_csv_list(v, c, i) for i, v in enumerate(cells)]
        columns[c] = cells
    return _frame(columns, len(frame))


def _csv_list(cell: str | None, column: str, row: int):
    if cell is None:
        return None
    try:
        value = json.loads(cell)
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, list):
        raise ProtocolError(f"row {row}: {column} must be a JSON list in its cell, like [1, 2]")
    return value


def _parquet(body: bytes) -> pd.DataFrame:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        _check_parquet_size(pq.ParquetFile(pa.BufferReader(body)).metadata)
        table = pq.read_table(pa.BufferReader(body))
    except (pa.ArrowException, OSError) as exc:
        raise ProtocolError(
            f"the Parquet body cannot be read: {str(exc).splitlines()[0]}"
        ) from None
    return _frame({c: table.column(c).to_pylist() for c in table.column_names}, table.num_rows)


MAX_DECODED_BYTES = 16 * MAX_BYTES
"""Most a Parquet body may unpack to (its own metadata says, before any of it is decoded)."""


def _check_parquet_size(meta) -> None:
    """Refuse a Parquet body by what its footer says it holds, before decoding any of it: a few
    hundred compressed bytes can unpack to millions of rows."""
    from components.score.features import MAX_EVENTS, MAX_ROWS

    if meta.num_rows > MAX_ROWS:
        raise ProtocolError(
            f"the Parquet body holds {meta.num_rows:,} rows; at most {MAX_ROWS:,} per request", 413
        )
    groups = [meta.row_group(g) for g in range(meta.num_row_groups)]
    unpacked = sum(g.total_byte_size for g in groups)
    values = max(
        (sum(g.column(c).num_values for g in groups) for c in range(meta.num_columns)), default=0
    )
    if unpacked > MAX_DECODED_BYTES or values > MAX_EVENTS + MAX_ROWS:
        raise ProtocolError(
            f"the Parquet body unpacks to {unpacked:,} bytes and {values:,} values in a column; "
            f"at most {MAX_DECODED_BYTES:,} bytes and {MAX_EVENTS + MAX_ROWS:,} values per request",
            413,
        )


INT_RANGE = (-(1 << 63), (1 << 64) - 1)
"""Integers a request may hold: ids and times are 64-bit values."""


def _check_integers(columns: dict[str, list]) -> None:
    for column, values in columns.items():
        for row, value in enumerate(values):
            for item in value if isinstance(value, list) else (value,):
                if isinstance(item, int) and not INT_RANGE[0] <= item <= INT_RANGE[1]:
                    raise ProtocolError(
                        f"row {row}: {column} holds an integer of {len(str(abs(item)))} digits; "
                        "ids and times fit in 64 bits (send a longer id as a string)"
                    )


def _frame(columns: dict[str, list], rows: int) -> pd.DataFrame:
    """Object columns: pandas keeps every value as it is (no int -> float through a null)."""
    _check_integers(columns)
    return pd.DataFrame(
        {c: pd.Series(v, dtype=object) for c, v in columns.items()}, index=pd.RangeIndex(rows)
    )


def _kind(value) -> str:
    return "null" if value is None else f"a {type(value).__name__}"


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class BadRequest(MlflowException):
    """A request the model cannot score. MLflow's server answers it with HTTP 400 and this one-line
    reason: the server prefixes the message with the whole request (many lines) by assigning
    ``message``, which this class keeps to the reason."""

    def __init__(self, reason: str) -> None:
        self._reason = " ".join(str(reason).split())
        super().__init__(self._reason, error_code=INVALID_PARAMETER_VALUE)

    @property
    def message(self) -> str:
        return self._reason

    @message.setter
    def message(self, value: str) -> None:
        pass  # keep the reason (see the class docstring)


class Overdue(TimeoutError):
    """Scoring passed its deadline: the server has answered 504 and stops the work."""
