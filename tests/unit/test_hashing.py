import numpy as np
import pandas as pd
from hypothesis import given
from hypothesis import strategies as st

from components.common.hashing import HASH_KEY, bucketize, hash_ids


def _rotl(x, b):
    return ((x << b) | (x >> (64 - b))) & 0xFFFFFFFFFFFFFFFF


def siphash24(key: bytes, data: bytes) -> int:
    """Plain-Python SipHash-2-4 (the reference the vectorized hash must equal)."""
    mask = 0xFFFFFFFFFFFFFFFF
    k0 = int.from_bytes(key[:8], "little")
    k1 = int.from_bytes(key[8:], "little")
    v = [k0 ^ 0x736F6D6570736575, k1 ^ 0x646F72616E646F6D, k0 ^ 0x6C7967656E657261, k1 ^ 0x7465646279746573]

    def rounds(n):
        for _ in range(n):
            v[0] = (v[0] + v[1]) & mask; v[1] = _rotl(v[1], 13); v[1] ^= v[0]; v[0] = _rotl(v[0], 32)  # noqa: E702
            v[2] = (v[2] + v[3]) & mask; v[3] = _rotl(v[3], 16); v[3] ^= v[2]  # noqa: E702
            v[0] = (v[0] + v[3]) & mask; v[3] = _rotl(v[3], 21); v[3] ^= v[0]  # noqa: E702
            v[2] = (v[2] + v[1]) & mask; v[1] = _rotl(v[1], 17); v[1] ^= v[2]; v[2] = _rotl(v[2], 32)  # noqa: E702

    tail_len = len(data) % 8
    for i in range(0, len(data) - tail_len, 8):
        m = int.from_bytes(data[i:i + 8], "little")
        v[3] ^= m
        rounds(2)
        v[0] ^= m
    last = (len(data) & 0xFF) << 56 | int.from_bytes(data[len(data) - tail_len:], "little")
    v[3] ^= last
    rounds(2)
    v[0] ^= last
    v[2] ^= 0xFF
    rounds(4)
    return v[0] ^ v[1] ^ v[2] ^ v[3]


def splitmix64_finalizer(x: int) -> int:
    mask = 0xFFFFFFFFFFFFFFFF
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & mask
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & mask
    return x ^ (x >> 31)


def test_siphash_reference_matches_the_published_vector():
    # SipHash-2-4 paper, appendix A: key 00..0f, empty message
    assert siphash24(bytes(range(16)), b"") == 0x726FDB47DD0E0E31


@given(st.lists(st.text(min_size=1, max_size=80), min_size=1, max_size=30))
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
    assert keys[2] == np.uint64(splitmix64_finalizer(siphash24(HASH_KEY.encode(), b"\xff\xfe"))).view(np.int64)
