"""State TTL bookkeeping (``runtime.ttl``): the pure bucket rules, ``clamp``, and a ``TouchIndex`` over a real
store (touches, expiry, rollback, reopening)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from freshview.runtime import ttl
from freshview.runtime.state.layout import Layout
from freshview.runtime.state.store import SpineStateStore


def test_bucket_rules():
    assert ttl.bucket_width(100) == 10 and ttl.bucket_of(105, 10) == 10 and ttl.bucket_of(-0.5, 10) == -1
    # Bucket b holds touches in [10b, 10b + 10): all are past a TTL of 100 once 10b + 10 + 100 <= now.
    assert ttl.expired_buckets(209.9, 100, 10, [10, 11, 12]) == []
    assert ttl.expired_buckets(210, 100, 10, [10, 11, 12]) == [10]
    assert ttl.expired_buckets(220, 100, 10, [12, 10, 11]) == [10, 11]
    assert ttl.expired_buckets(1e9, 100, 10, []) == []
    # A key is never evicted before the TTL, and at most one bucket late.
    for touched in (100.0, 105.5, 109.99):
        b = ttl.bucket_of(touched, 10)
        first = min(now / 10 for now in range(0, 3000) if ttl.expired_buckets(now / 10, 100, 10, [b]))
        assert touched + 100 < first + 1e-9 <= touched + 100 + 10 + 1e-9


def _delta(rows, weights):
    return pa.table({"c0": pa.array([r[0] for r in rows], pa.int32()), "c1": pa.array([r[1] for r in rows]),
                     "_weight": pa.array(weights, pa.int64())})


def _rows(table):
    return sorted(zip(*(table.column(c).to_pylist() for c in table.column_names)), key=repr)


def test_clamp_drops_only_deletes_of_rows_not_held():
    current = _delta([(1, "a"), (2, "b")], [1, 2])
    delta = _delta([(1, "a"), (2, "b"), (3, "c"), (4, "d"), (5, None)], [-1, -3, -1, 2, -1])
    clamped, dropped = ttl.clamp(delta, current)
    # (2, b): 2 held, 3 deleted -> 2 deleted; (3, c) and (5, NULL): not held -> dropped.
    assert _rows(clamped) == [(1, "a", -1), (2, "b", -2), (4, "d", 2)] and dropped == 3
    same, none = ttl.clamp(_delta([(9, "z")], [1]), current)
    assert none == 0 and _rows(same) == [(9, "z", 1)]


@pytest.fixture
def store(tmp_path):
    s = SpineStateStore(tmp_path / "state")
    yield s
    s.close()


def _keys(values):
    return pa.table({"k0": pa.array(values, pa.int64())})


def test_touch_index_moves_keys_and_expires_whole_buckets(store):
    ttl.start(store, ttl.bucket_width(10))
    index = ttl.TouchIndex("view/v/op1", pa.schema([("k0", pa.int64())]))
    index.ensure(store)
    at = lambda now: ttl.Tick(10, now)  # noqa: E731
    index.touch(store, at(100.0), _keys([1, 2, 2, 3]))
    index.touch(store, at(100.5), _keys([1]))  # same bucket: nothing moves
    index.touch(store, at(105.0), _keys([2, 4]))
    assert index.tracked(store) == 4
    assert ttl.read_meta(store)["owners"]["view/v/op1"] == [100, 105]
    assert index.expire(store, at(110.9)) is None  # bucket 100 ends at 101: not 10 s past yet
    gone = index.expire(store, at(111.0))
    assert sorted(gone.column("k0").to_pylist()) == [1, 3] and index.tracked(store) == 2
    assert ttl.read_meta(store)["owners"]["view/v/op1"] == [105]
    index.touch(store, at(112.0), _keys([1]))  # a key evicted then touched again is new
    assert sorted(index.expire(store, at(116.0)).column("k0").to_pylist()) == [2, 4]
    assert index.expire(store, at(116.5)) is None
    assert sorted(index.expire(store, at(200)).column("k0").to_pylist()) == [1]
    assert index.tracked(store) == 0 and ttl.read_meta(store)["owners"]["view/v/op1"] == []


def test_a_clock_set_back_never_shortens_a_keys_life(store):
    ttl.start(store, 1.0)
    index = ttl.TouchIndex("o", pa.schema([("k0", pa.int64())]))
    index.touch(store, ttl.Tick(10, 500.0), _keys([1]))
    index.touch(store, ttl.Tick(10, 300.0), _keys([2]))  # back in time: recorded at the newest bucket
    assert ttl.read_meta(store)["owners"]["o"] == [500]
    assert index.expire(store, ttl.Tick(10, 505)) is None


def test_touch_index_is_transactional_and_survives_reopening(tmp_path):
    path = tmp_path / "state"
    store = SpineStateStore(path)
    ttl.start(store, 1.0)
    index = ttl.TouchIndex("source/t", pa.schema([("c0", pa.string())]))
    index.ensure(store)
    index.touch(store, ttl.Tick(10, 100.0), pa.table({"c0": ["a", None]}))  # NULL keys are keys here
    store.begin()
    index.touch(store, ttl.Tick(10, 104.0), pa.table({"c0": ["a", "b"]}))
    store.rollback()
    assert index.tracked(store) == 2 and ttl.read_meta(store)["owners"]["source/t"] == [100]
    store.close()
    store = SpineStateStore(path)
    try:
        gone = index.expire(store, ttl.Tick(10, 111.0))
        assert sorted(gone.column("c0").to_pylist(), key=repr) == ["a", None]
    finally:
        store.close()


def test_drop_keys_and_forget(store):
    store.ensure_arrangement("a", Layout(pa.schema([("k0", pa.int64()), ("v", pa.string())]), ("k0",)))
    store.apply("a", pa.table({"k0": pa.array([1, 1, 2], pa.int64()), "v": ["x", "y", "z"], "_weight": [1, 2, 1]}))
    ttl.drop_keys(store, "a", _keys([1, 7]))
    assert store.scan("a").column("k0").to_pylist() == [2]
    assert ttl.distinct_keys(store, ["a"], ["k0"]).column("k0").to_pylist() == [2]
    ttl.start(store, 1.0)
    for owner in ("view/v/op1", "view/v/op2", "source/t"):
        ttl.TouchIndex(owner, pa.schema([("k0", pa.int64())])).ensure(store)
    ttl.forget(store, ["view/v/op1", "view/v/op2"])
    assert list(ttl.read_meta(store)["owners"]) == ["source/t"]
    ttl.mark_stale(store)
    assert ttl.read_meta(store)["stale"]
    ttl.drop_all(store)
    assert ttl.read_meta(store) is None and store.list_arrangements() == ["a"]
