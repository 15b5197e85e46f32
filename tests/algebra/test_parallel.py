"""``freshview.algebra.parallel``: hashing, sorting by hash and reordering split over threads give exactly
the serial results (any types, NULLs, chunk boundaries, skewed keys); leaves nest and fail safely."""

from __future__ import annotations

import datetime as dt
import threading
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest

from freshview.algebra import hashing, parallel


@pytest.fixture(params=[2, 3, 4])
def threads(request, monkeypatch):
    """Split anything of 8 rows or more into ``request.param`` pieces (workers) or their power of two
    (argsort's hash ranges)."""
    monkeypatch.setattr(parallel, "MIN_ROWS", 8)
    monkeypatch.setattr(parallel, "WORKERS", request.param)
    return request.param


def serial(fn, *args, **kwargs):
    saved = parallel.WORKERS
    parallel.WORKERS = 1
    try:
        return fn(*args, **kwargs)
    finally:
        parallel.WORKERS = saved


def columns(n: int, rng: np.random.Generator) -> list[pa.ChunkedArray]:
    """Columns of many types with NULLs, NaN, -0.0, long strings, in chunks of uneven lengths."""
    ints = [None if x % 7 == 0 else int(x) for x in rng.integers(-5, 5, n)]
    floats = [float(x) for x in rng.choice([0.0, -0.0, np.nan, 1.5, -2.25], n)]
    strings = [None if x == 0 else "ß" * int(x) + "x" * int(x * 37) for x in rng.integers(0, 6, n)]
    decimals = [Decimal(int(x)).scaleb(-2) for x in rng.integers(-999, 999, n)]
    dates = [dt.date(2020, 1, 1) + dt.timedelta(days=int(x)) for x in rng.integers(0, 400, n)]
    lists = [[int(x), None] if x % 2 else [] for x in rng.integers(0, 9, n)]
    cut = sorted({0, n, *rng.integers(0, max(n, 1), 3).tolist()})
    out = []
    for values, typ in [(ints, pa.int32()), (floats, pa.float64()), (strings, pa.string()),
                        (decimals, pa.decimal128(12, 2)), (dates, pa.date32()), (lists, pa.list_(pa.int64())),
                        ([x % 3 == 0 for x in range(n)], pa.bool_())]:
        arr = pa.array(values, typ)
        out.append(pa.chunked_array([arr.slice(a, b - a) for a, b in zip(cut[:-1], cut[1:])], typ))
    return out


@pytest.mark.parametrize("n", [0, 7, 8, 9, 100, 1001])
def test_hash_rows_in_pieces_equals_the_serial_hash(threads, n):
    rng = np.random.default_rng(n)
    cols = columns(n, rng)
    seed = rng.integers(0, 2**64 - 1, n, dtype=np.uint64)
    kept = seed.copy()
    for args, kwargs in [((cols,), {}), ((cols[2:],), {"seed": seed, "first": 2}), (([],), {"length": n}),
                         (([],), {"seed": seed})]:
        want = serial(hashing.hash_rows, *args, **kwargs)
        assert np.array_equal(hashing.hash_rows(*args, **kwargs), want), (args, kwargs)
    assert np.array_equal(seed, kept)  # the seed is not written to


@pytest.mark.parametrize("make", [
    lambda rng, n: rng.integers(0, 2**64 - 1, n, dtype=np.uint64),  # hashes: even over the ranges
    lambda rng, n: rng.integers(0, 5, n).astype(np.uint64),  # all in the lowest range, many equal
    lambda rng, n: rng.integers(0, 4, n).astype(np.uint64) << np.uint64(62),  # one key per range
    lambda rng, n: np.full(n, 2**64 - 1, np.uint64),  # all in the highest
])
@pytest.mark.parametrize("n", [8, 9, 1000, 20_000])
def test_argsort_by_hash_ranges_is_the_stable_argsort(threads, make, n):
    keys = make(np.random.default_rng(n), n)
    got = hashing.argsort(keys)
    assert got.dtype == np.intp
    assert np.array_equal(got, np.argsort(keys, kind="stable"))
    runs = np.concatenate([np.sort(keys[: n // 2]), np.sort(keys[n // 2:])])
    assert np.array_equal(hashing.argsort(runs, presorted=True), np.argsort(runs, kind="stable"))


def same(a: pa.Table, b: pa.Table) -> bool:
    return a.schema == b.schema and repr(a.to_pylist()) == repr(b.to_pylist())  # (NaN: repr equal, not ==)


def test_take_by_columns_equals_the_table_take(threads):
    rng = np.random.default_rng(5)
    table = pa.Table.from_arrays(columns(500, rng), names=[f"c{i}" for i in range(7)])
    for idx in (rng.permutation(500), rng.integers(0, 500, 50), np.arange(0), np.arange(7)):
        assert same(parallel.take(table, idx), table.take(pa.array(idx, pa.int64())))
    assert parallel.take(table.select(["c0"]), [3, 1]).equals(table.select(["c0"]).take([3, 1]))


def test_leaves_run_on_the_pool_nest_serially_and_raise_after_all_finished(threads):
    names: list[str] = []
    lock = threading.Lock()

    def inner(x: int) -> int:
        with lock:
            names.append(threading.current_thread().name)
        return x * 2

    def outer(x: int) -> list[int]:  # a leaf calling map_leaves runs it on its own thread (no deadlock)
        return parallel.map_leaves(inner, list(range(x)))

    assert parallel.map_leaves(outer, [3, 4, 5]) == [[0, 2, 4], [0, 2, 4, 6], [0, 2, 4, 6, 8]]
    assert any(n.startswith("freshview-leaf") for n in names)
    assert parallel.workers(10**6) == threads
    assert parallel.map_leaves(lambda _: parallel.workers(10**6), [0, 1]) == [1, threads]  # (the caller's is last)

    finished = []

    def fail(x: int) -> int:
        if x == 0:
            raise ValueError("piece 0 broke")
        finished.append(x)
        return x

    with pytest.raises(ValueError, match="piece 0 broke"):
        parallel.map_leaves(fail, [0, 1, 2, 3])
    assert sorted(finished) == [1, 2, 3]


def test_small_inputs_and_one_worker_stay_serial(monkeypatch):
    monkeypatch.setattr(parallel, "WORKERS", 4)
    assert parallel.workers(parallel.MIN_ROWS - 1) == 1
    assert parallel.workers(parallel.MIN_ROWS) >= 2
    monkeypatch.setattr(parallel, "WORKERS", 1)
    assert parallel.workers(10**9) == 1
    assert parallel.slices(10, 3) == [(0, 3), (3, 3), (6, 4)]


def test_the_thread_count_setting(monkeypatch):
    monkeypatch.setenv("FRESHVIEW_THREADS", "3")
    assert parallel._configured() == 3
    monkeypatch.setenv("FRESHVIEW_THREADS", "0")
    assert parallel._configured() == 1
    monkeypatch.setenv("FRESHVIEW_THREADS", "")
    assert 1 <= parallel._configured() <= 4
    monkeypatch.setenv("FRESHVIEW_THREADS", "two")
    with pytest.raises(ValueError, match="FRESHVIEW_THREADS must be a whole number of threads, not 'two'"):
        parallel._configured()
