"""The SQLite state store against a pure-Python model: consolidation, lookups, extremes, atomicity."""

from __future__ import annotations

import datetime as dt
import random
from collections import defaultdict
from decimal import Decimal

import pyarrow as pa
import pytest

from freshview.errors import StateError
from freshview.runtime.state import SqliteStateStore

TYPES = {
    "i2": pa.int16(), "i4": pa.int32(), "i8": pa.int64(), "f4": pa.float32(), "f8": pa.float64(),
    "d": pa.decimal128(10, 2), "dw": pa.decimal128(38, 6), "s": pa.string(), "b": pa.bool_(),
    "dt": pa.date32(), "ts": pa.timestamp("us"), "tz": pa.timestamp("us", tz="UTC"),
}
SAMPLE = {
    "i2": [1, -2, None], "i4": [7, None, -9], "i8": [2**40, 0, None], "f4": [1.5, None, -0.25],
    "f8": [2.5, -1e9, None], "d": [Decimal("1.50"), Decimal("-99.99"), None],
    "dw": [Decimal("123456789012345678901234.5"), None, Decimal("-0.000001")],
    "s": ["a", "", None], "b": [True, None, False],
    "dt": [dt.date(2024, 2, 29), None, dt.date(1970, 1, 1)],
    "ts": [dt.datetime(2024, 1, 1, 12, 0, 0, 123456), None, dt.datetime(1999, 12, 31)],
    "tz": [dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc), None, dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc)],
}


def table(schema: pa.Schema, rows: list[tuple], weights: list[int]) -> pa.Table:
    cols = list(zip(*rows)) if rows else [()] * len(schema)
    arrays = [pa.array(list(c), f.type) for c, f in zip(cols, schema)]
    return pa.Table.from_arrays(arrays + [pa.array(weights, pa.int64())],
                                schema=pa.schema(list(schema) + [pa.field("_weight", pa.int64())]))


def as_counter(t: pa.Table) -> dict:
    out = {}
    for r in t.to_pylist():
        w = r.pop("_weight")
        out[tuple(r.values())] = out.get(tuple(r.values()), 0) + w
    return out


@pytest.fixture
def store(tmp_path):
    s = SqliteStateStore(tmp_path / "state")
    yield s
    s.close()


def test_every_type_round_trips(store):
    schema = pa.schema([pa.field(n, t) for n, t in TYPES.items()])
    rows = list(zip(*[SAMPLE[n] for n in TYPES]))
    store.begin()
    store.ensure_arrangement("all", schema, ["i4"])
    store.apply("all", table(schema, rows, [1, 2, 1]))
    store.commit()
    back = store.scan("all")
    assert back.schema.remove(len(schema)).equals(schema)
    assert as_counter(back) == {r: w for r, w in zip(rows, [1, 2, 1])}


def test_apply_consolidates_and_reports_weights(store):
    schema = pa.schema([("k", pa.int32()), ("v", pa.decimal128(10, 2))])
    store.ensure_arrangement("a", schema, ["k"])
    res = store.apply("a", table(schema, [(1, Decimal("1.5")), (1, Decimal("1.50")), (None, None)], [1, 1, 1]))
    assert sorted(as_counter(res.drop(["_old_weight"])).items(), key=repr) == sorted(
        {(1, Decimal("1.50")): 2, (None, None): 1}.items(), key=repr)
    res = store.apply("a", table(schema, [(1, Decimal("1.50")), (None, None)], [-2, -1]))
    assert sorted(res.column("_old_weight").to_pylist()) == [1, 2]
    assert res.column("_weight").to_pylist() == [0, 0]
    assert store.count("a") == 0


def test_lookup_matches_keys_and_never_null(store):
    schema = pa.schema([("k1", pa.int64()), ("k2", pa.string()), ("v", pa.int64())])
    store.ensure_arrangement("m", schema, ["k1", "k2"])
    store.ensure_arrangement("s", schema, ["k1"])
    rows = [(1, "a", 10), (1, "b", 11), (2, "a", 12), (None, "a", 13), (1, None, 14)]
    for name in ("m", "s"):
        store.apply(name, table(schema, rows, [1] * 5))
    keys = pa.table({"k1": pa.array([1, 1, None], pa.int64()), "k2": ["a", "a", "a"]})
    assert as_counter(store.lookup("m", keys)) == {(1, "a", 10): 1}
    single = store.lookup("s", pa.table({"k1": pa.array([1, None, 1], pa.int64())}))
    assert as_counter(single) == {(1, "a", 10): 1, (1, "b", 11): 1, (1, None, 14): 1}
    assert store.lookup("s", pa.table({"k1": pa.array([], pa.int64())})).num_rows == 0


def test_extreme_after_deleting_the_current_minimum(store):
    schema = pa.schema([("g", pa.string()), ("v", pa.decimal128(38, 2))])
    store.ensure_arrangement("mm", schema, ["g"])
    vals = [Decimal("-5.00"), Decimal("3.25"), Decimal("-40.10"), Decimal("1e20")]
    store.apply("mm", table(schema, [("x", v) for v in vals] + [(None, Decimal("7")), ("x", None)], [1] * 6))
    keys = pa.table({"g": pa.array(["x", None, "nobody"])})
    lo = {r["g"]: r["v"] for r in store.extreme("mm", keys, "v", "min").to_pylist()}
    hi = {r["g"]: r["v"] for r in store.extreme("mm", keys, "v", "max").to_pylist()}
    assert lo == {"x": Decimal("-40.10"), None: Decimal("7.00")}
    assert hi == {"x": Decimal("1e20"), None: Decimal("7.00")}
    store.apply("mm", table(schema, [("x", Decimal("-40.10"))], [-1]))
    lo = {r["g"]: r["v"] for r in store.extreme("mm", keys, "v", "min").to_pylist()}
    assert lo["x"] == Decimal("-5.00")


def test_rollback_and_reopen(tmp_path):
    schema = pa.schema([("k", pa.int32())])
    s = SqliteStateStore(tmp_path / "st")
    s.begin()
    s.ensure_arrangement("a", schema, ["k"])
    s.apply("a", table(schema, [(1,)], [1]))
    s.set_meta("step", 1)
    s.commit()
    s.begin()
    s.apply("a", table(schema, [(2,)], [1]))
    s.ensure_arrangement("b", schema, [])
    s.set_meta("step", 2)
    s.rollback()
    assert as_counter(s.scan("a")) == {(1,): 1} and not s.has_arrangement("b") and s.get_meta("step") == 1
    s.close()
    s = SqliteStateStore(tmp_path / "st")
    assert as_counter(s.scan("a")) == {(1,): 1} and s.get_meta("step") == 1
    with pytest.raises(StateError):
        s.ensure_arrangement("a", pa.schema([("k", pa.int64())]), ["k"])
    s.close()


def test_random_operations_against_a_model(store):
    rng = random.Random(5)
    schema = pa.schema([("k", pa.int32()), ("s", pa.string()), ("v", pa.float64())])
    store.ensure_arrangement("r", schema, ["k"])
    store.ensure_arrangement("e", schema, ["k"])
    model: dict = defaultdict(int)
    for _ in range(60):
        rows, weights = [], []
        for _ in range(rng.randint(1, 15)):
            if model and rng.random() < 0.4:
                row = rng.choice([r for r, w in model.items() if w > 0] or [None])
                if row is None:
                    continue
                rows.append(row)
                weights.append(-1)
            else:
                rows.append((rng.choice([0, 1, 2, None]), rng.choice(["a", "b", None]),
                             rng.choice([0.5, -1.0, 2.0, None])))
                weights.append(1)
        for r, w in zip(rows, weights):
            model[r] += w
        store.apply("r", table(schema, rows, weights))
        store.apply("e", table(schema, rows, weights))
        live = {r: w for r, w in model.items() if w}
        assert as_counter(store.scan("r")) == live
        keys = pa.table({"k": pa.array([0, 1, 2, None], pa.int32())})
        expect = {r: w for r, w in live.items() if r[0] is not None}
        assert as_counter(store.lookup("r", keys)) == expect
        for kind, pick in (("min", min), ("max", max)):
            got = {r["k"]: r["v"] for r in store.extreme("e", keys, "v", kind).to_pylist()}
            want = {}
            for (k, _s, v), w in live.items():
                if w > 0 and v is not None:
                    want[k] = v if k not in want else pick(want[k], v)
            assert got == want
