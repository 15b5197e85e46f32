"""The local kernels' equi-join: rows paired by hashing their keys (``batch.equal_pairs``) against Acero's
hash join of the same rows (``_acero_join``): NULL keys, duplicates, NaN and -0.0, several keys, strings."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from freshview.runtime.kernels import arrow as arrow_kernels
from freshview.runtime.kernels.arrow import ArrowKernels
from freshview.schema import WEIGHT

INTS = [None, 0, 1, 2, -3]
FLOATS = [None, 0.0, -0.0, math.nan, 1.5, -1.5]
TEXTS = [None, "", "a", "ab", "é"]
KEY_DOMAINS = {"int": (pa.int64(), INTS), "float": (pa.float64(), FLOATS), "text": (pa.string(), TEXTS)}


def side(rows: list[tuple], key_types: list[pa.DataType], prefix: str) -> pa.Table:
    """(data, keys..., weight) rows as a side of the kernel's join: data columns, key columns, weight."""
    cols = list(zip(*rows)) if rows else [[] for _ in range(2 + len(key_types))]
    arrays = [pa.array(cols[0], pa.float64())] + [pa.array(c, t) for c, t in zip(cols[1:-1], key_types)]
    names = [f"{prefix}0"] + [f"{prefix}k{i}" for i in range(len(key_types))] + [WEIGHT]
    return pa.Table.from_arrays(arrays + [pa.array(cols[-1], pa.int64())], names=names)


def joined(left: pa.Table, right: pa.Table, nkeys: int) -> list:
    schema = pa.schema([pa.field("c0", pa.float64()), pa.field("c1", pa.float64()), pa.field(WEIGHT, pa.int64())])
    out = ArrowKernels().join(left, right, nkeys, schema, {})
    return sorted((repr(r["c0"]), repr(r["c1"]), r[WEIGHT]) for r in out.to_pylist())


def acero(left: pa.Table, right: pa.Table, nkeys: int) -> list:
    arrays, lw, rw = arrow_kernels._acero_join(left, right, 1, 1, nkeys)
    rows = zip(arrays[0].to_pylist(), arrays[1].to_pylist(), lw.to_pylist(), rw.to_pylist())
    return sorted((repr(a), repr(b), x * y) for a, b, x, y in rows)


@st.composite
def two_sides(draw):
    kinds = draw(st.lists(st.sampled_from(sorted(KEY_DOMAINS)), min_size=1, max_size=2))
    types = [KEY_DOMAINS[k][0] for k in kinds]

    def rows(n_max):
        return draw(st.lists(st.tuples(st.sampled_from([0.5, -0.0, math.nan, None]),
                                       *[st.sampled_from(KEY_DOMAINS[k][1]) for k in kinds],
                                       st.sampled_from([1, -1, 2])), max_size=n_max))
    return side(rows(12), types, "l"), side(rows(12), types, "r"), len(kinds)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sides=two_sides())
def test_hash_pairs_equal_acero_join(sides):
    left, right, nkeys = sides
    assert joined(left, right, nkeys) == acero(left, right, nkeys)


def test_null_keys_match_nothing_and_floats_normalised():
    left = side([(1.0, None, 1), (2.0, -0.0, 1), (3.0, math.nan, 2)], [pa.float64()], "l")
    right = side([(10.0, None, 1), (20.0, 0.0, -1), (30.0, math.nan, 1), (40.0, math.nan, 1)], [pa.float64()], "r")
    assert joined(left, right, 1) == sorted([("2.0", "20.0", -1), ("3.0", "30.0", 2), ("3.0", "40.0", 2)])


def test_keys_of_different_types_are_left_to_acero():
    left = side([(1.0, 1, 1), (2.0, 2, 1)], [pa.int32()], "l")
    right = side([(10.0, 1, 1), (20.0, 3, 1)], [pa.int64()], "r")
    assert arrow_kernels._equi_pairs(left, right, 1, 1, 1) is None


def test_cross_product_without_keys():
    left = pa.table({"l0": pa.array([1.0, 2.0]), WEIGHT: pa.array([1, 2], pa.int64())})
    right = pa.table({"r0": pa.array([5.0, 6.0, 7.0]), WEIGHT: pa.array([1, -1, 1], pa.int64())})
    li, ri = arrow_kernels._equi_pairs(left, right, 1, 1, 0)
    assert list(zip(li.tolist(), ri.tolist())) == [(i, j) for i in range(2) for j in range(3)]
    assert len(joined(left, right, 0)) == 6
