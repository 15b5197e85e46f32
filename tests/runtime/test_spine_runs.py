"""The store's pure parts: merge policy, checkpoint decision, sorted runs, searching and merging them."""

from __future__ import annotations

from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest

from freshview.algebra.batch import consolidate
from freshview.runtime.state import runs as runs_module
from freshview.runtime.state.layout import Layout
from freshview.runtime.state.policy import Merge, plan_merge, should_checkpoint
from freshview.runtime.state.runs import Run, build_run, merge_runs, sort_order


# ---------------------------------------------------------------------- policy
@pytest.mark.parametrize("sizes, first, want", [
    ([], 0, None),
    ([5], 0, None),
    ([100, 10], 0, None),                       # the newest is small: keep it
    ([100, 60], 0, Merge(0, 2, False)),         # at least half the one before: merge
    ([100, 30, 10], 0, None),
    ([200, 30, 10, 10], 0, Merge(1, 4, False)),  # a cascade is one merge: 10+10 >= 30/2, but 50 < 200/2
    ([100, 30, 10, 10], 0, Merge(0, 4, False)),  # ... and it goes on while the total keeps up
    ([100, 60, 40], 2, None),                   # runs before `first` are busy
    ([100, 60, 40, 30], 2, Merge(2, 4, False)),
])
def test_plan_merge_follows_the_spine_rule(sizes, first, want):
    assert plan_merge(sizes, first, ratio=2.0, large_rows=10**9) == want


def test_plan_merge_marks_large_merges():
    assert plan_merge([600, 500], ratio=2.0, large_rows=1000) == Merge(0, 2, True)
    assert plan_merge([400, 500], ratio=2.0, large_rows=1000) == Merge(0, 2, False)


def test_spine_keeps_logarithmically_many_runs_and_rewrites_rows_logarithmically():
    sizes: list[int] = []
    rewritten = 0
    for _ in range(4096):
        sizes.append(1)
        while (m := plan_merge(sizes, ratio=2.0, large_rows=10**9)) is not None:
            rewritten += sum(sizes[m.start:m.stop])
            sizes[m.start:m.stop] = [sum(sizes[m.start:m.stop])]
        assert len(sizes) <= 13  # log2(4096) + 1
    assert rewritten <= 4096 * 13


def test_should_checkpoint():
    assert not should_checkpoint(10, 10, 100)
    assert should_checkpoint(101, 0, 100) and should_checkpoint(0, 101, 100)


# ---------------------------------------------------------------------- runs
LAYOUT = Layout(pa.schema([("k", pa.int64()), ("s", pa.string()), ("v", pa.float64())]), ("k",), order="v")


def rows(rng: np.random.Generator, n: int, keys: int = 50) -> pa.Table:
    k = rng.integers(0, keys, n)
    return pa.table({"k": k, "s": pa.array(k % 7).cast(pa.string()),
                     "v": pa.array(np.where(k % 5 == 0, np.nan, (k % 11) / 2.0), mask=(k % 13 == 0)),
                     "_weight": rng.choice([-1, 1, 2], n)})


def check_sorted(run: Run) -> None:
    """Sorted by key hash, then by value in SQL order (NaN above numbers, NULL last); no zero weights."""
    kh = run.key_hash
    assert (kh[1:] >= kh[:-1]).all()
    order = [(2,) if v is None else (1,) if v != v else (0, v) for v in run.table.column("v").to_pylist()]
    assert all(order[i - 1] <= order[i] for i in range(1, len(run)) if kh[i] == kh[i - 1])
    assert (np.asarray(run.table.column("_weight")) != 0).all()


def as_dict(t: pa.Table) -> dict:
    return {(r["k"], r["s"], "nan" if r["v"] != r["v"] else r["v"]): r["_weight"] for r in t.to_pylist()}


def test_build_and_merge_many_runs_equal_consolidating_everything():
    rng = np.random.default_rng(7)
    parts = [rows(rng, int(rng.integers(1, 300))) for _ in range(25)]
    built = [r for r in (build_run(p, LAYOUT) for p in parts) if r is not None]
    for run in built:
        check_sorted(run)
    merged = merge_runs(built, LAYOUT)
    check_sorted(merged)
    want = consolidate(pa.concat_tables(parts))
    assert as_dict(merged.table.select(LAYOUT.weighted_schema.names)) == as_dict(want)
    cancelled = merge_runs([build_run(parts[0], LAYOUT), build_run(parts[0].set_column(
        3, "_weight", pa.compute.negate(parts[0].column("_weight"))), LAYOUT)], LAYOUT)
    assert cancelled is None


def test_sort_order_orders_ties_by_value_then_row_hash():
    kh = np.array([5, 3, 5, 5, 3], dtype=np.uint64)
    rh = np.array([9, 1, 2, 7, 0], dtype=np.uint64)
    values = pa.chunked_array([pa.array([2.0, None, 1.0, 1.0, 4.0])])
    assert sort_order(kh, rh, values).tolist() == [4, 1, 2, 3, 0]
    assert sort_order(kh, rh).tolist() == [4, 1, 2, 3, 0]


@pytest.mark.parametrize("n", [10, 5000])
def test_ranges_with_and_without_the_bucket_directory(monkeypatch, n):
    rng = np.random.default_rng(n)
    run = build_run(rows(rng, n, keys=n // 3), LAYOUT)
    probes = np.concatenate([run.key_hash[rng.integers(0, len(run), 50)],
                             rng.integers(0, 2**64 - 1, 50, dtype=np.uint64), np.array([0, 2**64 - 1], np.uint64)])
    want = np.searchsorted(run.key_hash, probes, "left"), np.searchsorted(run.key_hash, probes, "right")
    monkeypatch.setattr(runs_module, "INDEX_MIN_ROWS", 1)
    lo, hi = run.ranges(probes)
    assert np.array_equal(lo, want[0]) and np.array_equal(hi, want[1])


@pytest.mark.parametrize("values, dtype", [
    ([3, -1, None, 2**62, -(2**63), 0, None, -1], pa.int64()),
    ([3, 0, None, 255, 7], pa.uint8()),
    ([1.5, float("nan"), -0.0, None, float("-inf"), float("inf"), -2.5, 0.0], pa.float64()),
    ([1.5, None, -2.5, float("nan")], pa.float32()),
    ([Decimal("1e30"), Decimal("-1e30"), None, Decimal("0.01"), Decimal("-0.01"), Decimal("1e-6")],
     pa.decimal128(38, 6)),
    ([True, None, False, True], pa.bool_()),
    (["b", "", None, "é", "B", "a"], pa.string()),
    ([5, None, -5], pa.timestamp("us", tz="UTC")),
    ([None, None], pa.null()),
])
def test_value_order_is_sql_order_with_nulls_last(values, dtype):
    arr = pa.chunked_array([pa.array(values, dtype)])
    got = [values[i] for i in runs_module._value_order(arr)]
    assert got == [values[i] for i in pa.compute.sort_indices(arr).to_pylist()] or \
        all(x is None for x in values)  # Arrow's order: NaN above numbers, NULLs last
    non_null = [v for v in got if v is not None]
    assert got == non_null + [None] * (len(got) - len(non_null))
