"""Stable id hashing: the same id lands in the same bucket on every machine, every day.

An id's canonical form is its text: integer ids hash as their decimal string,
so ``42`` read from Parquet and ``"42"`` read from CSV are the same id. The
text is taken from the column's Arrow type, never through float64 (which
rounds integers above 2**53 together once a column has a null): every integer
width signed or unsigned, integral decimals and integral floats give the same
decimal text as the integer, dictionary-encoded columns their values' text,
binary columns their bytes; text ids lose ASCII blanks around them (``" 42"``
is ``"42"``), nothing else (``"007"`` is not ``"7"``). A float or decimal that is no integer (``1.5``,
``inf``, or a float beyond its type's exact-integer range, where the writer
already rounded distinct ids together) is *invalid*: the caller quarantines
the row. ``NaN``, null and the empty string are *null*.

The 64-bit key is SipHash-2-4 of the UTF-8 text (or the raw bytes) under the
deployment's 16-byte id key (:func:`id_hash_key`), then the splitmix64 finalizer: exactly what pandas'
``hash_array`` computes for object arrays, pinned by a pure-Python reference
in the tests so that a change in pandas cannot silently re-bucket every id.
Buckets are ``1 + key % (buckets - 1)``: bucket 0 is reserved for padding and
missing values.

The id key is a per-deployment secret: ``$DAILYREC_ID_KEY`` (locally an
environment variable, on the cluster the Secret ``dailyrec-id-key``). Without
it ids hash under the public :data:`HASH_KEY`, which is meant for generated
data only: anyone can hash candidate ids under a public key and so reverse
every key a dataset or a model version holds. Datasets and model versions
record the key by :func:`key_fingerprint`, never in plain text.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import os

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pandas.util import hash_array

HASH_KEY = "dailyrec-ids-v1!"
"""The public default id key (16 bytes), for generated data only."""
KEY_ENV = "DAILYREC_ID_KEY"
"""The environment variable holding this deployment's id secret."""
MIN_SECRET_CHARS = 16
MIN_SECRET_BITS = 40
"""The least an id secret's characters must carry by their spread (length x Shannon entropy of
its character counts): ``aaaaaaaaaaaaaaaa`` carries 0, 24 random bytes in base64 about 140."""
PAD = 0


class IdKeyError(ValueError):
    """The id secret is unusable, or a model and the current key disagree (one line)."""


def id_hash_key(environ=None) -> str:
    """The 16-character SipHash key of this deployment: derived from ``$DAILYREC_ID_KEY`` (surrounding
    blanks, such as a file's final newline, ignored), else the public :data:`HASH_KEY`."""
    secret = (os.environ if environ is None else environ).get(KEY_ENV, "").strip()
    return _derived_key(secret) if secret else HASH_KEY


@functools.lru_cache(maxsize=8)
def _derived_key(secret: str) -> str:
    if len(secret) < MIN_SECRET_CHARS:
        raise IdKeyError(
            f"${KEY_ENV} has {len(secret)} characters; an id secret has at least "
            f"{MIN_SECRET_CHARS} (for example: openssl rand -base64 24)"
        )
    if secret_bits(secret) < MIN_SECRET_BITS:
        raise IdKeyError(
            f"${KEY_ENV} is too guessable ({secret_bits(secret):.0f} bits by its characters' "
            f"spread, at least {MIN_SECRET_BITS} needed): use a random one, for example "
            "openssl rand -base64 24"
        )
    # pandas takes a 16-byte UTF-8 key: 16 base64 characters of a digest carry 96 bits of it
    digest = hashlib.sha256(b"dailyrec-ids\0" + secret.encode()).digest()
    return base64.urlsafe_b64encode(digest).decode()[:16]


def seal(payload: bytes) -> str | None:
    """HMAC-SHA256 of ``payload`` under a key derived from this deployment's id secret: a record
    only a holder of the secret can make (a dataset's file digests); None without a secret
    (public data, nothing to seal against)."""
    secret = os.environ.get(KEY_ENV, "").strip()
    if not secret:
        return None
    _derived_key(secret)  # the secret's own checks (length, strength) first
    key = hashlib.sha256(b"dailyrec-seal\0" + secret.encode()).digest()
    return hmac.new(key, payload, "sha256").hexdigest()


def secret_bits(secret: str) -> float:
    """An upper estimate of the bits a secret carries: its length times the Shannon entropy of
    its character counts (a repeated or two-letter secret carries few, whatever its length)."""
    counts = np.unique(np.frombuffer(secret.encode("utf-32-le"), dtype="<u4"), return_counts=True)[
        1
    ]
    shares = counts / counts.sum()
    return float(len(secret) * -(shares * np.log2(shares)).sum())


FINGERPRINT_COST = {"n": 1 << 15, "r": 8, "p": 1}
"""scrypt's cost for a key's fingerprint: 32 MiB and about 0.1 s a try, so a recorded fingerprint
cannot test guesses of the secret offline at any useful rate (a secret of the minimum 40 bits
takes about 10^11 tries: thousands of core-years), while a process computes its own once."""
FINGERPRINT_DOMAIN = b"dailyrec-id-key-fingerprint/v2"


@functools.lru_cache(maxsize=8)
def _fingerprint(key: str) -> str:
    digest = hashlib.scrypt(
        key.encode(), salt=FINGERPRINT_DOMAIN, dklen=8, maxmem=64 << 20, **FINGERPRINT_COST
    )
    return digest.hex()


def key_fingerprint(key: str | None = None) -> str:
    """16 hex digits naming an id key without revealing it (the current key by default): scrypt
    at :data:`FINGERPRINT_COST`, so that a fingerprint in a dataset or a model version is no
    offline oracle for guesses of the secret."""
    return _fingerprint(id_hash_key() if key is None else key)


def legacy_fingerprint(key: str | None = None) -> str:
    """The fingerprint versions written before :func:`key_fingerprint` used (one SHA-256: fast
    to test guesses against); read only, to recognise them as the current key's."""
    key = id_hash_key() if key is None else key
    return hashlib.sha256(b"dailyrec-id-key\0" + key.encode()).hexdigest()[:16]


def same_key(recorded: str, other: str | None = None) -> bool:
    """Whether two recorded fingerprints name the same key (``other``: this process's key):
    equal, or both this process's key, one of them in the legacy form."""
    if other is not None and recorded == other:
        return True
    mine = {key_fingerprint(), legacy_fingerprint()}
    return recorded in mine and (other is None or other in mine)


def is_public_key(key: str | None = None) -> bool:
    return (id_hash_key() if key is None else key) == HASH_KEY


ID_BLANKS = " \t\r\n\f\v"  # trimmed around text ids: "u1, i2" in a hand-made CSV is the id "i2"
# Floats hold every integer exactly only up to 2**(mantissa bits + 1).
_EXACT_FLOAT_INT = {16: 2**11, 32: 2**24, 64: 2**53}


def id_type_problem(type_: pa.DataType) -> str | None:
    """Why a column of this Arrow type cannot hold ids (None: it can)."""
    if pa.types.is_dictionary(type_):
        return id_type_problem(type_.value_type)
    if (
        pa.types.is_null(type_)
        or pa.types.is_integer(type_)
        or pa.types.is_floating(type_)
        or pa.types.is_decimal(type_)
        or pa.types.is_boolean(type_)
        or _is_text(type_)
        or _is_binary(type_)
    ):
        return None
    return f"type {type_} cannot hold ids; expected integers, strings, binary, or integral decimals/floats"


def id_keys(
    values: pa.Array | pa.ChunkedArray, key: str | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """64-bit stable keys (as int64), a null mask and an invalid mask for a column of ids, under
    ``key`` (default: :func:`id_hash_key`).

    Works on distinct values only (Arrow's dictionary encoding), so text
    conversion and hashing run once per distinct id, not once per row. Keys are
    0 where null or invalid. Raises ``TypeError`` for a type that holds no ids.
    """
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks else pa.array([], values.type)
    problem = id_type_problem(values.type)
    if problem:
        raise TypeError(problem)
    if pa.types.is_string_view(values.type) or pa.types.is_binary_view(values.type):
        values = values.cast(
            pa.large_string() if pa.types.is_string_view(values.type) else pa.large_binary()
        )
    if pa.types.is_null(values.type):
        n = len(values)
        return np.zeros(n, np.int64), np.ones(n, bool), np.zeros(n, bool)
    exact = None
    if pa.types.is_floating(
        values.type
    ):  # float16/32 have no Arrow kernels here: float64, same limit
        exact = _EXACT_FLOAT_INT[values.type.bit_width]
        values = pc.cast(values, pa.float64())
    elif pa.types.is_decimal(values.type) and values.type.bit_width < 128:  # decimal32/64
        values = pc.cast(values, pa.decimal128(values.type.precision, values.type.scale))
    if pa.types.is_integer(values.type) or pa.types.is_floating(values.type):
        # pandas factorizes a plain number array several times faster than Arrow's dictionary
        # encoding, and exactly: nulls are filled and masked, never turned into float NaN.
        codes, uniques = pd.factorize(pc.fill_null(values, 0).to_numpy(zero_copy_only=False))
        codes = np.where(values.is_null().to_numpy(zero_copy_only=False), -1, codes)
        dictionary = pa.array(uniques, values.type)
    else:
        encoded = values if pa.types.is_dictionary(values.type) else pc.dictionary_encode(values)
        codes = pc.fill_null(encoded.indices, -1).to_numpy(zero_copy_only=False).astype(np.int64)
        dictionary = encoded.dictionary
    text, status = _canonical(dictionary, exact)  # status: 0 ok, 1 null, 2 invalid
    keys = (
        hash_array(text, hash_key=key or id_hash_key(), categorize=False).view(np.int64)
        if len(text)
        else np.zeros(0, np.int64)
    )
    keys = np.where(status == 0, keys, 0)
    row_status = np.where(codes < 0, 1, status[np.maximum(codes, 0)] if len(status) else 1)
    out = np.where(row_status == 0, keys[np.maximum(codes, 0)] if len(keys) else 0, 0)
    return out.astype(np.int64), row_status == 1, row_status == 2


def hash_ids(values, key: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Keys and an unusable mask (null or invalid) for ids given as pandas/numpy/list values.

    For callers outside the Arrow path (tests, tools): the values become an
    Arrow array first (pandas nullable integers keep their exact values), so
    the keys equal those :func:`id_keys` gives the same ids read from a file.
    """
    try:
        array = pa.array(values, from_pandas=True)
    except (
        pa.ArrowInvalid,
        pa.ArrowTypeError,
        TypeError,
        OverflowError,
    ):  # mixed types: one by one
        array = pa.array([_canonical_value(v) for v in values], pa.large_binary())
    keys, null, invalid = id_keys(array, key)
    return keys, null | invalid


def _canonical_value(value) -> bytes | None:
    """The canonical bytes of one Python id value (the object-column path of ``hash_ids``)."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return None
    try:
        scalar = pa.array([value])
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        scalar = pa.array([str(value)])  # e.g. an integer beyond 64 bits: its decimal text
    if id_type_problem(scalar.type):
        scalar = pa.array([str(value)])
    text, status = _canonical(scalar)
    if status[0]:
        return None if status[0] == 1 else b""  # "" is null: an invalid value stays unusable
    return text[0] if isinstance(text[0], bytes) else text[0].encode("utf-8")


def _canonical(uniques: pa.Array, exact: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Object array of the canonical text (str, or bytes for binary) of each distinct value, and
    its status (0 ok, 1 null, 2 invalid). ``exact``: for floats, the largest integer the column's
    original float type holds exactly."""
    type_ = uniques.type
    n = len(uniques)
    status = np.where(uniques.is_null().to_numpy(zero_copy_only=False), 1, 0).astype(np.int8)
    if pa.types.is_null(type_):  # e.g. a dictionary whose values are all null: nothing to hash
        return np.full(n, "", object), np.ones(n, np.int8)
    if pa.types.is_boolean(type_):
        text = pc.cast(pc.cast(uniques, pa.int8()), pa.string())
    elif pa.types.is_integer(type_):
        text = pc.cast(uniques, pa.string())
    elif pa.types.is_floating(type_):
        floats = pc.cast(uniques, pa.float64()).to_numpy(zero_copy_only=False)
        limit = exact or _EXACT_FLOAT_INT[type_.bit_width]
        nan = np.isnan(floats)
        ok = ~nan & (np.abs(np.where(nan, 0, floats)) <= limit)
        ok &= np.floor(np.where(ok, floats, 0)) == np.where(ok, floats, 0)
        status = np.where(status == 1, 1, np.where(nan, 1, np.where(ok, 0, 2))).astype(np.int8)
        text = pa.array(np.where(ok, floats, 0).astype(np.int64)).cast(pa.string())
    elif pa.types.is_decimal(type_):
        # Truncated to scale 0 (or widened from a negative scale), then compared: equal = integral.
        digits = max(1, type_.precision - type_.scale)
        whole = pc.cast(
            uniques,
            pa.decimal128(digits, 0) if digits <= 38 else pa.decimal256(digits, 0),
            safe=False,
        )
        integral = pc.fill_null(pc.equal(uniques, whole), True).to_numpy(zero_copy_only=False)
        status = np.where(status == 1, 1, np.where(integral, 0, 2)).astype(np.int8)
        text = pc.cast(whole, pa.string())
    else:  # text (blanks around it trimmed) or binary: the value itself; empty counts as null
        text = pc.utf8_trim(uniques, characters=ID_BLANKS) if _is_text(type_) else uniques
        empty = pc.fill_null(pc.equal(pc.binary_length(text), 0), False).to_numpy(
            zero_copy_only=False
        )
        status = np.where((status == 0) & empty, 1, status).astype(np.int8)
    out = text.to_numpy(zero_copy_only=False).astype(object) if n else np.empty(0, object)
    out[status != 0] = ""
    return out, status


def _is_text(type_: pa.DataType) -> bool:
    return (
        pa.types.is_string(type_)
        or pa.types.is_large_string(type_)
        or pa.types.is_string_view(type_)
    )


def _is_binary(type_: pa.DataType) -> bool:
    return (
        pa.types.is_binary(type_)
        or pa.types.is_large_binary(type_)
        or pa.types.is_fixed_size_binary(type_)
        or pa.types.is_binary_view(type_)
    )


def bucketize(keys: np.ndarray, buckets: int, null: np.ndarray | None = None) -> np.ndarray:
    """Bucket index in ``[1, buckets)`` for each key (``PAD`` where null), as int32."""
    if buckets < 2:
        raise ValueError(f"buckets must be >= 2 (one is reserved for padding), got {buckets}")
    out = (keys.view(np.uint64) % np.uint64(buckets - 1)).astype(np.int64) + 1
    if null is not None:
        out[null] = PAD
    return out.astype(np.int32)
