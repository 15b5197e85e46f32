"""Hashing: the documented algorithm (as plain Python), pinned values, canonical equality, argsort."""

from __future__ import annotations

import datetime as dt
import decimal
import math
import struct
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from freshview.algebra import hashing
from freshview.algebra.hashing import HASH_VERSION, argsort, canonical, hash_array, hash_rows, null_hash, values_equal

M64 = 2**64 - 1
G = 0x9E3779B97F4A7C15


def mix(x: int) -> int:
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & M64
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def reference_value_hash(value, dtype: pa.DataType, position: int = 0) -> int:
    """The module docstring's algorithm, one value at a time."""
    if value is None:
        return mix((0x6A09E667F3BCC909 + position) & M64)
    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype):
        data = value.encode()
        poly = sum((b + 1) * pow(0x100000001B3, j, 2**64) for j, b in enumerate(data)) & M64
        return mix(poly ^ mix((len(data) + G) & M64))
    if pa.types.is_floating(dtype):
        value = float(value) + 0.0
        word = 0x7FF8000000000000 if math.isnan(value) else struct.unpack("<Q", struct.pack("<d", value))[0]
        return mix((word + G) & M64)
    if pa.types.is_decimal(dtype):
        with decimal.localcontext(prec=80):
            unscaled = int(value.scaleb(dtype.scale)) & (2**128 - 1)
        return mix(mix(((unscaled & M64) + G) & M64) ^ (unscaled >> 64))
    return mix((int(value) + G) & M64)


def reference_row_hash(values: list, types: list[pa.DataType]) -> int:
    r = 0x243F6A8885A308D3
    for i, (v, t) in enumerate(zip(values, types)):
        r = ((r ^ reference_value_hash(v, t, i)) * G) & M64
    return mix(r)


def test_version_and_pinned_values():
    # These numbers are part of the state files' format: a change needs a new HASH_VERSION.
    assert HASH_VERSION == 1
    assert hash_array(pa.array([0, 5, -1, None], pa.int64())).tolist() == \
        [16294208416658607535, 7134611160154358618, 16490336266968443936, 3847398142028685078]
    assert hash_array(pa.array(["", "abc", "ünï ✓", None])).tolist() == \
        [5197578548964807871, 3187825842522629186, 16397924622232068879, 3847398142028685078]
    assert hash_array(pa.array([1.5, -0.0, math.nan, None])).tolist() == \
        [15481881892811333770, 16294208416658607535, 14351126860892846918, 3847398142028685078]
    assert hash_array(pa.array([Decimal("1.50"), Decimal("-1e30")], pa.decimal128(38, 2))).tolist() == \
        [4999307987673808698, 8887068463482480144]
    assert hash_array(pa.array([True, False])).tolist() == [10451216379200822465, 16294208416658607535]
    assert hash_rows([pa.array([1, None], pa.int32()), pa.array(["a", "a"])]).tolist() == \
        [16563741858118069191, 14571359940033031651]
    assert hash_rows([], length=1).tolist() == [16852473371444490038]
    assert (null_hash(0), null_hash(3)) == (3847398142028685078, 6303508680818792179)


VALUES = {
    pa.int8(): st.integers(-128, 127), pa.int16(): st.integers(-(2**15), 2**15 - 1),
    pa.int32(): st.integers(-(2**31), 2**31 - 1), pa.int64(): st.integers(-(2**63), 2**63 - 1),
    pa.uint8(): st.integers(0, 255), pa.uint32(): st.integers(0, 2**32 - 1),
    pa.float64(): st.floats(allow_nan=True), pa.float32(): st.floats(width=32, allow_nan=True),
    pa.string(): st.text(max_size=12), pa.large_string(): st.text(max_size=12),
    pa.decimal128(38, 6): st.decimals(min_value=-(10**31), max_value=10**31, places=6),
    pa.decimal128(5, 2): st.decimals(min_value=-999, max_value=999, places=2),
    pa.bool_(): st.booleans(),
}


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_vectorised_hashes_follow_the_documented_algorithm(data):
    types = data.draw(st.lists(st.sampled_from(list(VALUES)), min_size=1, max_size=3))
    n = data.draw(st.integers(0, 8))
    cols = [data.draw(st.lists(st.one_of(st.none(), VALUES[t]), min_size=n, max_size=n)) for t in types]
    arrays = [pa.array(c, t) for c, t in zip(cols, types)]
    for c, t, arr in zip(cols, types, arrays):
        assert hash_array(arr, 2).tolist() == [reference_value_hash(v, t, 2) for v in c]
    assert hash_rows(arrays, length=n).tolist() == [reference_row_hash(list(r), types) for r in zip(*cols)] if n \
        else hash_rows(arrays, length=n).tolist() == []


def test_temporal_and_null_types():
    day = dt.date(2024, 2, 29)
    assert hash_array(pa.array([day], pa.date32())).tolist() == [reference_value_hash(19782, pa.int64())]
    for t in (pa.timestamp("us"), pa.timestamp("ms", tz="UTC"), pa.duration("s"), pa.time64("us")):
        assert hash_array(pa.array([7, None], pa.int64()).cast(t)).tolist() == \
            [reference_value_hash(7, pa.int64()), null_hash(0)]
    assert hash_array(pa.nulls(2), 4).tolist() == [null_hash(4)] * 2
    with pytest.raises(TypeError, match="cannot hash"):
        hash_array(pa.array([{"a": 1}]))


def test_lists_and_intervals_hash_and_compare_by_value():
    from freshview.algebra.hashing import canonical, values_equal

    lists = pa.array([["ab", "c"], ["a", "bc"], [], None, [None], ["ab", "c"], [""], ["ab", "c"]], pa.list_(pa.string()))
    h = hash_array(lists).tolist()
    assert len(set(h[:5] + h[6:7])) == 6 and h[0] == h[5] == h[7]
    assert hash_array(lists.slice(5)).tolist() == h[5:]  # slices (offsets) hash alike
    ints = pa.array([[1, None, 2], [1, 2], [1, None, 2], [-0.0]], pa.list_(pa.float64()))
    assert hash_array(ints).tolist()[0] == hash_array(ints).tolist()[2] != hash_array(ints).tolist()[1]
    assert hash_array(ints).tolist()[3] == hash_array(pa.array([[0.0]], pa.list_(pa.float64()))).tolist()[0]
    c = canonical(lists)
    assert values_equal(c, c, np.array([0, 0, 2, 3]), np.array([5, 1, 3, 3])).tolist() == [True, False, False, True]
    iv = pa.array([(0, 1, 0), (0, 0, 86_400 * 10**9), (0, 1, 0)], pa.month_day_nano_interval())
    assert hash_array(iv).tolist()[0] == hash_array(iv).tolist()[2] != hash_array(iv).tolist()[1]  # representation


def test_equal_values_hash_equal_across_types_and_layouts():
    assert hash_array(pa.array([5, -3], pa.int8())).tolist() == hash_array(pa.array([5, -3], pa.int64())).tolist()
    assert hash_array(pa.array([5], pa.uint32())).tolist() == hash_array(pa.array([5], pa.int64())).tolist()
    assert hash_array(pa.array([1.5, -0.0], pa.float32())).tolist() == hash_array(pa.array([1.5, 0.0])).tolist()
    nans = np.array([np.nan, -np.nan, np.float64("nan")])
    nans.view(np.uint64)[2] |= 1  # a NaN with another payload
    assert len(set(hash_array(pa.array(nans)).tolist())) == 1
    words = ["x", "a", None, "", "abc", "ünï"]
    whole = hash_array(pa.array(words)).tolist()
    assert hash_array(pa.array(words).slice(1)).tolist() == whole[1:]
    assert hash_array(pa.chunked_array([words[:2], words[2:]])).tolist() == whole
    assert hash_array(pa.array(words, pa.large_string())).tolist() == whole


def test_long_strings_are_hashed_in_slices(monkeypatch):
    words = ["x" * 1000, "ab" * 700, "", "z"] * 50
    whole = hash_array(pa.array(words)).tolist()
    monkeypatch.setattr(hashing, "_STRING_CHUNK", 1500)
    assert hash_array(pa.array(words)).tolist() == whole
    assert whole[0] == reference_value_hash(words[0], pa.string())


def test_values_equal_is_exact_with_null_and_nan():
    x = canonical(pa.array([1.0, None, math.nan, -0.0, 2.0]))
    y = canonical(pa.array([1.0, None, math.nan, 0.0, None]))
    i = np.arange(5)
    assert values_equal(x, y, i, i).tolist() == [True, True, True, True, False]
    s = canonical(pa.array(["ab", "abc", None, "", "ab", "b"]))
    assert values_equal(s, s, np.array([0, 0, 2, 3, 1, 0]), np.array([4, 1, 2, 3, 1, 5])).tolist() == \
        [True, False, True, True, True, False]
    d = canonical(pa.array([Decimal("1e30"), Decimal("1e30") + 2**64], pa.decimal128(38, 0)))
    assert values_equal(d, d, np.array([0]), np.array([1])).tolist() == [False]  # high words differ
    n = canonical(pa.nulls(2))
    assert values_equal(n, n, np.array([0]), np.array([1])).tolist() == [True]


@pytest.mark.parametrize("make", [
    lambda rng, n: rng.integers(0, 2**64 - 1, n, dtype=np.uint64),  # hashes
    lambda rng, n: rng.integers(0, 5, n).astype(np.uint64) << np.uint64(61),  # many equal keys
    lambda rng, n: (rng.integers(0, 3, n).astype(np.uint64) << np.uint64(50)) | rng.integers(0, 9, n).astype(np.uint64),
])
@pytest.mark.parametrize("n", [0, 1, 2, 1000, 100_000])
def test_argsort_is_a_stable_argsort(make, n):
    keys = make(np.random.default_rng(n), n)
    assert np.array_equal(argsort(keys), np.argsort(keys, kind="stable"))
    runs = np.concatenate([np.sort(keys[: n // 2]), np.sort(keys[n // 2:])])
    assert np.array_equal(argsort(runs, presorted=True), np.argsort(runs, kind="stable"))


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 64).flatmap(lambda width: st.lists(st.integers(0, 2**width - 1), max_size=40)),
       st.integers(0, 2**64 - 1), st.booleans())
def test_argsort_of_any_keys(values, offset, presorted):
    keys = np.array(values, dtype=np.uint64) + np.uint64(offset)  # any spread of values, anywhere
    if presorted:
        keys = np.concatenate([np.sort(keys[: len(keys) // 2]), np.sort(keys[len(keys) // 2:])])
    assert np.array_equal(argsort(keys, presorted), np.argsort(keys, kind="stable"))


def test_argsort_at_the_edge_of_exact_packing():
    rng = np.random.default_rng(3)
    for n in (2, 3, 5, 9, 33, 1000):
        bits = (n - 1).bit_length()
        for spread in (64 - bits - 1, 64 - bits, 64 - bits + 1):  # keys fit above the index bits, or just not
            keys = rng.integers(0, 2**spread - 1, n, dtype=np.uint64, endpoint=True) | np.uint64(1)
            assert np.array_equal(argsort(keys), np.argsort(keys, kind="stable")), (n, spread)


@pytest.mark.parametrize("values, dtype", [
    ([1, None, -3, 2**40, 0, 7], pa.int64()), ([1, None, -3, 0, 7, 9], pa.int16()), ([1, None, 3, 0, 7, 9], pa.uint32()),
    ([1.5, None, -0.0, float("nan"), 2.0, 0.0], pa.float32()), ([True, None, False, True, False, True], pa.bool_()),
    (["a", None, "", "é", "bb", "c"], pa.string()), (["a", None, "", "é", "bb", "c"], pa.large_string()),
    ([Decimal("1.5"), None, Decimal("-2.25"), Decimal("0"), Decimal("9.99"), Decimal("1")], pa.decimal128(10, 2)),
    ([1, None, 3, 4, 5, 6], pa.date32()), ([[1], None, [], [2, None], [3], [4]], pa.list_(pa.int64())),
])
def test_canonical_of_a_slice_is_the_slice_of_canonical(values, dtype):
    """Each type's words are read at the array's offset (a slice reads the same words as a copy)."""
    arr = pa.array(values, dtype)
    for start in range(1, 4):
        sliced, copy = arr.slice(start, 3), pa.array(values[start:start + 3], dtype)
        assert hash_array(sliced).tolist() == hash_array(copy).tolist()
        assert values_equal(canonical(sliced), canonical(copy), np.arange(3), np.arange(3)).all()
