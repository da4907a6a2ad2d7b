"""Mutation testing of the critical modules (`make mutation`): how many small bugs the tests catch.

For each module below, mutmut (pip extra ``mutation``) makes many one-token bugs in it
(``>=`` -> ``>``, ``+ 1`` -> ``+ 2``, a string changed, an argument dropped, ...) and runs only
the fast test files that cover that module against each; a bug the tests miss "survives".
Each module runs in its own scratch folder ``build/mutation/<name>/`` with its own mutmut
settings (what to mutate, which tests), so the selection is per module and runs never share
state. Results: ``benchmarks/results/mutation.json`` and the Mutation testing block of docs/development.md.

A surviving mutant is listed with its diff; the few that cannot change behaviour
(equivalent mutants) are named in ``EQUIVALENT`` with the reason, and the kill rate is
reported both raw and over the non-equivalent mutants (the target: >= 90% per module).

    python -m benchmarks.mutation                   # every module (tens of minutes on 2 cores)
    python -m benchmarks.mutation --only decision   # one or more modules, by name
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.fingerprint import mutation_files, stamp_for
from benchmarks.readme import RESULTS, ROOT, marks, update_block

SCRATCH = ROOT / "build" / "mutation"
TARGET = 0.90


@dataclass(frozen=True)
class Module:
    name: str
    path: str
    tests: tuple[str, ...]
    functions: tuple[str, ...] = ()
    """Only these functions (all of the module when empty)."""
    what: str = ""

    @property
    def dotted(self) -> str:
        return self.path.removesuffix(".py").replace("/", ".")

    def patterns(self) -> list[str]:
        """mutmut's mutant-name globs (``pkg.mod.x_func__mutmut_3``; a method ``Class.m`` is
        ``pkg.mod.xǁClassǁm__mutmut_3``)."""
        return [
            f"{self.dotted}.x{'ǁ'.join(['', *f.split('.')])}__mutmut_*"
            if "." in f
            else f"{self.dotted}.x_{f}__mutmut_*"
            for f in self.functions
        ]


MODULES = (
    Module(
        "sequences",
        "components/preprocess/sequences.py",
        ("tests/unit/test_sequences.py",),
        what="history building, canonical order, duplicates",
    ),
    Module(
        "clean",
        "components/preprocess/clean.py",
        ("tests/unit/test_clean.py",),
        what="row validation and quarantine accounting",
    ),
    Module(
        "hashing",
        "components/common/hashing.py",
        ("tests/unit/test_hashing.py",),
        what="stable id hashing and buckets",
    ),
    Module(
        "delong",
        "components/evaluate/metrics.py",
        ("tests/unit/test_evaluate_metrics.py",),
        functions=(
            "_vectors",
            "_structural_components",
            "_sample_cov",
            "_paired",
            "_interval",
            "_iid_se",
            "delong",
            "clustered_delong",
            "clustered_auc",
            "detectable_effect",
        ),
        what="paired AUC comparison, users as the unit and DeLong's (the gate's interval)",
    ),
    Module(
        "gauc",
        "components/evaluate/metrics.py",
        ("tests/unit/test_evaluate_metrics.py",),
        functions=("_user_aucs", "gauc", "paired_gauc"),
        what="GAUC and its paired comparison, users as the unit (the quality benchmark's)",
    ),
    Module(
        "decision",
        "components/evaluate/decision.py",
        ("tests/unit/test_decision.py",),
        what="champion/challenger gate",
    ),
    Module(
        "checkpoint",
        "components/train/checkpoint.py",
        ("tests/unit/test_checkpoint.py",),
        what="atomic checkpoints, rotation, safe loads",
    ),
    Module(
        "registry",
        "components/common/registry.py",
        ("tests/unit/test_registry.py",),
        what="champion lookup and alias reads",
    ),
    Module(
        "memory",
        "components/estimate/memory.py",
        ("tests/unit/test_estimate.py", "tests/unit/test_memory_model.py"),
        what="the plan's memory model, term by term",
    ),
    Module(
        "timemodel",
        "components/estimate/timemodel.py",
        ("tests/unit/test_time_terms.py",),
        functions=(
            "flops_per_sample",
            "allreduce_seconds",
            "embedding_bytes_per_sample",
            "time_model",
            "checkpoint_interval",
            "choose_patience",
            "world_candidates",
            "checkpoint_buffer_bytes",
        ),
        what="the plan's time model: FLOPs, row traffic, all-reduce, run seconds, checkpoint cadence",
    ),
)

_ONE_PROCESS = (
    "a probe that records no process count measured one process: None, like 1, differs from "
    "every world > 1 (the modelled all-reduce is added), and a world of 1 has no all-reduce "
    "and no parallel loss either way"
)
_CENTRED = (
    "sum((a + mean a)(b - mean b)) = sum(a (b - mean b)) + mean a * sum(b - mean b), and "
    "sum(b - mean b) = 0: the same covariance up to rounding (1e-16)"
)
_V01_SHIFT = (
    "V01 enters only through variances and covariances, which do not change when every "
    "V01 is shifted by a constant or (both models alike) negated"
)
_NAT = (
    "both callers overwrite the NaT rows (with 0 where invalid, or NaN before the validity "
    "check), so the value put there is never read"
)
_TO_NUMPY = (
    "pandas 3 gives the same float64 array with NaN for missing values either way, nullable "
    "Int64/boolean columns included (an int64 array for a column without missing values "
    "compares and converts the same)"
)
_ZERO_COPY_NONE = "pyarrow reads zero_copy_only=None as false: the same copying conversion"
_ZERO_COPY_FILLED = (
    "after fill_null the integer array has no nulls, so numpy views it without a copy; "
    "the view is only read"
)
_NULL_FILL = "the filled rows are the null rows, which the validity mask sets to 0 in the result"
_INT64_MAX = (
    "int64's maximum is far beyond the 1e17-second limit, which refuses the value either way"
)
_NO_BAD_ROWS = (
    "with no bad rows the quarantine has no rows: the filtered (empty) columns give the same "
    "empty object columns"
)
_NONE_COLUMN = "a column of only None is an object column of None either way"
_UTC_FLAG = "(?i) makes the pattern case-insensitive: utc and UTC match the same text"
_STR_DTYPE = (
    "pandas 3 infers its str dtype for the text: the same values and missing values, and "
    "to_numeric, isin, str.contains and to_datetime answer the same"
)
_CANDIDATES = (
    "the candidates are the non-missing text rows: str.contains gives a bool Series with "
    "nothing to fill"
)
_UNITS_S_MS = (
    "pandas parses ISO-8601 text to microseconds, or nanoseconds when the text has them: the "
    "s and ms entries are never read"
)
_ARROW_EMPTY_COMBINE = (
    "combine_chunks of a chunked array with no chunks is an empty array of its type already"
)
_NO_CODE = (
    "an exception without an error_code is not a missing model whatever the default "
    "compared, as long as the default is not RESOURCE_DOES_NOT_EXIST itself"
)
_H_NULL_OR_EMPTY = (
    'None and b"" both end as an unusable id with key 0 (the empty string counts as '
    "null, and hash_ids reports null and invalid together)"
)
_NOT_CUDA = (
    "every device other than \"cuda\" takes the CPU kernels' sizes: the default's spelling "
    "does not matter as long as it is not cuda"
)
_ROW_LABEL = (
    "only the names item and user are looked up (the sparse tables' rows); the other rows' "
    "names are labels"
)
_EMPTY_ANY_TYPE = "an empty column gives empty results whatever its Arrow type"
_H_ZERO_COPY_NO_NULLS = (
    "the array has no nulls here (filled, or the float/index values of a dictionary): "
    "numpy views it without a copy, and the view is only read"
)
_H_STATUS_FLOAT = "a float64 status (0., 1., 2.) compares and indexes the same as the int8 one"
_H_NAN_IS_NULL = "a null float converts to NaN, which the NaN rule marks null as well"
_H_FILL_UNREAD = (
    "the value filled in for NaN or non-integral rows is never read: those rows are already "
    "not ok, and their text is replaced by the empty string"
)
_H_NO_NULL_IN_COMPARE = (
    "null entries keep status 1 whatever the comparison fills in for them (the outer "
    "where picks 1 first, or the empty test applies only where status is 0)"
)
_H_NULL_TYPE_TEXT = (
    "a dictionary of null-type values has status null for every value: its text is never "
    "hashed into a key (keys are 0 where status is not 0)"
)
_H_UNUSABLE_TEXT = (
    "the text of a null or invalid value is never hashed into a kept key: keys are 0 where "
    "status is not 0, and the per-value path returns before reading it"
)
_H_EMPTY_TEXT = (
    "with no distinct values the text is empty either way, and hashing nothing gives no keys"
)
_H_WHOLE_WIDTH = (
    "the whole part is compared with the value: a wider decimal (or decimal256 instead of "
    "decimal128) holding the same whole part compares the same"
)
_H_SCALE_DEFAULT = "a decimal type's scale defaults to 0"
_H_NONE_TO_CANONICAL = (
    "None and NaN then reach _canonical, which marks them null too (null type; NaN float): "
    "the same None"
)
_H_FROM_PANDAS = (
    "a NaN then stays a float NaN (or sends a mixed column value by value), which hashing "
    "counts as null as well"
)
_H_BINARY_INFERRED = (
    "Arrow infers binary (or null for no values) from the canonical bytes: the same bytes "
    "and nulls as large_binary"
)
_H_DECIMAL128 = "casting a decimal128 to the same decimal128 type changes nothing"
_H_DICT_PATH = (
    "Arrow's dictionary encoding gives the same distinct values and codes as pandas' "
    "factorize (and leaves a dictionary array as it is): only slower"
)
_H_NEGATIVE_CODE = (
    "every negative code means null (a NaN index cast to int64 is INT64_MIN, negative too); "
    "the filled value's own distinct entry is never read"
)
_H_NUMPY_TYPE = "the factorized numpy array's dtype gives the same Arrow type (int widths, float64)"
_H_CATEGORIZE = (
    "categorize only de-duplicates before hashing (pandas: same hashes, faster with repeats)"
)
_H_NO_KEYS = (
    "with no distinct values every code is negative: every row is null with key 0, and the "
    "empty keys are never indexed"
)
_H_KEYS_MASKED = "keys of null or invalid values are replaced by 0 again for their rows"
_ASTYPE = "numpy's astype(None) is astype(float64)"
_GROUP_IDS = (
    "group ids run 0 .. n_groups - 1 and the last group has a row, so bincount's length is "
    "n_groups without minlength"
)
EQUIVALENT: dict[tuple[str, str], str] = {
    ("delong", "return float(np.sum((a + a.mean()) * (b - b.mean())) / (len(a) - 1))"): _CENTRED,
    ("delong", "return float(np.sum((a - a.mean()) * (b + b.mean())) / (len(a) - 1))"): _CENTRED,
    ("delong", "v01 = 1.0 + (tz_y - average_ranks(y)) / m"): _V01_SHIFT,
    ("delong", "v01 = 2.0 - (tz_y - average_ranks(y)) / m"): _V01_SHIFT,
    (
        "delong",
        "a = _structural_components(scores_a.astype(None), y)",
    ): "numpy's astype(None) is astype(float64)",
    (
        "delong",
        "b = _structural_components(scores_b.astype(None), y)",
    ): "numpy's astype(None) is astype(float64)",
    (
        "delong",
        "se = math.sqrt(max(var_delta, 0.0)) if (not math.isnan(var_delta)) or True else math.nan",
    ): "a NaN variance gives max(nan, 0.0) = nan and sqrt(nan) = nan: the guard only documents intent",
    ("gauc", "new_run = new_group | np.r_[False, s[1:] != s[:-1]]"): (
        "the first row always starts a group (new_group[0] is True), so the OR is True there "
        "either way"
    ),
    ("gauc", "rows = np.bincount(group_id, minlength=n_groups).astype(None)"): _ASTYPE,
    ("gauc", "pos = np.bincount(group_id, weights=y.astype(None), minlength=n_groups)"): _ASTYPE,
    ("gauc", "y = labels[order].astype(None)"): (
        "labels are 0/1: as float64 they are truthy exactly where they are as bool, and y is "
        "only used where a truth value or a 0/1 weight is read"
    ),
    ("gauc", "rows = np.bincount(group_id, ).astype(np.float64)"): _GROUP_IDS,
    ("gauc", "pos = np.bincount(group_id, weights=y.astype(np.float64), )"): _GROUP_IDS,
    ("gauc", "rank_sum = np.bincount(group_id, weights=np.where(y, ranks, 0.0), )"): _GROUP_IDS,
    (
        "sequences",
        "first = np.searchsorted(click_key, group.astype(np.int64) * span, )",
    ): 'side="left" is searchsorted\'s default',
    (
        "sequences",
        "end = np.searchsorted(click_key, row_key, )  # first click not strictly before",
    ): 'side="left" is searchsorted\'s default',
    (
        "sequences",
        "offsets = np.arange(-seq_len, 0, dtype=None)",
    ): "numpy 2's default integer is int64",
    ("sequences", "offsets = np.arange(-seq_len, 0, )"): "numpy 2's default integer is int64",
    ("sequences", "for lo in range(0, n, ):"): "chunks of one row: the same histories, only slower",
    (
        "sequences",
        "for lo in range(1, n, GATHER_CHUNK):",
    ): "row 0 is the first row of its user in time order, so its history is empty, which is what "
    "the zero-filled output already holds; the chunks from row 1 still cover every other row",
    (
        "sequences",
        "hi = None",
    ): "every chunk then runs to the end: the same values are written again "
    "(more memory and time, same result)",
    ("sequences", "break"): "the loop body only reaches this when there are no clicks at all, for "
    "every chunk alike: stopping or skipping leaves the same zeros",
    (
        "sequences",
        "new_user = np.empty(n, None)",
    ): "float 0/1 flags give the same cumulative group numbers",
    (
        "sequences",
        "new_user = np.empty(n, )",
    ): "float 0/1 flags give the same cumulative group numbers",
    (
        "sequences",
        "return np.stack([seconds_of_day / 3600, (days + 3) % 7], axis=1).astype(np.uint8)",
    ): "seconds_of_day is in [0, 86400): the uint8 cast truncates the float hour to the floor",
    (
        "sequences",
        "days = ts / 86_400",
    ): "(k + f + 3) % 7 with 0 <= f < 1 is ((k + 3) % 7) + f, which the uint8 cast truncates to "
    "the integer weekday (also for negative times: Python's % is non-negative)",
    ("sequences", "if n >= 1:"): "with one row there is no pair of neighbours to compare",
    (
        "hashing",
        "out = (keys.view(np.uint64) % np.uint64(buckets - 1)).astype(None) + 1",
    ): "the remainder is below buckets - 1 (< 2**31), exact in float64, and cast to int32 at the end",
    (
        "clean",
        "naive = values.dt.tz_convert(None).dt.tz_localize(None).to_numpy()",
    ): "tz_convert(None) converts to UTC and drops the zone: what the next call does anyway",
    (
        "clean",
        'naive = values.dt.tz_convert("utc").dt.tz_localize(None).to_numpy()',
    ): '"utc" is UTC',
    ("clean", "return np.where(None, 0, naive.view(np.int64) // per_second)"): _NAT,
    (
        "clean",
        "return np.where(values.isna().to_numpy(), 1, naive.view(np.int64) // per_second)",
    ): _NAT,
    (
        "clean",
        "return np.where(valid, np.floor(np.where(valid, seconds, 1)), 0).astype(np.int64), valid",
    ): "the inner fill value is replaced by the outer where's 0 at the same rows",
    (
        "clean",
        "rows = np.arange(row_offset, row_offset + n, dtype=None)",
    ): "numpy 2's default integer is int64",
    (
        "clean",
        "rows = np.arange(row_offset, row_offset + n, )",
    ): "numpy 2's default integer is int64",
    (
        "clean",
        "values = values.combine_chunks() if (values.num_chunks) or True else pa.array([], values.type)",
    ): _ARROW_EMPTY_COMBINE,
    (
        "clean",
        "values = values.combine_chunks() if values.num_chunks else pa.array([], None)",
    ): _EMPTY_ANY_TYPE,
    (
        "clean",
        "values = values.combine_chunks() if values.num_chunks else pa.array([], )",
    ): _EMPTY_ANY_TYPE,
    (
        "clean",
        'per_second = 10 ** {"s": 1, "ms": 3, "us": 6, "ns": 9}[np.datetime_data(naive.dtype)[0]]',
    ): _UNITS_S_MS,
    (
        "clean",
        'per_second = 10 ** {"s": 0, "XXmsXX": 3, "us": 6, "ns": 9}[np.datetime_data(naive.dtype)[0]]',
    ): _UNITS_S_MS,
    (
        "clean",
        'per_second = 10 ** {"s": 0, "MS": 3, "us": 6, "ns": 9}[np.datetime_data(naive.dtype)[0]]',
    ): _UNITS_S_MS,
    (
        "clean",
        'per_second = 10 ** {"s": 0, "ms": 4, "us": 6, "ns": 9}[np.datetime_data(naive.dtype)[0]]',
    ): _UNITS_S_MS,
    (
        "clean",
        "return np.where(values.isna().to_numpy(), None, naive.view(np.int64) // per_second)",
    ): _NAT,
    (
        "clean",
        "pc.cast(values, pa.float64(), safe=False).to_numpy(zero_copy_only=False).astype(None)",
    ): "numpy's astype(None) is astype(float64)",
    (
        "clean",
        "parsed_seconds = _datetime_seconds(parsed).astype(None)",
    ): "numpy's astype(None) is astype(float64)",
    (
        "clean",
        "pc.cast(values, pa.float64(), safe=False).to_numpy(zero_copy_only=None).astype(np.float64)",
    ): _ZERO_COPY_NONE,
    (
        "clean",
        "text = pd.Series(trimmed.to_numpy(zero_copy_only=None), dtype=object)",
    ): _ZERO_COPY_NONE,
    (
        "clean",
        "return pc.fill_null(values, False).to_numpy(zero_copy_only=None).astype(np.int8), valid",
    ): _ZERO_COPY_NONE,
    (
        "clean",
        "pc.utf8_lower(pc.utf8_trim_whitespace(values)).to_numpy(zero_copy_only=None),",
    ): _ZERO_COPY_NONE,
    ("clean", "valid = ~values.is_null().to_numpy(zero_copy_only=None)"): _ZERO_COPY_NONE,
    ("clean", "present = ~values.is_null().to_numpy(zero_copy_only=None)"): _ZERO_COPY_NONE,
    (
        "clean",
        "raw = pc.fill_null(pc.cast(values, pa.int64()), 0).to_numpy(zero_copy_only=None)",
    ): _ZERO_COPY_NONE,
    ("clean", "raw = pc.fill_null(values, 0).to_numpy(zero_copy_only=None)"): _ZERO_COPY_NONE,
    (
        "clean",
        "raw = pc.fill_null(pc.cast(values, pa.int64()), 0).to_numpy(zero_copy_only=True)",
    ): _ZERO_COPY_FILLED,
    ("clean", "raw = pc.fill_null(values, 0).to_numpy(zero_copy_only=True)"): _ZERO_COPY_FILLED,
    (
        "clean",
        "raw = pc.fill_null(pc.cast(values, pa.int64()), 1).to_numpy(zero_copy_only=False)",
    ): _NULL_FILL,
    ("clean", "raw = pc.fill_null(values, 1).to_numpy(zero_copy_only=False)"): _NULL_FILL,
    ("clean", "raw = np.where(present, raw, 1)"): _NULL_FILL,
    ("clean", "present &= raw < np.iinfo(np.int64).max"): _INT64_MAX,
    (
        "clean",
        "picked = table.filter(pa.array(bad)) if (bad.any()) or True else None",
    ): _NO_BAD_ROWS,
    ("clean", "out[column] = None"): _NONE_COLUMN,
    ("clean", "out[column] = pd.Series([None] * len(out), dtype=None)"): _NONE_COLUMN,
    ("clean", "out[column] = pd.Series([None] * len(out), )"): _NONE_COLUMN,
    (
        "clean",
        'trimmed = pc.replace_substring_regex(pc.utf8_trim_whitespace(values), r"(?i)\\s*utc$", "+00:00")',
    ): _UTC_FLAG,
    ("clean", "text = pd.Series(trimmed.to_numpy(zero_copy_only=False), dtype=None)"): _STR_DTYPE,
    ("clean", "text = pd.Series(trimmed.to_numpy(zero_copy_only=False), )"): _STR_DTYPE,
    (
        "clean",
        'pd.to_numeric(text, errors="coerce").to_numpy(dtype=None, na_value=np.nan).copy()',
    ): _TO_NUMPY,
    (
        "clean",
        'pd.to_numeric(text, errors="coerce").to_numpy(dtype=np.float64, na_value=None).copy()',
    ): _TO_NUMPY,
    (
        "clean",
        'pd.to_numeric(text, errors="coerce").to_numpy(na_value=np.nan).copy()',
    ): _TO_NUMPY,
    (
        "clean",
        'pd.to_numeric(text, errors="coerce").to_numpy(dtype=np.float64, ).copy()',
    ): _TO_NUMPY,
    (
        "clean",
        "has_time = candidates.str.contains(_TIME_OF_DAY).fillna(False).to_numpy(dtype=None)",
    ): _CANDIDATES,
    (
        "clean",
        "has_time = candidates.str.contains(_TIME_OF_DAY).fillna(None).to_numpy(dtype=bool)",
    ): _CANDIDATES,
    (
        "clean",
        "has_time = candidates.str.contains(_TIME_OF_DAY).fillna(True).to_numpy(dtype=bool)",
    ): _CANDIDATES,
    (
        "clean",
        "seconds[text_rows] = np.where(parsed.isna().to_numpy() | ~has_time, None, parsed_seconds)",
    ): "None stored into a float64 array is NaN",
    ("clean", "parse_labels: dtype=None,"): _STR_DTYPE,
    ("clean", "parse_labels: )"): _STR_DTYPE,
    (
        "hashing",
        "status = np.where(uniques.is_null().to_numpy(zero_copy_only=None), 1, 0).astype(np.int8)",
    ): _ZERO_COPY_NONE,
    (
        "hashing",
        "floats = pc.cast(uniques, pa.float64()).to_numpy(zero_copy_only=None)",
    ): _ZERO_COPY_NONE,
    (
        "hashing",
        "integral = pc.fill_null(pc.equal(uniques, whole), True).to_numpy(zero_copy_only=None)",
    ): _ZERO_COPY_NONE,
    (
        "hashing",
        "zero_copy_only=None",
    ): _ZERO_COPY_NONE,
    (
        "hashing",
        "out = text.to_numpy(zero_copy_only=None).astype(object) if n else np.empty(0, object)",
    ): _ZERO_COPY_NONE,
    (
        "hashing",
        "codes, uniques = pd.factorize(pc.fill_null(values, 0).to_numpy(zero_copy_only=None))",
    ): _ZERO_COPY_NONE,
    (
        "hashing",
        "codes = np.where(values.is_null().to_numpy(zero_copy_only=None), -1, codes)",
    ): _ZERO_COPY_NONE,
    (
        "hashing",
        "codes = pc.fill_null(encoded.indices, -1).to_numpy(zero_copy_only=None).astype(np.int64)",
    ): _ZERO_COPY_NONE,
    (
        "hashing",
        "codes, uniques = pd.factorize(pc.fill_null(values, 0).to_numpy(zero_copy_only=True))",
    ): _H_ZERO_COPY_NO_NULLS,
    (
        "hashing",
        "codes = pc.fill_null(encoded.indices, -1).to_numpy(zero_copy_only=True).astype(np.int64)",
    ): _H_ZERO_COPY_NO_NULLS,
    (
        "hashing",
        "status = np.where(uniques.is_null().to_numpy(zero_copy_only=False), 1, 0).astype(None)",
    ): _H_STATUS_FLOAT,
    (
        "hashing",
        "status = np.where(status == 1, 1, np.where(nan, 1, np.where(ok, 0, 2))).astype(None)",
    ): _H_STATUS_FLOAT,
    (
        "hashing",
        "status = np.where((status == 0) & empty, 1, status).astype(None)",
    ): _H_STATUS_FLOAT,
    (
        "hashing",
        "status = np.where(None, 1, np.where(nan, 1, np.where(ok, 0, 2))).astype(np.int8)",
    ): _H_NAN_IS_NULL,
    ("hashing", "ok = ~nan & (np.abs(np.where(None, 0, floats)) <= limit)"): _H_FILL_UNREAD,
    ("hashing", "ok = ~nan & (np.abs(np.where(nan, 1, floats)) <= limit)"): _H_FILL_UNREAD,
    (
        "hashing",
        "ok &= np.floor(np.where(ok, floats, 1)) == np.where(ok, floats, 0)",
    ): _H_FILL_UNREAD,
    (
        "hashing",
        "ok &= np.floor(np.where(ok, floats, 0)) == np.where(ok, floats, 1)",
    ): _H_FILL_UNREAD,
    (
        "hashing",
        "text = pa.array(np.where(ok, floats, 1).astype(np.int64)).cast(pa.string())",
    ): _H_FILL_UNREAD,
    (
        "hashing",
        "integral = pc.fill_null(pc.equal(uniques, whole), None).to_numpy(zero_copy_only=False)",
    ): _H_NO_NULL_IN_COMPARE,
    (
        "hashing",
        "integral = pc.fill_null(pc.equal(uniques, whole), False).to_numpy(zero_copy_only=False)",
    ): _H_NO_NULL_IN_COMPARE,
    (
        "hashing",
        "empty = pc.fill_null(pc.equal(pc.binary_length(text), 0), True).to_numpy(",
    ): _H_NO_NULL_IN_COMPARE,
    ("hashing", "return np.full(n, None, object), np.ones(n, np.int8)"): _H_NULL_TYPE_TEXT,
    ("hashing", "return np.full(n, object), np.ones(n, np.int8)"): _H_NULL_TYPE_TEXT,
    ("hashing", 'return np.full(n, "XXXX", object), np.ones(n, np.int8)'): _H_NULL_TYPE_TEXT,
    ("hashing", 'return np.full(n, "", object), np.ones(n, None)'): _H_NULL_TYPE_TEXT,
    ("hashing", 'return np.full(n, "", object), np.ones(n, )'): _H_NULL_TYPE_TEXT,
    ("hashing", "out[status != 0] = None"): _H_UNUSABLE_TEXT,
    ("hashing", 'out[status != 0] = "XXXX"'): _H_UNUSABLE_TEXT,
    (
        "hashing",
        "out = text.to_numpy(zero_copy_only=False).astype(object) if (n) or True else np.empty(0, object)",
    ): _H_EMPTY_TEXT,
    (
        "hashing",
        "if (len(text)) or True",
    ): _H_EMPTY_TEXT,
    ("hashing", "digits = max(2, type_.precision - type_.scale)"): _H_WHOLE_WIDTH,
    (
        "hashing",
        "pa.decimal128(digits, 0) if (digits <= 38) and False else pa.decimal256(digits, 0),",
    ): _H_WHOLE_WIDTH,
    (
        "hashing",
        "pa.decimal128(digits, 0) if digits < 38 else pa.decimal256(digits, 0),",
    ): _H_WHOLE_WIDTH,
    (
        "hashing",
        "pa.decimal128(digits, ) if digits <= 38 else pa.decimal256(digits, 0),",
    ): _H_SCALE_DEFAULT,
    (
        "hashing",
        "pa.decimal128(digits, 0) if digits <= 38 else pa.decimal256(digits, ),",
    ): _H_SCALE_DEFAULT,
    (
        "hashing",
        "if value is None and (isinstance(value, float) and np.isnan(value)):",
    ): _H_NONE_TO_CANONICAL,
    ("hashing", "array = pa.array(values, from_pandas=None)"): _H_FROM_PANDAS,
    ("hashing", "array = pa.array(values, )"): _H_FROM_PANDAS,
    ("hashing", "array = pa.array(values, from_pandas=False)"): _H_FROM_PANDAS,
    (
        "hashing",
        "array = pa.array([_canonical_value(v) for v in values], None)",
    ): _H_BINARY_INFERRED,
    ("hashing", "array = pa.array([_canonical_value(v) for v in values], )"): _H_BINARY_INFERRED,
    (
        "hashing",
        "values = values.combine_chunks() if (values.num_chunks) or True else pa.array([], values.type)",
    ): _ARROW_EMPTY_COMBINE,
    (
        "hashing",
        "values = values.combine_chunks() if values.num_chunks else pa.array([], None)",
    ): _EMPTY_ANY_TYPE,
    (
        "hashing",
        "values = values.combine_chunks() if values.num_chunks else pa.array([], )",
    ): _EMPTY_ANY_TYPE,
    (
        "hashing",
        "elif pa.types.is_decimal(values.type) and values.type.bit_width <= 128:  # decimal32/64",
    ): _H_DECIMAL128,
    (
        "hashing",
        "elif pa.types.is_decimal(values.type) and values.type.bit_width < 129:  # decimal32/64",
    ): _H_DECIMAL128,
    (
        "hashing",
        "if pa.types.is_integer(values.type) and pa.types.is_floating(values.type):",
    ): _H_DICT_PATH,
    (
        "hashing",
        "encoded = values if (pa.types.is_dictionary(values.type)) and False else pc.dictionary_encode(values)",
    ): _H_DICT_PATH,
    (
        "hashing",
        "codes, uniques = pd.factorize(pc.fill_null(values, 1).to_numpy(zero_copy_only=False))",
    ): _H_NEGATIVE_CODE,
    (
        "hashing",
        "codes = np.where(values.is_null().to_numpy(zero_copy_only=False), -2, codes)",
    ): _H_NEGATIVE_CODE,
    (
        "hashing",
        "codes = pc.fill_null(encoded.indices, -2).to_numpy(zero_copy_only=False).astype(np.int64)",
    ): _H_NEGATIVE_CODE,
    (
        "hashing",
        "codes = pc.fill_null(encoded.indices, None).to_numpy(zero_copy_only=False).astype(np.int64)",
    ): _H_NEGATIVE_CODE,
    ("hashing", "dictionary = pa.array(uniques, None)"): _H_NUMPY_TYPE,
    ("hashing", "dictionary = pa.array(uniques, )"): _H_NUMPY_TYPE,
    (
        "hashing",
        "hash_array(text, hash_key=key or id_hash_key(), categorize=None).view(np.int64)",
    ): _H_CATEGORIZE,
    (
        "hashing",
        "hash_array(text, hash_key=key or id_hash_key(), ).view(np.int64)",
    ): _H_CATEGORIZE,
    (
        "hashing",
        "hash_array(text, hash_key=key or id_hash_key(), categorize=True).view(np.int64)",
    ): _H_CATEGORIZE,
    ("hashing", "else np.zeros(0, None)"): _H_NO_KEYS,
    ("hashing", "else np.zeros(0, )"): _H_NO_KEYS,
    ("hashing", "else np.zeros(1, np.int64)"): _H_NO_KEYS,
    (
        "hashing",
        "row_status = np.where(codes < 0, 1, status[np.maximum(codes, 0)] if len(status) else 2)",
    ): _H_NO_KEYS,
    (
        "hashing",
        "out = np.where(row_status == 0, keys[np.maximum(codes, 0)] if len(keys) else 1, 0)",
    ): _H_NO_KEYS,
    ("hashing", "keys = np.where(status == 0, keys, None)"): _H_KEYS_MASKED,
    ("hashing", "keys = np.where(status == 0, keys, 1)"): _H_KEYS_MASKED,
    (
        "hashing",
        'return text[0] if isinstance(text[0], bytes) else text[0].encode("UTF-8")',
    ): "codec names ignore case",
    ("registry", 'return getattr(exc, "error_code", None) == "RESOURCE_DOES_NOT_EXIST"'): _NO_CODE,
    (
        "registry",
        'return getattr(exc, "error_code", "XXXX") == "RESOURCE_DOES_NOT_EXIST"',
    ): _NO_CODE,
    (
        "hashing",
        "ok &= np.floor(np.where(ok, floats, 0)) == np.where(ok, floats, None)",
    ): _H_FILL_UNREAD,
    (
        "hashing",
        "status = np.where(status == 2, 1, np.where(nan, 1, np.where(ok, 0, 2))).astype(np.int8)",
    ): _H_NAN_IS_NULL,
    (
        "hashing",
        "digits = max(1, type_.precision + type_.scale)",
    ): "with a scale >= 0, precision + scale digits hold the whole part too: the same comparison "
    "(Arrow compares no negative-scale decimals at all)",
    (
        "hashing",
        "status = np.where(status == 1, 1, np.where(integral, 0, 2)).astype(None)",
    ): _H_STATUS_FLOAT,
    (
        "hashing",
        "out = text.to_numpy(zero_copy_only=False).astype(object) if n else np.empty(1, object)",
    ): "with no distinct values the extra text entry is hashed but never indexed (every code is negative)",
    (
        "hashing",
        'return None if (status[0] == 1) and False else b""  # "" is null: an invalid value stays unusable',
    ): _H_NULL_OR_EMPTY,
    (
        "hashing",
        'return None if (status[0] == 1) or True else b""  # "" is null: an invalid value stays unusable',
    ): _H_NULL_OR_EMPTY,
    (
        "hashing",
        'return None if status[0] != 1 else b""  # "" is null: an invalid value stays unusable',
    ): _H_NULL_OR_EMPTY,
    (
        "hashing",
        'return None if status[0] == 2 else b""  # "" is null: an invalid value stays unusable',
    ): _H_NULL_OR_EMPTY,
    (
        "hashing",
        'return text[0] if (isinstance(text[0], bytes)) or True else text[0].encode("utf-8")',
    ): "pyarrow stores a str put into a binary array as its UTF-8 bytes",
    ("hashing", 'exact = ""'): "exact is read only for float columns, which set it themselves",
    (
        "memory",
        'config: ModelConfig, vocab: Vocab, precision: str = "fp32", device: str = "XXcpuXX"',
    ): _NOT_CUDA,
    (
        "memory",
        'config: ModelConfig, vocab: Vocab, precision: str = "fp32", device: str = "CPU"',
    ): _NOT_CUDA,
    (
        "timemodel",
        '"XXcategoryXX": (t, config.d_model),',
    ): _ROW_LABEL,
    (
        "timemodel",
        '"CATEGORY": (t, config.d_model),',
    ): _ROW_LABEL,
    (
        "timemodel",
        '"XXgapXX": (vocab.seq_len, config.d_model),',
    ): _ROW_LABEL,
    (
        "timemodel",
        '"GAP": (vocab.seq_len, config.d_model),',
    ): _ROW_LABEL,
    (
        "timemodel",
        '"XXcontextXX": (2, config.context_dim),',
    ): _ROW_LABEL,
    (
        "timemodel",
        '"CONTEXT": (2, config.context_dim),',
    ): _ROW_LABEL,
    (
        "timemodel",
        'in_world = bool(measured) and measured.get("processes", None) == world',
    ): _ONE_PROCESS,
    (
        "timemodel",
        'in_world = bool(measured) and measured.get("processes", ) == world',
    ): _ONE_PROCESS,
    (
        "timemodel",
        "if vocab.dense or config.dense_embed:",
    ): "the term is 2 x dense x 2 x frequencies x dense_embed: with either of them 0 it adds 0",
}
"""(module name, mutated line as mutmut shows it, stripped) -> why the mutant cannot change
behaviour; ``"function: line"`` where the same line occurs in two functions. Keyed by text, not
by mutant number, so the list survives renumbering."""


ALSO_COPY = ("pipelines", "configs", "benchmarks", "manifests", "images", "README.md")
"""What the tests read besides ``components`` and ``tests``; mutmut copies it into ``mutants/``."""
NOT_COPIED = frozenset({"scratch", "__pycache__"})
"""Generated data and caches: ``benchmarks/scratch`` alone holds gigabytes of benchmark worlds,
and a copy per module filled the disk."""


def also_copy() -> list[str]:
    """``ALSO_COPY`` with each folder spelled out as its entries minus ``NOT_COPIED``."""
    paths = []
    for name in ALSO_COPY:
        path = ROOT / name
        if path.is_dir():
            paths += [
                f"{name}/{entry.name}"
                for entry in sorted(path.iterdir())
                if entry.name not in NOT_COPIED
            ]
        else:
            paths.append(name)
    return paths


def mutmut_settings(module: Module) -> str:
    """The ``[tool.mutmut]`` table of one module's scratch pyproject.toml."""

    def toml_list(items) -> str:
        return "[" + ", ".join(json.dumps(str(i)) for i in items) + "]"

    return "\n".join(
        [
            "",
            "[tool.mutmut]",
            'source_paths = ["components"]',
            f"only_mutate = {toml_list([module.path])}",
            f"pytest_add_cli_args_test_selection = {toml_list(module.tests)}",
            # quiet, no cache folder, no warnings-as-errors surprises from a mutant's import
            'pytest_add_cli_args = ["-q", "-p", "no:cacheprovider", "-p", "no:randomly"]',
            f"also_copy = {toml_list(also_copy())}",
            # torch and Dask are not fork-safe once initialised: fork workers from a clean server
            'process_isolation = "forkserver"',
            "use_git_change_detection = false",
            "timeout_multiplier = 10.0",
            "",
        ]
    )


def prepare(module: Module) -> Path:
    """A fresh scratch folder: links to the sources, a pyproject.toml with this module's settings."""
    folder = SCRATCH / module.name
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    for name in (
        "components",
        "tests",
        "pipelines",
        "configs",
        "benchmarks",
        "manifests",
        "images",
        "README.md",
    ):
        (folder / name).symlink_to(ROOT / name)
    text = (ROOT / "pyproject.toml").read_text()
    (folder / "pyproject.toml").write_text(text + mutmut_settings(module))
    # exists before Python starts: a PYTHONPATH entry missing at start-up is cached as "no such
    # folder" and the tests would import the unmutated sources
    (folder / "mutants").mkdir()
    for name in ALSO_COPY:  # mutmut copies a folder's files into a folder that must exist
        if (ROOT / name).is_dir():
            (folder / "mutants" / name).mkdir()
    return folder


def mutmut(folder: Path, *args: str, timeout: float | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CI")}
    # the mutated copy under mutants/ must be what the tests (and their subprocesses) import
    env["PYTHONPATH"] = str(folder / "mutants")
    env["MLFLOW_DISABLE_TELEMETRY"] = "true"
    return subprocess.run(
        [sys.executable, "-m", "mutmut", *args],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def results(folder: Path, module: Module) -> dict[str, str]:
    """{mutant name: status} from mutmut's per-file record (mutants/<path>.meta)."""
    from mutmut.stats import status_by_exit_code

    meta = json.loads((folder / "mutants" / (module.path + ".meta")).read_text())
    names = meta["exit_code_by_key"]
    wanted = [re.compile(p.replace(".", r"\.").replace("*", ".*") + "$") for p in module.patterns()]
    return {
        name: status_by_exit_code[code]
        for name, code in sorted(names.items())
        if code is not None and (not wanted or any(w.match(name) for w in wanted))
    }


DIFFS = """
import json, sys
from mutmut.mutation.diff_apply import get_diff_for_mutant
path, names = sys.argv[1], json.loads(sys.argv[2])
print(json.dumps({name: get_diff_for_mutant(name, path=path) for name in names}))
"""


def diffs(folder: Path, path: str, names: list[str]) -> dict[str, str]:
    """{mutant name: unified diff of its function} (what ``mutmut show`` prints), in one process."""
    if not names:
        return {}
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-c", DIFFS, path, json.dumps(names)],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return json.loads(done.stdout)


def mutated_line(diff: str) -> str:
    added = [
        line[1:].strip()
        for line in diff.splitlines()
        if line.startswith("+") and not line.startswith("+++")
    ]
    return added[0] if added else ""


def run_module(module: Module, workers: int) -> dict:
    folder = prepare(module)
    # the code measured, stamped before the run: a later edit must not pass for measured
    code = stamp_for(mutation_files(module.path, list(module.tests)))
    (folder / "code.json").write_text(json.dumps(code) + "\n")
    started = time.perf_counter()
    done = mutmut(folder, "run", "--max-children", str(workers), *module.patterns())
    seconds = time.perf_counter() - started
    if not (folder / "mutants" / (module.path + ".meta")).is_file():
        sys.exit(
            f"mutation: mutmut did not run for {module.name} (exit {done.returncode}):\n"
            + (done.stdout + done.stderr)[-3000:]
        )
    (folder / "seconds.txt").write_text(f"{seconds:.1f}\n")
    return collect(module, folder)


def collect(module: Module, folder: Path) -> dict:
    """The result row of a finished run in ``folder`` (also used to re-read one: ``--collect``)."""
    timing = folder / "seconds.txt"
    seconds = float(timing.read_text()) if timing.is_file() else None  # JSON null: not timed
    code_file = folder / "code.json"
    code = json.loads(code_file.read_text()) if code_file.is_file() else None
    statuses = results(folder, module)
    counts: dict[str, int] = {}
    for status in statuses.values():
        counts[status] = counts.get(status, 0) + 1
    survivors = []
    missed = [
        name for name, status in statuses.items() if status not in ("killed", "timeout", "segfault")
    ]
    for name, diff in diffs(folder, module.path, missed).items():
        status, line = statuses[name], mutated_line(diff)
        function = re.sub(
            r"__mutmut_\d+$", "", name.removeprefix(module.dotted + ".")
        ).removeprefix("x_")
        why = EQUIVALENT.get((module.name, f"{function}: {line}")) or EQUIVALENT.get(
            (module.name, line)
        )
        survivors.append(
            {
                "mutant": name.removeprefix(module.dotted + "."),
                "status": status,
                "line": line,
                "equivalent": why,
                "diff": diff,
            }
        )
    total = len(statuses)
    killed = sum(counts.get(s, 0) for s in ("killed", "timeout", "segfault"))
    equivalent = sum(1 for s in survivors if s["equivalent"])
    rate = killed / total if total else 0.0
    effective = killed / (total - equivalent) if total > equivalent else 0.0
    return {
        "module": module.name,
        "path": module.path,
        "functions": list(module.functions) or "all",
        "what": module.what,
        "tests": list(module.tests),
        "mutants": total,
        "killed": killed,
        "equivalent": equivalent,
        "counts": counts,
        "kill_rate": round(rate, 4),
        "kill_rate_non_equivalent": round(effective, 4),
        "meets_target": effective >= TARGET,
        "seconds": None if seconds is None else round(seconds, 1),
        "code": code,
        "survivors": survivors,
    }


def table(rows: list[dict]) -> str:
    lines = [
        "| module | what | mutants | killed | equivalent | kill rate (non-equivalent) | tests | time |",
        "|---|---|---:|---:|---:|---:|---|---:|",
    ]
    for r in rows:
        lines.append(
            f"| `{r['path']}`{'' if r['functions'] == 'all' else ' (' + ', '.join(r['functions']) + ')'} "
            f"| {r['what']} | {r['mutants']} | {r['killed']} | {r['equivalent']} "
            f"| {100 * r['kill_rate_non_equivalent']:.1f}% | {', '.join(f'`{t}`' for t in r['tests'])} "
            f"| {'?' if r['seconds'] is None else format(r['seconds'], '.0f')} s |"
        )
    met = sum(r["meets_target"] for r in rows)
    return "\n".join(lines) + (
        f"\n\n{met} of {len(rows)} modules at >= {TARGET:.0%} of non-equivalent "
        "mutants killed (`make mutation`; survivors and equivalents with reasons "
        "in benchmarks/results/mutation.json)."
    )


def readme_table(result: dict) -> str:
    """The published block from the stored results file."""
    return table(result["modules"])


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.mutation", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--only",
        nargs="+",
        metavar="NAME",
        choices=[m.name for m in MODULES],
        help="run these modules only (default: all); earlier results of the others are kept",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 2,
        help="mutants tested in parallel (default: the CPU count)",
    )
    parser.add_argument(
        "--results", default=str(RESULTS / "mutation.json"), help="where the JSON goes"
    )
    parser.add_argument(
        "--functions",
        nargs="+",
        metavar="NAME",
        help="with one --only module: mutate only these functions (a partial run, "
        "recorded as such)",
    )
    parser.add_argument(
        "--collect",
        action="store_true",
        help="run nothing: re-read the finished runs under build/mutation/ into the results",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    modules = {m.name: m for m in MODULES}
    if args.functions:
        if not args.only or len(args.only) != 1:
            parser.error("--functions needs exactly one module in --only")
        modules[args.only[0]] = dataclasses.replace(
            modules[args.only[0]], functions=tuple(args.functions)
        )
    try:
        import mutmut  # noqa: F401
    except ImportError:
        sys.exit("mutation: mutmut is not installed: pip install -e '.[mutation]'")
    out = Path(args.results)
    for module in modules.values():
        if args.only and module.name not in args.only:
            continue
        if args.collect:
            if (SCRATCH / module.name / "mutants" / (module.path + ".meta")).is_file():
                save(out, collect(module, SCRATCH / module.name))
            continue
        print(
            f"mutation: {module.name} ({module.path}) against {', '.join(module.tests)} ...",
            flush=True,
        )
        row = run_module(module, args.workers)
        ordered = save(out, row)  # after each module: a long run interrupted keeps what it measured
        print(
            f"mutation: {module.name}: {row['killed']}/{row['mutants']} killed, {row['equivalent']} "
            f"equivalent, {100 * row['kill_rate_non_equivalent']:.1f}% in {row['seconds']:.0f} s",
            flush=True,
        )
    ordered = save(out)
    print(f"mutation: wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")
    return 0 if all(r["meets_target"] for r in ordered) else 1


def save(out: Path, row: dict | None = None) -> list[dict]:
    """Merge ``row`` into the results file (other modules' rows are kept) and rewrite the published block."""
    previous = json.loads(out.read_text())["modules"] if out.is_file() else []
    rows = {r["module"]: r for r in previous if r["module"] in {m.name for m in MODULES}}
    if row is not None:
        rows[row["module"]] = row
    ordered = [rows[m.name] for m in MODULES if m.name in rows]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps({"tool": "mutmut 3.8.1", "target": TARGET, "modules": ordered}, indent=2) + "\n"
    )
    update_block("mutation", table(ordered) + marks(out))  # a module measured on older code says so
    return ordered


if __name__ == "__main__":
    sys.exit(main())
