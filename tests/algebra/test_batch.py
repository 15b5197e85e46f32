"""consolidate: one semantics whichever path runs (grouping by value, or hashes and a given order)."""

from __future__ import annotations

import math
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from freshview.algebra import hashing
from freshview.algebra.batch import consolidate, normalize_floats, rows_equal

ROWS = st.lists(st.tuples(st.sampled_from([None, 0, 1, 2]), st.sampled_from([None, "a", "é", ""]),
                          st.sampled_from([None, 0.0, -0.0, math.nan, 1.5]),
                          st.sampled_from([None, Decimal("1.5"), Decimal("-1e30")]), st.integers(-2, 2)),
                max_size=30)
SCHEMA = pa.schema([("i", pa.int64()), ("s", pa.string()), ("f", pa.float64()), ("d", pa.decimal128(38, 2)),
                    ("_weight", pa.int64())])


def as_dict(t: pa.Table) -> dict:
    out = {}
    for r in t.to_pylist():
        key = tuple("NaN" if isinstance(v, float) and math.isnan(v) else v for k, v in r.items() if k != "_weight")
        assert key not in out  # each distinct row once
        out[key] = r["_weight"]
    return out


def model(rows: list[tuple], keep_zero: bool = False) -> dict:
    out: dict = {}
    for *values, w in rows:
        key = tuple("NaN" if isinstance(v, float) and math.isnan(v) else (v + 0.0 if isinstance(v, float) else v)
                    for v in values)
        out[key] = out.get(key, 0) + w
    return {k: w for k, w in out.items() if w or keep_zero}


def make(rows: list[tuple]) -> pa.Table:
    return pa.Table.from_pylist([dict(zip(SCHEMA.names, r)) for r in rows], schema=SCHEMA)


@settings(max_examples=80, deadline=None)
@given(ROWS, st.booleans())
def test_every_path_has_the_same_semantics(rows, keep_zero):
    table = make(rows)
    want = model(rows, keep_zero)
    by_value = consolidate(table, keep_zero=keep_zero)
    assert by_value.schema == SCHEMA and as_dict(by_value) == want
    normal = normalize_floats(table)
    hashes = hashing.hash_rows(normal.columns[:4], length=len(rows))
    by_hash = consolidate(normal, hashes=hashes, keep_zero=keep_zero)
    assert by_hash.schema == SCHEMA and as_dict(by_hash) == want
    order = hashing.argsort(hashes)
    sorted_out = consolidate(normal, hashes=hashes, order=order, keep_zero=keep_zero)
    assert as_dict(sorted_out) == want
    firsts = [int(np.flatnonzero(hashes == h)[0]) for h in hashing.hash_rows(sorted_out.columns[:4])]
    assert firsts == sorted(firsts, key=lambda i: list(order).index(i))  # in the given order
    colliding = consolidate(normal, hashes=hashes & np.uint64(1), keep_zero=keep_zero)  # nearly all collide
    assert as_dict(colliding) == want


def test_results_keep_first_appearance_and_columns():
    t = pa.table({"_weight": [1, 1, 1, -1], "b": ["x", "y", "x", "y"], "a": pa.array([1, 2, 1, 2], pa.int8())})
    for out in (consolidate(t), consolidate(t, hashes=hashing.hash_rows([t["b"], t["a"]]))):
        assert out.schema == t.schema and out.to_pylist() == [{"_weight": 2, "b": "x", "a": 1}]
    weights_only = pa.table({"_weight": pa.array([2, -1], pa.int64())})
    assert consolidate(weights_only).to_pylist() == [{"_weight": 1}]
    assert consolidate(pa.table({"_weight": pa.array([1, -1], pa.int64())})).num_rows == 0
    assert consolidate(t.slice(0, 0)).num_rows == 0


def test_hash_collisions_between_different_rows_are_exact():
    t = normalize_floats(make([(1, "a", 1.5, None, 1), (2, "b", None, None, 1), (1, "a", 1.5, None, 2),
                               (2, "b", None, None, -1)]))
    same = np.zeros(4, dtype=np.uint64)  # every row "collides"
    assert as_dict(consolidate(t, hashes=same)) == {(1, "a", 1.5, None): 3}
    assert as_dict(consolidate(t, hashes=same, order=np.array([3, 2, 1, 0]))) == {(1, "a", 1.5, None): 3}


def test_rows_equal_is_null_safe():
    a = pa.table({"x": [1, None, None], "f": [math.nan, 0.0, None]})
    b = pa.table({"x": [1, None, 2], "f": [math.nan, -0.0, None]})
    assert rows_equal(a, b).tolist() == [True, True, False]


@pytest.mark.parametrize("value", [-0.0, math.nan])
def test_normalize_floats(value):
    out = normalize_floats(pa.table({"f": pa.array([value], pa.float32())}))
    assert out.schema.field("f").type == pa.float32()
    assert str(out.column("f")[0].as_py()) in ("0.0", "nan")
