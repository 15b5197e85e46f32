"""The SQLite state store against a pure-Python model: consolidation, lookups, extremes, atomicity."""

from __future__ import annotations

import datetime as dt
import math
import os
import random
import signal
import subprocess
import sys
import textwrap
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

from freshview.errors import StateError
from freshview.runtime.state import SqliteStateStore

UTC = dt.timezone.utc
TYPES = {
    "i2": pa.int16(), "i4": pa.int32(), "i8": pa.int64(), "f4": pa.float32(), "f8": pa.float64(),
    "d": pa.decimal128(10, 2), "dw": pa.decimal128(38, 6), "s": pa.string(), "b": pa.bool_(),
    "dt": pa.date32(), "ts": pa.timestamp("us"), "tz": pa.timestamp("us", tz="UTC"),
}
SAMPLE = {
    "i2": [1, -2, None, -32768], "i4": [7, None, -9, 2**31 - 1], "i8": [2**40, 0, None, -(2**63)],
    "f4": [1.5, None, -0.25, 2.0**100], "f8": [2.5, -1e9, None, 1e-300],
    "d": [Decimal("1.50"), Decimal("-99.99"), None, Decimal("99999999.99")],
    "dw": [Decimal("123456789012345678901234.5"), None, Decimal("-0.000001"),
           Decimal("-99999999999999999999999999999999.999999")],
    "s": ["a", "", None, "ünïcødé ✓"], "b": [True, None, False, True],
    "dt": [dt.date(2024, 2, 29), None, dt.date(1970, 1, 1), dt.date(1, 1, 1)],
    "ts": [dt.datetime(2024, 1, 1, 12, 0, 0, 123456), None, dt.datetime(1999, 12, 31), dt.datetime(1900, 1, 1)],
    "tz": [dt.datetime(2024, 1, 1, tzinfo=UTC), None, dt.datetime(2000, 1, 1, tzinfo=UTC),
           dt.datetime(1960, 6, 1, 0, 0, 1, tzinfo=UTC)],
}


def table(schema: pa.Schema, rows: list[tuple], weights: list[int]) -> pa.Table:
    cols = list(zip(*rows)) if rows else [()] * len(schema)
    arrays = [pa.array(list(c), f.type) for c, f in zip(cols, schema)]
    return pa.Table.from_arrays(arrays + [pa.array(weights, pa.int64())],
                                schema=pa.schema(list(schema) + [pa.field("_weight", pa.int64())]))


def as_counter(t: pa.Table, weight: str = "_weight") -> dict:
    out: dict = {}
    for r in t.to_pylist():
        w = r.pop(weight)
        r.pop("_old_weight", None)
        out[tuple(r.values())] = out.get(tuple(r.values()), 0) + w
    return out


def extremes(store: SqliteStateStore, name: str, keys: pa.Table, value: str, kind: str) -> dict:
    res = store.extreme(name, keys, value, kind)
    assert res.column_names == keys.column_names + [value]
    return {tuple(r[k] for k in keys.column_names): r[value] for r in res.to_pylist()}


@pytest.fixture
def store(tmp_path):
    s = SqliteStateStore(tmp_path / "state")
    yield s
    s.close()


# ---------------------------------------------------------------------- apply
def test_apply_consolidates_and_reports_weights(store):
    schema = pa.schema([("k", pa.int32()), ("v", pa.decimal128(10, 2))])
    store.ensure_arrangement("a", schema, ["k"])
    res = store.apply("a", table(schema, [(1, Decimal("1.5")), (1, Decimal("1.50")), (None, None), (2, None)],
                                 [1, 1, 1, 0]))
    assert res.column_names == ["k", "v", "_old_weight", "_weight"]
    assert res.schema.field("v").type == pa.decimal128(10, 2)
    got = {(r["k"], r["v"]): (r["_old_weight"], r["_weight"]) for r in res.to_pylist()}
    # one row per distinct delta row, a zero-sum row included and not stored
    assert got == {(1, Decimal("1.50")): (0, 2), (None, None): (0, 1), (2, None): (0, 0)}
    assert store.count("a") == 2
    res = store.apply("a", table(schema, [(1, Decimal("1.50")), (None, None), (None, None), (3, Decimal("0"))],
                                 [-2, -1, 3, 1]))
    got = {(r["k"], r["v"]): (r["_old_weight"], r["_weight"]) for r in res.to_pylist()}
    assert got == {(1, Decimal("1.50")): (2, 0), (None, None): (1, 3), (3, Decimal("0.00")): (0, 1)}
    assert as_counter(store.scan("a")) == {(None, None): 3, (3, Decimal("0.00")): 1}
    res = store.apply("a", table(schema, [(3, Decimal("0")), (3, Decimal("0"))], [-1, -2]))
    assert res.to_pylist() == [{"k": 3, "v": Decimal("0.00"), "_old_weight": 1, "_weight": -2}]
    assert as_counter(store.scan("a")) == {(None, None): 3, (3, Decimal("0.00")): -2}  # negatives kept as-is
    assert store.apply("a", table(schema, [], [])).num_rows == 0


def test_interval_and_null_columns(store):
    schema = pa.schema([("i", pa.duration("us")), ("n", pa.null())])
    store.ensure_arrangement("x", schema, ["i"])
    store.apply("x", table(schema, [(dt.timedelta(days=-1), None), (None, None), (dt.timedelta(seconds=3), None)],
                           [1, 1, 1]))
    assert store.scan("x").schema.field("n").type == pa.null()
    assert extremes(store, "x", pa.table({"i": pa.array([None], pa.duration("us"))}), "n", "max") == {}
    assert as_counter(store.lookup("x", pa.table({"i": pa.array([dt.timedelta(days=-1)], pa.duration("us"))}))) \
        == {(dt.timedelta(days=-1), None): 1}


def test_null_safe_row_identity(store):
    schema = pa.schema([("a", pa.int64()), ("b", pa.string()), ("c", pa.float64())])
    store.ensure_arrangement("n", schema, [])
    rows = [(None, None, None), (None, "x", None), (1, None, None), (None, None, 0.0)]
    store.apply("n", table(schema, rows, [1, 1, 1, 1]))
    store.apply("n", table(schema, rows, [1, 1, 1, 1]))
    assert as_counter(store.scan("n")) == {r: 2 for r in rows}
    # -0.0 is 0.0; NaN is a value equal to itself and does not crash anything
    res = store.apply("n", table(schema, [(None, None, -0.0), (None, None, float("nan")), (None, None, math.nan)],
                                 [-2, 1, 1]))
    assert store.count("n") == 4
    assert sorted(res.column("_weight").to_pylist()) == [0, 2]
    back = [r for r in store.scan("n").to_pylist() if r["c"] is not None]
    assert len(back) == 1 and math.isnan(back[0]["c"]) and back[0]["_weight"] == 2


def test_decimal_exactness(store):
    schema = pa.schema([("d", pa.decimal128(12, 4)), ("w", pa.decimal128(38, 10))])
    store.ensure_arrangement("d", schema, ["d"])
    big = Decimal("1234567890123456789012345678.0000000001")
    store.apply("d", table(schema, [(Decimal("1.5"), big), (Decimal("1.5000"), big)], [1, 1]))
    store.apply("d", table(schema, [(Decimal("0.0001"), -big), (Decimal("1.50"), Decimal("1.2E+27"))], [1, 1]))
    assert as_counter(store.scan("d")) == {(Decimal("1.5000"), big): 2, (Decimal("0.0001"), -big): 1,
                                           (Decimal("1.5"), Decimal("1200000000000000000000000000")): 1}
    keys = pa.table({"d": pa.array([Decimal("1.5")], pa.decimal128(2, 1))})  # castable key type
    assert as_counter(store.lookup("d", keys)) == {(Decimal("1.5"), big): 2,
                                                   (Decimal("1.5"), Decimal("1.2E+27")): 1}


@pytest.mark.parametrize("key", [[], ["i4"], ["s", "dt"], list(TYPES)])
def test_every_type_round_trips(store, key):
    schema = pa.schema([pa.field(n, t) for n, t in TYPES.items()])
    rows = list(zip(*[SAMPLE[n] for n in TYPES]))
    store.begin()
    store.ensure_arrangement("all", schema, key)
    store.apply("all", table(schema, rows, [1, 2, 1, 5]))
    store.commit()
    back = store.scan("all")
    assert back.schema.equals(pa.schema(list(schema) + [pa.field("_weight", pa.int64())]))
    assert as_counter(back) == {r: w for r, w in zip(rows, [1, 2, 1, 5])}
    keys = pa.table({k: pa.array(SAMPLE[k], TYPES[k]) for k in key}) if key else pa.table({"x": [1]}).drop(["x"])
    want = {r: w for r, w in zip(rows, [1, 2, 1, 5])
            if all(r[list(TYPES).index(k)] is not None for k in key)}
    looked = store.lookup("all", keys)
    assert looked.schema.equals(back.schema) and as_counter(looked) == want
    for value in TYPES:
        if value in key:
            continue
        for kind, pick in (("min", min), ("max", max)):
            got = store.extreme("all", pa.table({"i4": pa.array([7, -9], pa.int32())}), value, kind) \
                if key == ["i4"] else None
            if got is not None:
                assert got.schema.field(value).type == TYPES[value]
                expect = {k: v for k, v in zip(SAMPLE["i4"], SAMPLE[value]) if k in (7, -9) and v is not None}
                assert {r["i4"]: r[value] for r in got.to_pylist()} == expect
            if not key:
                non_null = [v for v in SAMPLE[value] if v is not None]
                got_all = store.extreme("all", keys, value, kind).column(value).to_pylist()
                assert got_all == [pick(non_null)]


# ---------------------------------------------------------------------- lookup
def test_lookup_semantics(store):
    schema = pa.schema([("k1", pa.int64()), ("k2", pa.string()), ("v", pa.int64())])
    store.ensure_arrangement("m", schema, ["k1", "k2"])
    store.ensure_arrangement("s", schema, ["k1"])
    store.ensure_arrangement("z", schema, [])
    rows = [(1, "a", 10), (1, "b", 11), (2, "a", 12), (None, "a", 13), (1, None, 14), (1, "a", 15)]
    for name in ("m", "s", "z"):
        store.apply(name, table(schema, rows, [1, 1, 1, 1, 1, 3]))
    keys = pa.table({"k1": pa.array([1, 1, None, 2, 1], pa.int64()), "k2": ["a", "a", "a", None, None]})
    assert as_counter(store.lookup("m", keys)) == {(1, "a", 10): 1, (1, "a", 15): 3}
    single = store.lookup("s", pa.table({"k1": pa.array([1, None, 1], pa.int32())}))  # int32 keys cast
    assert single.column_names == ["k1", "k2", "v", "_weight"]
    assert as_counter(single) == {(1, "a", 10): 1, (1, "b", 11): 1, (1, None, 14): 1, (1, "a", 15): 3}
    assert store.lookup("s", pa.table({"k1": pa.array([], pa.int64())})).num_rows == 0
    assert store.lookup("s", pa.table({"k1": pa.array([None, None], pa.int64())})).num_rows == 0
    assert store.lookup("m", pa.table({"k1": [7], "k2": ["zz"]})).num_rows == 0
    everything = store.lookup("z", pa.table({"x": [1]}).drop(["x"]))
    assert as_counter(everything) == as_counter(store.scan("z")) and everything.num_rows == 6


# ---------------------------------------------------------------------- extreme
def test_extreme_after_deleting_the_current_extremes(store):
    schema = pa.schema([("g", pa.string()), ("v", pa.decimal128(38, 2)), ("n", pa.decimal128(9, 3))])
    store.ensure_arrangement("mm", schema, ["g"])
    vals = [Decimal("-5.00"), Decimal("3.25"), Decimal("-40.10"), Decimal("1e20"), Decimal("-1e30")]
    narrow = [Decimal("-0.005"), Decimal("0.325"), Decimal("-0.401"), None, None]
    rows = [("x", v, n) for v, n in zip(vals, narrow)]
    store.apply("mm", table(schema, rows + [(None, Decimal("7"), None), ("x", None, None), ("y", None, None)],
                            [1] * 8))
    keys = pa.table({"g": pa.array(["x", None, "nobody", "y", "x"])})
    assert extremes(store, "mm", keys, "v", "min") == {("x",): Decimal("-1e30"), (None,): Decimal("7.00")}
    assert extremes(store, "mm", keys, "v", "max") == {("x",): Decimal("1e20"), (None,): Decimal("7.00")}
    assert extremes(store, "mm", keys, "n", "min") == {("x",): Decimal("-0.401")}
    assert extremes(store, "mm", keys, "n", "max") == {("x",): Decimal("0.325")}
    store.apply("mm", table(schema, [rows[4], rows[3], rows[2]], [-1, -1, -1]))
    assert extremes(store, "mm", keys, "v", "min") == {("x",): Decimal("-5.00"), (None,): Decimal("7.00")}
    assert extremes(store, "mm", keys, "v", "max") == {("x",): Decimal("3.25"), (None,): Decimal("7.00")}
    assert extremes(store, "mm", keys, "n", "min") == {("x",): Decimal("-0.005")}
    # a row with a negative weight is not a member of its group
    store.apply("mm", table(schema, [("x", Decimal("-9999"), None), rows[1]], [-1, -1]))
    assert extremes(store, "mm", keys, "v", "min") == {("x",): Decimal("-5.00"), (None,): Decimal("7.00")}
    assert extremes(store, "mm", keys, "v", "max") == {("x",): Decimal("-5.00"), (None,): Decimal("7.00")}
    assert store.extreme("mm", pa.table({"g": pa.array([], pa.string())}), "v", "min").num_rows == 0
    with pytest.raises(StateError):
        store.extreme("mm", keys, "v", "median")


def test_extreme_orders_like_sql(store):
    schema = pa.schema([("k1", pa.int32()), ("k2", pa.date32()), ("s", pa.string()), ("d", pa.date32()),
                        ("t", pa.timestamp("us", tz="UTC")), ("f", pa.float64()), ("i", pa.int64()),
                        ("b", pa.bool_())])
    store.ensure_arrangement("o", schema, ["k1", "k2"])
    day = dt.date(2024, 1, 1)
    rows = [
        (1, day, "b", dt.date(2020, 5, 1), dt.datetime(2020, 1, 1, tzinfo=UTC), -0.5, -(2**62), True),
        (1, day, "a", dt.date(1969, 12, 31), dt.datetime(1950, 1, 1, tzinfo=UTC), 1e300, 2**62, False),
        (1, day, "é", None, None, None, None, None),
        (1, day, "B", dt.date(2030, 1, 1), dt.datetime(2030, 1, 1, tzinfo=UTC), -1e300, 0, None),
        (None, None, "zz", dt.date(2000, 1, 1), None, 2.0, 5, True),
    ]
    store.apply("o", table(schema, rows, [1] * 5))
    keys = pa.table({"k1": pa.array([1, None, 1], pa.int32()), "k2": pa.array([day, None, None], pa.date32())})
    lo = {c: extremes(store, "o", keys, c, "min") for c in ("s", "d", "t", "f", "i", "b")}
    hi = {c: extremes(store, "o", keys, c, "max") for c in ("s", "d", "t", "f", "i", "b")}
    g, n = (1, day), (None, None)
    assert lo["s"] == {g: "B", n: "zz"} and hi["s"] == {g: "é", n: "zz"}  # byte order
    assert lo["d"] == {g: dt.date(1969, 12, 31), n: dt.date(2000, 1, 1)} and hi["d"][g] == dt.date(2030, 1, 1)
    assert lo["t"] == {g: dt.datetime(1950, 1, 1, tzinfo=UTC)} and hi["t"] == {g: dt.datetime(2030, 1, 1, tzinfo=UTC)}
    assert lo["f"] == {g: -1e300, n: 2.0} and hi["f"] == {g: 1e300, n: 2.0}
    assert lo["i"] == {g: -(2**62), n: 5} and hi["i"] == {g: 2**62, n: 5}
    assert lo["b"] == {g: False, n: True} and hi["b"] == {g: True, n: True}


# ---------------------------------------------------------------------- transactions, catalog
def test_rollback_discards_everything(tmp_path):
    schema = pa.schema([("k", pa.int32()), ("v", pa.int64())])
    s = SqliteStateStore(tmp_path / "st")
    s.begin()
    s.ensure_arrangement("a", schema, ["k"])
    s.apply("a", table(schema, [(1, 5)], [1]))
    s.set_meta("step", 1)
    s.set_meta("gone", {"x": [1, 2]})
    s.commit()
    assert not s.in_transaction
    s.begin()
    assert s.in_transaction
    s.apply("a", table(schema, [(2, 1), (1, 5)], [1, -1]))
    assert s.extreme("a", pa.table({"k": pa.array([2], pa.int32())}), "v", "max").num_rows == 1
    s.ensure_arrangement("b", schema, [])
    s.set_meta("step", 2)
    s.delete_meta("gone")
    s.rollback()
    assert not s.in_transaction
    assert as_counter(s.scan("a")) == {(1, 5): 1} and not s.has_arrangement("b")
    assert s.get_meta("step") == 1 and s.get_meta("gone") == {"x": [1, 2]}
    # the extreme index built in the discarded step is rebuilt on demand
    assert extremes(s, "a", pa.table({"k": pa.array([1], pa.int32())}), "v", "max") == {(1,): 5}
    s.close()


def test_reopen_keeps_state_and_definitions(tmp_path):
    schema = pa.schema([("k", pa.int32()), ("d", pa.decimal128(30, 3))])
    s = SqliteStateStore(tmp_path / "st", cache_mb=8)
    s.begin()
    for name in ("v_totals/op3/left", "v_totals/op3/right", "other 'quoted\" name"):
        s.ensure_arrangement(name, schema, ["k"])
    s.apply("v_totals/op3/left", table(schema, [(1, Decimal("-2.5")), (None, None)], [1, 2]))
    s.set_meta("catalog", {"views": ["v_totals"]})
    s.commit()
    s.begin()
    s.drop_arrangement("v_totals/op3/right")
    s.commit()
    s.close()
    s = SqliteStateStore(tmp_path / "st")
    assert s.list_arrangements() == ["other 'quoted\" name", "v_totals/op3/left"]
    assert s.list_arrangements("v_totals/") == ["v_totals/op3/left"]
    assert s.has_arrangement("v_totals/op3/left") and not s.has_arrangement("v_totals/op3/right")
    assert as_counter(s.scan("v_totals/op3/left")) == {(1, Decimal("-2.500")): 1, (None, None): 2}
    assert s.get_meta("catalog") == {"views": ["v_totals"]} and s.get_meta("missing", 7) == 7
    s.ensure_arrangement("v_totals/op3/left", schema, ["k"])  # idempotent
    with pytest.raises(StateError):
        s.ensure_arrangement("v_totals/op3/left", pa.schema([("k", pa.int64()), ("d", pa.decimal128(30, 3))]), ["k"])
    with pytest.raises(StateError):
        s.ensure_arrangement("v_totals/op3/left", schema, [])
    with pytest.raises(StateError):
        s.ensure_arrangement("bad", schema, ["nope"])
    with pytest.raises(StateError):
        s.apply("never made", table(schema, [], []))
    s.close()


def test_sigkill_keeps_exactly_the_last_commit(tmp_path):
    script = textwrap.dedent(f"""
        import os, signal, pyarrow as pa
        from freshview.runtime.state import SqliteStateStore
        s = SqliteStateStore({str(tmp_path / "st")!r})
        schema = pa.schema([("k", pa.int64())])
        def delta(lo, hi, w):
            return pa.table({{"k": pa.array(range(lo, hi), pa.int64()), "_weight": pa.array([w] * (hi - lo), pa.int64())}})
        s.begin(); s.ensure_arrangement("a", schema, ["k"]); s.apply("a", delta(0, 1000, 1)); s.set_meta("step", 1); s.commit()
        s.begin(); s.apply("a", delta(0, 500, -1)); s.apply("a", delta(5000, 60000, 1)); s.set_meta("step", 2)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2] / "src"))
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    s = SqliteStateStore(tmp_path / "st")
    assert s.get_meta("step") == 1 and s.count("a") == 1000
    assert sorted(s.scan("a").column("k").to_pylist()) == list(range(1000))
    s.close()


# ---------------------------------------------------------------------- model
def test_random_operations_against_a_model(store):
    rng = random.Random(5)
    schema = pa.schema([("k", pa.int32()), ("s", pa.string()), ("v", pa.float64()), ("d", pa.decimal128(20, 2))])
    store.ensure_arrangement("r", schema, ["k", "s"])
    model: dict = defaultdict(int)
    decimals = [Decimal("-1e15"), Decimal("-0.01"), Decimal("0"), Decimal("12.34"), Decimal("1e17"), None]
    for step in range(300):
        rows, weights = [], []
        for _ in range(rng.randint(1, 12)):
            live = [r for r, w in model.items() if w]
            if live and rng.random() < 0.45:
                rows.append(rng.choice(live))
                weights.append(rng.choice([-1, -1, -2, 1]))
            else:
                rows.append((rng.choice([0, 1, 2, None]), rng.choice(["a", "b", None]),
                             rng.choice([0.5, -1.0, 2.0, None]), rng.choice(decimals)))
                weights.append(rng.choice([1, 1, 2]))
        before = dict(model)
        for r, w in zip(rows, weights):
            model[r] += w
        in_tx = step % 3 == 0
        if in_tx:
            store.begin()
        res = store.apply("r", table(schema, rows, weights))
        if step % 17 == 0 and in_tx:  # discarded step: the model goes back
            store.rollback()
            model = defaultdict(int, before)
            continue
        if in_tx:
            store.commit()
        got = {tuple(r[c] for c in schema.names): (r["_old_weight"], r["_weight"]) for r in res.to_pylist()}
        assert got == {r: (before.get(r, 0), model[r]) for r in set(rows)}
        live = {r: w for r, w in model.items() if w}
        assert as_counter(store.scan("r")) == live and store.count("r") == len(live)
        key_rows = [(rng.choice([0, 1, 2, 3, None]), rng.choice(["a", "b", None])) for _ in range(rng.randint(0, 6))]
        keys = pa.table({"k": pa.array([k for k, _ in key_rows], pa.int32()),
                         "s": pa.array([s for _, s in key_rows], pa.string())})
        wanted = {kr for kr in key_rows if None not in kr}
        assert as_counter(store.lookup("r", keys)) == {r: w for r, w in live.items() if r[:2] in wanted}
        for col, idx in (("v", 2), ("d", 3)):
            for kind, pick in (("min", min), ("max", max)):
                want: dict = {}
                for r, w in live.items():
                    if w > 0 and r[idx] is not None and r[:2] in set(key_rows):
                        want[r[:2]] = r[idx] if r[:2] not in want else pick(want[r[:2]], r[idx])
                assert extremes(store, "r", keys, col, kind) == want
