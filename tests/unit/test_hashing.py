import hashlib
import re

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from components.common import hashing
from components.common.hashing import HASH_KEY, bucketize, hash_ids
from tests.reference import siphash24, splitmix64_finalizer


def test_siphash_reference_matches_the_published_vector():
    # SipHash-2-4 paper, appendix A: key 00..0f, empty message
    assert siphash24(bytes(range(16)), b"") == 0x726FDB47DD0E0E31


BLANKS = " \t\r\n\f\v"


@given(
    st.lists(
        st.text(min_size=1, max_size=80).filter(lambda s: s == s.strip(BLANKS) != ""),
        min_size=1,
        max_size=30,
    )
)
def test_hash_is_siphash24_of_utf8_text_then_splitmix(ids):
    keys, null = hash_ids(pd.Series(ids, dtype=object))
    expected = [splitmix64_finalizer(siphash24(HASH_KEY.encode(), s.encode("utf-8"))) for s in ids]
    assert not null.any()
    assert keys.view(np.uint64).tolist() == expected


def test_integer_ids_hash_like_their_decimal_text():
    as_int, _ = hash_ids(pd.Series([42, -7, 0, 2**40], dtype="int64"))
    as_text, _ = hash_ids(pd.Series(["42", "-7", "0", str(2**40)]))
    as_float, _ = hash_ids(pd.Series([42.0, -7.0, 0.0, float(2**40)]))
    as_objects, _ = hash_ids(pd.Series([42, "-7", 0.0, 2**40], dtype=object))
    np.testing.assert_array_equal(as_int, as_text)
    np.testing.assert_array_equal(as_int, as_float)
    np.testing.assert_array_equal(as_int, as_objects)


def test_leading_zeros_are_a_different_id():
    keys, _ = hash_ids(pd.Series(["7", "007"]))
    assert keys[0] != keys[1]


def test_nulls_and_empty_strings_are_flagged():
    keys, null = hash_ids(pd.Series(["a", None, "", np.nan, "b"], dtype=object))
    assert null.tolist() == [False, True, True, True, False]
    assert keys[null].tolist() == [0, 0, 0]


def test_buckets_are_in_range_and_reserve_zero():
    keys, null = hash_ids(pd.Series([str(i) for i in range(5000)] + [None]))
    buckets = bucketize(keys, 97, null)
    assert buckets[-1] == 0
    assert buckets[:-1].min() >= 1 and buckets[:-1].max() <= 96
    # all 96 non-padding buckets are used by 5000 ids (a spread, not a constant)
    assert len(np.unique(buckets[:-1])) == 96


def test_same_id_same_bucket_across_calls_and_orders():
    a, _ = hash_ids(pd.Series(["x", "y", "z"]))
    b, _ = hash_ids(pd.Series(["z", "x", "q", "y"]))
    assert bucketize(a, 1000).tolist() == bucketize(b, 1000)[[1, 3, 0]].tolist()


def test_pandas_nullable_and_object_inputs_keep_exact_big_ids():
    big = [2**53 + 1, 2**53 + 2, 2**63 - 1]
    nullable, unusable = hash_ids(pd.Series(big + [None], dtype="Int64"))
    text, _ = hash_ids(pd.Series([str(v) for v in big]))
    np.testing.assert_array_equal(nullable[:3], text)
    assert unusable.tolist() == [False, False, False, True]
    mixed, _ = hash_ids(pd.Series([2**64 + 1, "x", 7.0], dtype=object))  # beyond uint64: its text
    np.testing.assert_array_equal(mixed, hash_ids(pd.Series([str(2**64 + 1), "x", "7"]))[0])


def test_binary_ids_hash_their_bytes():
    import pyarrow as pa

    from components.common.hashing import id_keys

    keys, null, invalid = id_keys(pa.array([b"abc", b"", b"\xff\xfe", None]))
    assert keys[0] == hash_ids(pd.Series(["abc"]))[0][0]
    assert null.tolist() == [False, True, False, True] and not invalid.any()
    assert keys[2] == np.uint64(
        splitmix64_finalizer(siphash24(HASH_KEY.encode(), b"\xff\xfe"))
    ).view(np.int64)


def test_blanks_around_text_ids_are_not_part_of_the_id():
    keys, unusable = hash_ids(pd.Series(["u1", " u1", "u1\t", "  ", "u 1", "\u00a0u1"]))
    assert keys[1] == keys[2] == keys[0] and unusable.tolist() == [
        False,
        False,
        False,
        True,
        False,
        False,
    ]
    assert keys[4] != keys[0] and keys[5] != keys[0]  # inner blanks and non-ASCII spaces are kept


ID_TYPES = [
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
    "decimal32",
    "decimal64",
    "decimal128",
    "decimal256",
    "string",
    "large_string",
    "string_view",
    "dictionary",
]


def _as_type(values: list, name: str):
    import decimal

    import pyarrow as pa

    if name.startswith("decimal"):
        maker = {
            "decimal32": pa.decimal32,
            "decimal64": pa.decimal64,
            "decimal128": pa.decimal128,
            "decimal256": pa.decimal256,
        }[name]
        precision = {"decimal32": 9, "decimal64": 18, "decimal128": 38, "decimal256": 76}[name]
        return pa.array(
            [None if v is None else decimal.Decimal(v) for v in values], maker(precision, 0)
        )
    if name in ("string", "large_string", "string_view"):
        return pa.array([None if v is None else str(v) for v in values], getattr(pa, name)())
    if name == "dictionary":
        return pa.array([None if v is None else str(v) for v in values]).dictionary_encode()
    return pa.array(values, getattr(pa, name)())


def _fits(value: int, name: str) -> bool:
    import numpy as np

    if name.startswith(("int", "uint")):
        info = np.iinfo(name)
        return info.min <= value <= info.max
    if name.startswith("float"):
        return abs(value) <= {"float16": 2**11, "float32": 2**24, "float64": 2**53}[name]
    if name.startswith("decimal"):
        return (
            len(str(abs(value)))
            <= {"decimal32": 9, "decimal64": 18, "decimal128": 38, "decimal256": 76}[name]
        )
    return True


@given(
    st.lists(
        st.one_of(st.integers(-(2**63), 2**64 - 1), st.integers(-300, 300)), min_size=1, max_size=20
    ),
    st.lists(st.booleans(), min_size=20, max_size=20),
    st.sampled_from(ID_TYPES),
)
def test_any_id_type_with_any_nulls_gives_the_decimal_texts_key(ids, null_at, name):
    from components.common.hashing import id_keys

    ids = [v for v in ids if _fits(v, name)]
    values = [None if null_at[i] else v for i, v in enumerate(ids)]
    keys, null, invalid = id_keys(_as_type(values, name))
    expected = [
        0
        if v is None
        else np.uint64(splitmix64_finalizer(siphash24(HASH_KEY.encode(), str(v).encode()))).view(
            np.int64
        )
        for v in values
    ]
    assert keys.tolist() == expected
    assert null.tolist() == [v is None for v in values] and not invalid.any()


def text_keys(*ids: str) -> list[int]:
    keys, null = hash_ids(pd.Series(list(ids), dtype=object))
    assert not null.any()
    return keys.tolist()


def test_float32_and_boolean_id_columns_hash_like_their_integer_text():
    as_float32, _ = hash_ids(np.array([2.0, 40.0], np.float32))
    as_bool, _ = hash_ids(np.array([True, False]))
    assert as_float32.tolist() == text_keys("2", "40")
    assert as_bool.tolist() == text_keys("1", "0")


def test_all_null_and_empty_first_ids():
    keys, null = hash_ids(pd.Series([None, None], dtype=object))
    assert (keys.dtype, keys.tolist(), null.tolist()) == (np.int64, [0, 0], [True, True])
    keys, null = hash_ids(pd.Series(["", "a", ""], dtype=object))
    assert null.tolist() == [True, False, True] and keys.tolist() == [0, *text_keys("a"), 0]
    keys, null = hash_ids(pd.Series([], dtype=object))
    assert (keys.dtype, keys.tolist(), null.tolist()) == (np.int64, [], [])


def test_bucketize_smallest_table_and_types():
    keys = np.array([-1, 0, 1, 2**62], np.int64)
    two = bucketize(keys, 2)
    assert (two.dtype, two.tolist()) == (np.int32, [1, 1, 1, 1])
    # unsigned modulo: -1 is 2**64 - 1
    assert bucketize(keys, 11, np.array([False, False, True, False])).tolist() == [
        (2**64 - 1) % 10 + 1,
        1,
        0,
        2**62 % 10 + 1,
    ]
    with pytest.raises(
        ValueError, match=r"^buckets must be >= 2 \(one is reserved for padding\), got 1$"
    ):
        bucketize(keys, 1)


def test_a_column_of_null_type_is_all_null_ids():
    """A writer with only nulls in a column (Arrow null type, or a dictionary of null values)
    gives null ids, never a crash."""
    import pyarrow as pa

    from components.common.hashing import id_keys

    for column in (
        pa.array([None, None], pa.null()),
        pa.DictionaryArray.from_arrays(pa.array([None, None], pa.int32()), pa.array([], pa.null())),
    ):
        keys, null, bad = id_keys(column)
        assert keys.tolist() == [0, 0] and null.tolist() == [True, True] and not bad.any()


# ---------------------------------------------------------------------------- Arrow types, exactly


def _key(text: str | bytes) -> int:
    data = text if isinstance(text, bytes) else text.encode()
    return int(np.uint64(splitmix64_finalizer(siphash24(HASH_KEY.encode(), data))).view(np.int64))


def test_floats_that_are_no_integer_are_invalid_and_nan_is_null():
    import pyarrow as pa

    from components.common.hashing import id_keys

    values = pa.array(
        [
            3.0,
            1.5,
            float("inf"),
            float("-inf"),
            float("nan"),
            None,
            -7.0,
            2.0**53,
            2.0**53 + 2,
            2.0**60,
        ]
    )
    keys, null, invalid = id_keys(values)
    assert null.tolist() == [False, False, False, False, True, True, False, False, False, False]
    # float64 holds every integer up to 2**53 exactly: beyond it, the writer may have merged ids
    assert invalid.tolist() == [False, True, True, True, False, False, False, False, True, True]
    assert keys.tolist() == [_key("3"), 0, 0, 0, 0, 0, _key("-7"), _key(str(2**53)), 0, 0]


@pytest.mark.parametrize(("type_", "limit"), [("float16", 2**11), ("float32", 2**24)])
def test_narrow_floats_are_exact_only_up_to_their_own_limit(type_, limit):
    """float16 and float32 are read through float64, but their own exact-integer limit applies."""
    import pyarrow as pa

    from components.common.hashing import id_keys

    values = pa.array(np.array([limit, 2 * limit, -limit, 0.5], dtype=type_))
    keys, null, invalid = id_keys(values)
    assert invalid.tolist() == [False, True, False, True] and not null.any()
    assert keys.tolist() == [_key(str(limit)), 0, _key(str(-limit)), 0]


def test_decimals_that_are_no_integer_are_invalid():
    import decimal

    import pyarrow as pa

    from components.common.hashing import id_keys

    for type_ in (pa.decimal32(5, 2), pa.decimal64(5, 2), pa.decimal128(5, 2), pa.decimal256(5, 2)):
        values = pa.array(
            [decimal.Decimal("3.00"), decimal.Decimal("1.50"), None, decimal.Decimal("-0.01")],
            type_,
        )
        keys, null, invalid = id_keys(values)
        assert null.tolist() == [False, False, True, False], type_
        assert invalid.tolist() == [False, True, False, True], type_
        assert keys.tolist() == [_key("3"), 0, 0, 0], type_


def test_decimals_of_every_width_and_scale():
    import decimal

    import pyarrow as pa

    from components.common.hashing import id_keys

    # 38 digits are the most decimal128 holds, 39 need decimal256; scale = precision: below 1
    cases = [
        (pa.decimal256(38, 0), "9" * 38),
        (pa.decimal256(39, 0), "9" * 39),
        (pa.decimal128(2, 2), "0"),
        (pa.decimal256(76, 0), "-" + "9" * 76),
    ]
    for type_, text in cases:
        keys, null, invalid = id_keys(pa.array([decimal.Decimal(text)], type_))
        assert keys.tolist() == [_key(text)] and not null.any() and not invalid.any(), type_


def test_dictionaries_whose_values_hold_nulls():
    """A dictionary may list null among its values: rows pointing at it are null ids."""
    import decimal

    import pyarrow as pa

    from components.common.hashing import id_keys

    indices = pa.array([0, 1, 1, None, 0], pa.int32())
    for dictionary, text in [
        (pa.array(["u1", None]), "u1"),
        (pa.array([4.0, None]), "4"),
        (pa.array([decimal.Decimal("4"), None], pa.decimal128(5, 0)), "4"),
        (pa.array([4, None], pa.int64()), "4"),
    ]:
        keys, null, invalid = id_keys(pa.DictionaryArray.from_arrays(indices, dictionary))
        assert null.tolist() == [False, True, True, True, False], dictionary.type
        assert not invalid.any() and keys.tolist() == [_key(text), 0, 0, 0, _key(text)], (
            dictionary.type
        )
    # NaN among a dictionary's float values is a null id, not an invalid one
    keys, null, invalid = id_keys(
        pa.DictionaryArray.from_arrays(indices, pa.array([4.0, float("nan")]))
    )
    assert null.tolist() == [False, True, True, True, False] and not invalid.any()
    assert keys.tolist() == [_key("4"), 0, 0, 0, _key("4")]
    # a dictionary of invalid values: invalid rows
    keys, null, invalid = id_keys(pa.DictionaryArray.from_arrays(indices, pa.array([2.5, 4.0])))
    assert invalid.tolist() == [True, False, False, False, True] and null.tolist() == [
        False
    ] * 3 + [True, False]
    # null-type values, more than none
    keys, null, invalid = id_keys(
        pa.DictionaryArray.from_arrays(indices, pa.array([None, None], pa.null()))
    )
    assert keys.tolist() == [0] * 5 and null.all() and not invalid.any()


def test_chunked_columns_and_columns_without_a_distinct_id():
    import pyarrow as pa

    from components.common.hashing import id_keys

    chunked = pa.chunked_array([pa.array(["a", None]), pa.array(["b", "a"])])
    keys, null, invalid = id_keys(chunked)
    assert keys.tolist() == [_key("a"), 0, _key("b"), _key("a")] and null.tolist() == [
        False,
        True,
        False,
        False,
    ]
    for empty in (
        pa.chunked_array([], pa.string()),
        pa.chunked_array([], pa.int64()),
        pa.array([], pa.string()),
    ):
        keys, null, invalid = id_keys(empty)
        assert (keys.tolist(), null.tolist(), invalid.tolist()) == (
            [],
            [],
            [],
        ) and keys.dtype == np.int64
    for nulls in (
        pa.array([None, None], pa.string()),
        pa.array([None, None], pa.float64()),
        pa.array(["", " "], pa.string()),
    ):
        keys, null, invalid = id_keys(nulls)
        assert keys.tolist() == [0, 0] and null.tolist() == [True, True] and not invalid.any()


def test_view_and_fixed_size_layouts_hash_like_their_plain_types():
    import pyarrow as pa

    from components.common.hashing import id_keys

    text, _, _ = id_keys(pa.array([" u1 ", "u2"], pa.string_view()))
    assert text.tolist() == [_key("u1"), _key("u2")]  # text: blanks around it trimmed
    raw, null, _ = id_keys(pa.array([b"\xff\xfe", b" u1 ", b""], pa.binary_view()))
    assert raw.tolist() == [_key(b"\xff\xfe"), _key(b" u1 "), 0] and null.tolist() == [
        False,
        False,
        True,
    ]
    fixed, null, _ = id_keys(pa.array([b"ab\xff", None], pa.binary(3)))
    assert fixed.tolist() == [_key(b"ab\xff"), 0] and null.tolist() == [False, True]


def test_a_type_that_holds_no_ids_is_a_type_error():
    import pyarrow as pa

    from components.common.hashing import id_keys

    message = (
        "type timestamp[s] cannot hold ids; expected integers, strings, binary, or integral "
        "decimals/floats"
    )
    with pytest.raises(TypeError, match=rf"^{re.escape(message)}$"):
        id_keys(pa.array([1, 2], pa.timestamp("s")))


def test_mixed_python_values_each_hash_as_their_own_type():
    """An object column of mixed types goes value by value: bytes as bytes, numbers as their
    decimal text, a value of no id type (a date) as its text; 1.5 and NaN are unusable."""
    import datetime as dt

    values = pd.Series(
        [b"\xff", "x", 1.5, None, float("nan"), 7.0, True, dt.date(2026, 3, 1), " y "], dtype=object
    )
    keys, unusable = hash_ids(values)
    assert unusable.tolist() == [False, False, True, True, True, False, False, False, False]
    assert keys.tolist() == [
        _key(b"\xff"),
        _key("x"),
        0,
        0,
        0,
        _key("7"),
        _key("1"),
        _key("2026-03-01"),
        _key("y"),
    ]


def test_the_id_key_is_the_deployments_secret_named_only_by_its_fingerprint(monkeypatch):
    from components.common import hashing

    monkeypatch.delenv(hashing.KEY_ENV, raising=False)
    assert hashing.id_hash_key() == HASH_KEY and hashing.is_public_key()
    public = hash_ids(["u1", "u2"])[0]
    secret = "s3cret-of-this-deployment-0123"
    monkeypatch.setenv(hashing.KEY_ENV, f"  {secret}\n")  # a Secret file's newline is no part of it
    key = hashing.id_hash_key()
    assert len(key.encode()) == 16 and key != HASH_KEY and not hashing.is_public_key()
    assert key == hashing.id_hash_key({hashing.KEY_ENV: secret})
    assert key != hashing.id_hash_key({hashing.KEY_ENV: secret + "x"})
    keyed = hash_ids(["u1", "u2"])[0]
    assert not np.array_equal(keyed, public)
    assert np.array_equal(keyed, hash_ids(["u1", "u2"], key=key)[0])
    expected = [splitmix64_finalizer(siphash24(key.encode(), s.encode())) for s in ("u1", "u2")]
    assert keyed.view(np.uint64).tolist() == expected
    fingerprint = hashing.key_fingerprint()
    assert len(fingerprint) == 16 and secret not in fingerprint and key not in fingerprint
    assert fingerprint != hashing.key_fingerprint(HASH_KEY)
    assert fingerprint == hashing.key_fingerprint(key)
    monkeypatch.setenv(hashing.KEY_ENV, "short")
    with pytest.raises(
        hashing.IdKeyError, match=r"DAILYREC_ID_KEY has 5 characters; .* at least 16"
    ):
        hashing.id_hash_key()


def test_keys_under_a_public_key_are_reversed_by_hashing_candidates_and_under_a_secret_not(
    monkeypatch,
):
    """What a model version's reader can do with its keys: enumerate ids and compare."""
    from components.common import hashing

    logged = [str(i) for i in range(1, 2001, 7)]  # the ids a snapshot's keys came from
    candidates = [str(i) for i in range(1, 2001)]
    monkeypatch.delenv(hashing.KEY_ENV, raising=False)
    stored = set(hash_ids(logged)[0].tolist())
    pairs = zip(candidates, hash_ids(candidates)[0].tolist(), strict=True)
    recovered = {c for c, k in pairs if k in stored}
    assert recovered == set(logged)  # the public key: every id back
    monkeypatch.setenv(hashing.KEY_ENV, "a-secret-the-reader-does-not-have")
    stored = set(hash_ids(logged)[0].tolist())
    guessed = hash_ids(candidates, key=HASH_KEY)[0].tolist()  # the reader knows only the public key
    assert not stored & set(guessed)


def test_a_seal_is_an_hmac_under_the_secret_and_none_without_one(monkeypatch):
    import hmac as hmac_module

    monkeypatch.delenv(hashing.KEY_ENV, raising=False)
    assert hashing.seal(b"record") is None
    secret = "seal-test-secret-9f3b2a7c5d1e"
    monkeypatch.setenv(hashing.KEY_ENV, f"  {secret}\n")
    key = hashlib.sha256(b"dailyrec-seal\0" + secret.encode()).digest()  # the documented domain
    assert hashing.seal(b"record") == hmac_module.new(key, b"record", "sha256").hexdigest()
    assert hashing.seal(b"record!") != hashing.seal(b"record")
    monkeypatch.setenv(hashing.KEY_ENV, secret + "-other")
    assert hashing.seal(b"record") != hmac_module.new(key, b"record", "sha256").hexdigest()
    monkeypatch.setenv(hashing.KEY_ENV, "aaaaaaaaaaaaaaaa")
    with pytest.raises(hashing.IdKeyError, match="too guessable"):
        hashing.seal(b"record")


@pytest.mark.parametrize(
    ("secret", "bits"),
    [("aaaaaaaaaaaaaaaa", 0.0), ("abababababababab", 16.0), ("0123456789abcdef", 64.0)],
)
def test_a_secrets_bits_are_its_length_times_the_entropy_of_its_characters(secret, bits):
    assert hashing.secret_bits(secret) == pytest.approx(bits)
    # characters, not bytes: a letter outside ASCII counts once
    swapped = secret.replace("a", "é")
    assert hashing.secret_bits(swapped) == pytest.approx(bits)


def test_a_key_fingerprint_is_a_slow_domain_separated_digest():
    """A fingerprint is scrypt under its own domain at a cost that makes each guess slow; the
    legacy one-SHA-256 form is only recognised, never written."""
    import time

    key = hashing.HASH_KEY
    expected = hashlib.scrypt(
        key.encode(),
        salt=hashing.FINGERPRINT_DOMAIN,
        dklen=8,
        maxmem=64 << 20,
        **hashing.FINGERPRINT_COST,
    ).hex()
    assert hashing.key_fingerprint(key) == expected and len(expected) == 16
    legacy = hashlib.sha256(b"dailyrec-id-key\0" + key.encode()).hexdigest()[:16]
    assert hashing.legacy_fingerprint(key) == legacy != expected
    assert hashing.is_public_key(key) and not hashing.is_public_key(key[::-1])
    # each try costs what an attacker pays per guess: tens of milliseconds at least
    assert hashing.FINGERPRINT_COST["n"] * hashing.FINGERPRINT_COST["r"] * 128 >= 32 << 20
    started = time.perf_counter()
    hashing._fingerprint.__wrapped__("a-guess-of-the-secret-000")
    assert time.perf_counter() - started > 0.02


def test_a_legacy_fingerprint_names_the_current_key_and_no_other(monkeypatch):
    """Datasets and versions written before the slow fingerprint still match their key."""
    monkeypatch.setenv(hashing.KEY_ENV, "Yq3v9Lm2Xw8Rt5Kp1Zs7")
    old, new = hashing.legacy_fingerprint(), hashing.key_fingerprint()
    assert hashing.same_key(old) and hashing.same_key(new) and hashing.same_key(old, new)
    other = hashing.legacy_fingerprint("another-deployment-secret-1")
    assert not hashing.same_key(other) and not hashing.same_key(other, new)
    assert hashing.same_key(other, other)  # two records of one (foreign) key agree
