"""SpineStateStore: the state store contract (ported from the SQLite store's tests), durability, merging."""

from __future__ import annotations

import datetime as dt
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from decimal import Decimal
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from freshview.errors import StateError
from freshview.runtime.state import SpineStateStore, log, policy
from freshview.runtime.state.layout import Layout, NullKeys

EQUAL, DISTINCT = NullKeys.EQUAL, NullKeys.DISTINCT
UTC = dt.timezone.utc
SRC = str(Path(__file__).resolve().parents[2] / "src")
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
NO_KEYS = pa.table({"x": [1]}).drop(["x"])


def table(schema: pa.Schema, rows: list[tuple], weights: list[int]) -> pa.Table:
    cols = list(zip(*rows)) if rows else [()] * len(schema)
    arrays = [pa.array(list(c), f.type) for c, f in zip(cols, schema)]
    return pa.Table.from_arrays(arrays + [pa.array(weights, pa.int64())],
                                schema=pa.schema(list(schema) + [pa.field("_weight", pa.int64())]))


def as_counter(t: pa.Table) -> dict:
    out: dict = {}
    for r in t.to_pylist():
        w = r.pop("_weight")
        r.pop("_old_weight", None)
        out[tuple(r.values())] = out.get(tuple(r.values()), 0) + w
    return out


def extremes(store: SpineStateStore, name: str, keys: pa.Table, kind: str) -> dict:
    res = store.extreme(name, keys, kind)
    value = store.layout(name).order
    assert res.column_names == keys.column_names + [value]
    return {tuple(r[k] for k in keys.column_names): r[value] for r in res.to_pylist()}


@pytest.fixture
def store(tmp_path):
    s = SpineStateStore(tmp_path / "state")
    yield s
    s.close()


# ---------------------------------------------------------------------- apply
def test_apply_consolidates_and_reports_weights(store):
    schema = pa.schema([("k", pa.int32()), ("v", pa.decimal128(10, 2))])
    store.ensure_arrangement("a", Layout(schema, ("k",)))
    res = store.apply_report("a", table(schema, [(1, Decimal("1.5")), (1, Decimal("1.50")), (None, None), (2, None)],
                                        [1, 1, 1, 0]))
    assert res.column_names == ["k", "v", "_old_weight", "_weight"]
    assert res.schema.field("v").type == pa.decimal128(10, 2)
    got = {(r["k"], r["v"]): (r["_old_weight"], r["_weight"]) for r in res.to_pylist()}
    # one row per distinct delta row, a zero-sum row included and not stored
    assert got == {(1, Decimal("1.50")): (0, 2), (None, None): (0, 1), (2, None): (0, 0)}
    assert store.count("a") == 2
    res = store.apply_report("a", table(schema, [(1, Decimal("1.50")), (None, None), (None, None), (3, Decimal("0"))],
                                        [-2, -1, 3, 1]))
    got = {(r["k"], r["v"]): (r["_old_weight"], r["_weight"]) for r in res.to_pylist()}
    assert got == {(1, Decimal("1.50")): (2, 0), (None, None): (1, 3), (3, Decimal("0.00")): (0, 1)}
    assert as_counter(store.scan("a")) == {(None, None): 3, (3, Decimal("0.00")): 1}
    res = store.apply_report("a", table(schema, [(3, Decimal("0")), (3, Decimal("0"))], [-1, -2]))
    assert res.to_pylist() == [{"k": 3, "v": Decimal("0.00"), "_old_weight": 1, "_weight": -2}]
    assert as_counter(store.scan("a")) == {(None, None): 3, (3, Decimal("0.00")): -2}  # negatives kept as-is
    assert store.apply_report("a", table(schema, [], [])).num_rows == 0
    store.apply("a", table(schema, [(3, Decimal("0")), (9, None)], [2, 0]))
    assert as_counter(store.scan("a")) == {(None, None): 3}


def test_apply_report_finds_null_keys_of_distinct_arrangements(store):
    schema = pa.schema([("k", pa.int64()), ("v", pa.int64())])
    store.ensure_arrangement("j", Layout(schema, ("k",), DISTINCT))
    store.apply("j", table(schema, [(None, 1), (2, 2)], [1, 1]))
    res = store.apply_report("j", table(schema, [(None, 1), (2, 2)], [1, -1]))
    assert {(r["k"], r["v"]): (r["_old_weight"], r["_weight"]) for r in res.to_pylist()} == \
        {(None, 1): (1, 2), (2, 2): (1, 0)}
    assert store.lookup("j", pa.table({"k": pa.array([None, 2], pa.int64())})).num_rows == 0


def test_interval_and_null_columns(store):
    schema = pa.schema([("i", pa.duration("us")), ("n", pa.null())])
    store.ensure_arrangement("x", Layout(schema, ("i",), EQUAL, order="n"))
    store.apply("x", table(schema, [(dt.timedelta(days=-1), None), (None, None), (dt.timedelta(seconds=3), None)],
                           [1, 1, 1]))
    assert store.scan("x").schema.field("n").type == pa.null()
    assert extremes(store, "x", pa.table({"i": pa.array([None], pa.duration("us"))}), "max") == {}
    assert as_counter(store.lookup("x", pa.table({"i": pa.array([dt.timedelta(days=-1)], pa.duration("us"))}))) \
        == {(dt.timedelta(days=-1), None): 1}


def test_null_safe_row_identity(store):
    schema = pa.schema([("a", pa.int64()), ("b", pa.string()), ("c", pa.float64())])
    store.ensure_arrangement("n", Layout(schema))
    rows = [(None, None, None), (None, "x", None), (1, None, None), (None, None, 0.0)]
    store.apply("n", table(schema, rows, [1, 1, 1, 1]))
    store.apply("n", table(schema, rows, [1, 1, 1, 1]))
    assert as_counter(store.scan("n")) == {r: 2 for r in rows}
    # -0.0 is 0.0; NaN is a value equal to itself and does not crash anything
    res = store.apply_report("n", table(schema, [(None, None, -0.0), (None, None, float("nan")),
                                                 (None, None, math.nan)], [-2, 1, 1]))
    assert store.count("n") == 4
    assert sorted(res.column("_weight").to_pylist()) == [0, 2]
    back = [r for r in store.scan("n").to_pylist() if r["c"] is not None]
    assert len(back) == 1 and math.isnan(back[0]["c"]) and back[0]["_weight"] == 2


def test_decimal_exactness(store):
    schema = pa.schema([("d", pa.decimal128(12, 4)), ("w", pa.decimal128(38, 10))])
    store.ensure_arrangement("d", Layout(schema, ("d",)))
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
    orders = [None] + [n for n in TYPES if n not in key]
    store.begin()
    for order in orders:
        store.ensure_arrangement(f"all/{order}", Layout(schema, tuple(key), EQUAL, order))
        store.apply(f"all/{order}", table(schema, rows, [1, 2, 1, 5]))
    store.commit()
    back = store.scan("all/None")
    assert back.schema.equals(pa.schema(list(schema) + [pa.field("_weight", pa.int64())]))
    assert as_counter(back) == {r: w for r, w in zip(rows, [1, 2, 1, 5])}
    keys = pa.table({k: pa.array(SAMPLE[k], TYPES[k]) for k in key}) if key else NO_KEYS
    looked = store.lookup("all/None", keys)
    assert looked.schema.equals(back.schema) and as_counter(looked) == as_counter(back)  # NULL keys equal
    for value in orders[1:]:
        for kind, pick in (("min", min), ("max", max)):
            if key == ["i4"]:
                got = store.extreme(f"all/{value}", pa.table({"i4": pa.array([7, -9], pa.int32())}), kind)
                assert got.schema.field(value).type == TYPES[value]
                expect = {k: v for k, v in zip(SAMPLE["i4"], SAMPLE[value]) if k in (7, -9) and v is not None}
                assert {r["i4"]: r[value] for r in got.to_pylist()} == expect
            if not key:
                non_null = [v for v in SAMPLE[value] if v is not None]
                assert store.extreme(f"all/{value}", keys, kind).column(value).to_pylist() == [pick(non_null)]


# ---------------------------------------------------------------------- lookup
def test_lookup_semantics(store):
    schema = pa.schema([("k1", pa.int64()), ("k2", pa.string()), ("v", pa.int64())])
    store.ensure_arrangement("m", Layout(schema, ("k1", "k2"), DISTINCT))
    store.ensure_arrangement("s", Layout(schema, ("k1",), DISTINCT))
    store.ensure_arrangement("e", Layout(schema, ("k1", "k2"), EQUAL))
    store.ensure_arrangement("z", Layout(schema))
    rows = [(1, "a", 10), (1, "b", 11), (2, "a", 12), (None, "a", 13), (1, None, 14), (1, "a", 15)]
    for name in ("m", "s", "e", "z"):
        store.apply(name, table(schema, rows, [1, 1, 1, 1, 1, 3]))
    keys = pa.table({"k1": pa.array([1, 1, None, 2, 1], pa.int64()), "k2": ["a", "a", "a", None, None]})
    assert as_counter(store.lookup("m", keys)) == {(1, "a", 10): 1, (1, "a", 15): 3}
    assert as_counter(store.lookup("e", keys)) == {(1, "a", 10): 1, (1, "a", 15): 3, (None, "a", 13): 1,
                                                   (1, None, 14): 1}
    single = store.lookup("s", pa.table({"k1": pa.array([1, None, 1], pa.int32())}))  # int32 keys cast
    assert single.column_names == ["k1", "k2", "v", "_weight"]
    assert as_counter(single) == {(1, "a", 10): 1, (1, "b", 11): 1, (1, None, 14): 1, (1, "a", 15): 3}
    assert store.lookup("s", pa.table({"k1": pa.array([], pa.int64())})).num_rows == 0
    assert store.lookup("s", pa.table({"k1": pa.array([None, None], pa.int64())})).num_rows == 0
    assert store.lookup("m", pa.table({"k1": [7], "k2": ["zz"]})).num_rows == 0
    everything = store.lookup("z", NO_KEYS)
    assert as_counter(everything) == as_counter(store.scan("z")) and everything.num_rows == 6


@pytest.mark.parametrize("probe_type", [pa.int8(), pa.int16(), pa.int32(), pa.uint8(), pa.uint32(), pa.int64()])
def test_probes_of_another_integer_width(store, probe_type):
    schema = pa.schema([("k", pa.int64()), ("v", pa.int32())])
    store.ensure_arrangement("w", Layout(schema, ("k",), order="v"))
    store.apply("w", table(schema, [(5, 1), (5, 2), (6, 3), (2**40, 4)], [1, 1, 1, 1]))
    keys = pa.table({"k": pa.array([5, 6, 7], probe_type)})
    assert as_counter(store.lookup("w", keys)) == {(5, 1): 1, (5, 2): 1, (6, 3): 1}
    assert extremes(store, "w", keys, "max") == {(5,): 2, (6,): 3}


# ---------------------------------------------------------------------- extreme
def test_extreme_after_deleting_the_current_extremes(store):
    schema = pa.schema([("g", pa.string()), ("v", pa.decimal128(38, 2)), ("n", pa.decimal128(9, 3))])
    store.ensure_arrangement("v", Layout(schema, ("g",), EQUAL, "v"))
    store.ensure_arrangement("n", Layout(schema, ("g",), EQUAL, "n"))
    vals = [Decimal("-5.00"), Decimal("3.25"), Decimal("-40.10"), Decimal("1e20"), Decimal("-1e30")]
    narrow = [Decimal("-0.005"), Decimal("0.325"), Decimal("-0.401"), None, None]
    rows = [("x", v, n) for v, n in zip(vals, narrow)]
    for name in ("v", "n"):
        store.apply(name, table(schema, rows + [(None, Decimal("7"), None), ("x", None, None), ("y", None, None)],
                                [1] * 8))
    keys = pa.table({"g": pa.array(["x", None, "nobody", "y", "x"])})
    assert extremes(store, "v", keys, "min") == {("x",): Decimal("-1e30"), (None,): Decimal("7.00")}
    assert extremes(store, "v", keys, "max") == {("x",): Decimal("1e20"), (None,): Decimal("7.00")}
    assert extremes(store, "n", keys, "min") == {("x",): Decimal("-0.401")}
    assert extremes(store, "n", keys, "max") == {("x",): Decimal("0.325")}
    for name in ("v", "n"):
        store.apply(name, table(schema, [rows[4], rows[3], rows[2]], [-1, -1, -1]))
    assert extremes(store, "v", keys, "min") == {("x",): Decimal("-5.00"), (None,): Decimal("7.00")}
    assert extremes(store, "v", keys, "max") == {("x",): Decimal("3.25"), (None,): Decimal("7.00")}
    assert extremes(store, "n", keys, "min") == {("x",): Decimal("-0.005")}
    # a row with a negative weight is not a member of its group
    store.apply("v", table(schema, [("x", Decimal("-9999"), None), rows[1]], [-1, -1]))
    assert extremes(store, "v", keys, "min") == {("x",): Decimal("-5.00"), (None,): Decimal("7.00")}
    assert extremes(store, "v", keys, "max") == {("x",): Decimal("-5.00"), (None,): Decimal("7.00")}
    assert store.extreme("v", pa.table({"g": pa.array([], pa.string())}), "min").num_rows == 0
    with pytest.raises(StateError):
        store.extreme("v", keys, "median")
    store.ensure_arrangement("plain", Layout(schema, ("g",)))
    with pytest.raises(StateError, match="no order column"):
        store.extreme("plain", keys, "min")


def test_extreme_ignores_null_probe_keys_of_distinct_arrangements(store):
    schema = pa.schema([("g", pa.int64()), ("v", pa.int64())])
    store.ensure_arrangement("d", Layout(schema, ("g",), DISTINCT, "v"))
    store.apply("d", table(schema, [(None, 1), (1, 2)], [1, 1]))
    assert extremes(store, "d", pa.table({"g": pa.array([None, 1], pa.int64())}), "min") == {(1,): 2}


def test_extreme_orders_like_sql(store):
    schema = pa.schema([("k1", pa.int32()), ("k2", pa.date32()), ("s", pa.string()), ("d", pa.date32()),
                        ("t", pa.timestamp("us", tz="UTC")), ("f", pa.float64()), ("i", pa.int64()),
                        ("b", pa.bool_())])
    day = dt.date(2024, 1, 1)
    rows = [
        (1, day, "b", dt.date(2020, 5, 1), dt.datetime(2020, 1, 1, tzinfo=UTC), -0.5, -(2**62), True),
        (1, day, "a", dt.date(1969, 12, 31), dt.datetime(1950, 1, 1, tzinfo=UTC), 1e300, 2**62, False),
        (1, day, "é", None, None, None, None, None),
        (1, day, "B", dt.date(2030, 1, 1), dt.datetime(2030, 1, 1, tzinfo=UTC), -1e300, 0, None),
        (None, None, "zz", dt.date(2000, 1, 1), None, 2.0, 5, True),
        (1, day, "a", None, None, float("nan"), None, None),
    ]
    for c in ("s", "d", "t", "f", "i", "b"):
        store.ensure_arrangement(c, Layout(schema, ("k1", "k2"), EQUAL, c))
        store.apply(c, table(schema, rows, [1] * 6))
    keys = pa.table({"k1": pa.array([1, None, 1], pa.int32()), "k2": pa.array([day, None, None], pa.date32())})
    lo = {c: extremes(store, c, keys, "min") for c in ("s", "d", "t", "f", "i", "b")}
    hi = {c: extremes(store, c, keys, "max") for c in ("s", "d", "t", "f", "i", "b")}
    g, n = (1, day), (None, None)
    assert lo["s"] == {g: "B", n: "zz"} and hi["s"] == {g: "é", n: "zz"}  # byte order
    assert lo["d"] == {g: dt.date(1969, 12, 31), n: dt.date(2000, 1, 1)} and hi["d"][g] == dt.date(2030, 1, 1)
    assert lo["t"] == {g: dt.datetime(1950, 1, 1, tzinfo=UTC)} and hi["t"] == {g: dt.datetime(2030, 1, 1, tzinfo=UTC)}
    assert lo["f"] == {g: -1e300, n: 2.0} and math.isnan(hi["f"][g]) and hi["f"][n] == 2.0  # NaN above numbers
    assert lo["i"] == {g: -(2**62), n: 5} and hi["i"] == {g: 2**62, n: 5}
    assert lo["b"] == {g: False, n: True} and hi["b"] == {g: True, n: True}


def test_extreme_reads_past_many_deleted_extremes(store):
    schema = pa.schema([("g", pa.int64()), ("v", pa.int64())])
    store.ensure_arrangement("mm", Layout(schema, ("g",), EQUAL, "v"))
    store.apply("mm", table(schema, [(g, v) for g in range(3) for v in range(200)], [1] * 600))
    for step in range(6):  # delete the 30 smallest and largest values of group 1, in several runs
        gone = [(1, v) for v in range(step * 5, step * 5 + 5)] + [(1, 199 - v) for v in range(step * 5, step * 5 + 5)]
        store.apply("mm", table(schema, gone, [-1] * len(gone)))
    store.apply("mm", table(schema, [(1, 100)], [5]))  # duplicates of a value are one value
    keys = pa.table({"g": pa.array([0, 1, 2, 3], pa.int64())})
    assert extremes(store, "mm", keys, "min") == {(0,): 0, (1,): 30, (2,): 0}
    assert extremes(store, "mm", keys, "max") == {(0,): 199, (1,): 169, (2,): 199}


def test_extreme_does_not_trust_a_value_that_continues_past_its_window(store):
    # Each group: many rows of value 1 with negative weight, one of them (id 0) also +1 in a newer run, so
    # its total is -1; the minimum of positive rows is 5.  A window ending inside the 1s must not accept 1.
    schema = pa.schema([("g", pa.int64()), ("v", pa.int64()), ("id", pa.int64())])
    store.ensure_arrangement("mm", Layout(schema, ("g",), EQUAL, "v"))
    rows = [(g, 1, i) for g in range(20) for i in range(12)] + [(g, 5, 99) for g in range(20)]
    store.apply("mm", table(schema, rows, [-2 if i == 0 else -1 for _, v, i in rows[:240]] + [1] * 20))
    store.apply("mm", table(schema, [(g, 1, 0) for g in range(20)], [1] * 20))
    keys = pa.table({"g": pa.array(range(20), pa.int64())})
    assert extremes(store, "mm", keys, "min") == {(g,): 5 for g in range(20)}


# ---------------------------------------------------------------------- transactions, catalog, errors
def test_rollback_discards_everything(tmp_path):
    schema = pa.schema([("k", pa.int32()), ("v", pa.int64())])
    s = SpineStateStore(tmp_path / "st")
    s.begin()
    s.ensure_arrangement("a", Layout(schema, ("k",), EQUAL, "v"))
    s.apply("a", table(schema, [(1, 5)], [1]))
    s.set_meta("step", 1)
    s.set_meta("gone", {"x": [1, 2]})
    s.commit()
    assert not s.in_transaction
    s.begin()
    assert s.in_transaction
    s.apply("a", table(schema, [(2, 1), (1, 5)], [1, -1]))
    assert s.extreme("a", pa.table({"k": pa.array([2], pa.int32())}), "max").num_rows == 1
    assert as_counter(s.scan("a")) == {(2, 1): 1}  # reads see the transaction's own writes
    s.ensure_arrangement("b", Layout(schema))
    s.drop_arrangement("a")
    s.set_meta("step", 2)
    s.delete_meta("gone")
    s.rollback()
    assert not s.in_transaction
    assert as_counter(s.scan("a")) == {(1, 5): 1} and not s.has_arrangement("b")
    assert s.get_meta("step") == 1 and s.get_meta("gone") == {"x": [1, 2]}
    assert extremes(s, "a", pa.table({"k": pa.array([1], pa.int32())}), "max") == {(1,): 5}
    with pytest.raises(StateError):
        s.commit()
    s.begin()
    with pytest.raises(StateError):
        s.begin()
    s.rollback()
    s.close()
    s = SpineStateStore(tmp_path / "st")
    assert as_counter(s.scan("a")) == {(1, 5): 1} and not s.has_arrangement("b") and s.get_meta("step") == 1
    s.close()


def test_reopen_keeps_state_and_definitions(tmp_path):
    schema = pa.schema([("k", pa.int32()), ("d", pa.decimal128(30, 3))])
    layout = Layout(schema, ("k",))
    s = SpineStateStore(tmp_path / "st", cache_mb=8)
    s.begin()
    for name in ("v_totals/op3/left", "v_totals/op3/right", "other 'quoted\" name"):
        s.ensure_arrangement(name, layout)
    s.apply("v_totals/op3/left", table(schema, [(1, Decimal("-2.5")), (None, None)], [1, 2]))
    s.set_meta("catalog", {"views": ["v_totals"]})
    s.commit()
    s.begin()
    s.drop_arrangement("v_totals/op3/right")
    s.commit()
    s.close()
    s = SpineStateStore(tmp_path / "st")
    assert s.list_arrangements() == ["other 'quoted\" name", "v_totals/op3/left"]
    assert s.list_arrangements("v_totals/") == ["v_totals/op3/left"]
    assert s.has_arrangement("v_totals/op3/left") and not s.has_arrangement("v_totals/op3/right")
    assert s.layout("v_totals/op3/left") == layout
    assert as_counter(s.scan("v_totals/op3/left")) == {(1, Decimal("-2.500")): 1, (None, None): 2}
    assert s.get_meta("catalog") == {"views": ["v_totals"]} and s.get_meta("missing", 7) == 7
    s.ensure_arrangement("v_totals/op3/left", layout)  # idempotent
    for other in (Layout(pa.schema([("k", pa.int64()), ("d", pa.decimal128(30, 3))]), ("k",)), Layout(schema),
                  Layout(schema, ("k",), DISTINCT), Layout(schema, ("k",), order="d")):
        with pytest.raises(StateError, match="another layout"):
            s.ensure_arrangement("v_totals/op3/left", other)
    with pytest.raises(StateError, match="no state named"):
        s.apply("never made", table(schema, [], []))
    with pytest.raises(StateError, match="lacks column"):
        s.apply("v_totals/op3/left", pa.table({"k": pa.array([1], pa.int32())}))
    with pytest.raises(StateError, match="lacks column"):
        s.lookup("v_totals/op3/left", pa.table({"x": [1]}))
    with pytest.raises(StateError, match="not empty"):
        s.load("v_totals/op3/left", table(schema, [(1, None)], [1]))
    with pytest.raises(StateError, match="cannot hash"):
        s.ensure_arrangement("bad", Layout(pa.schema([("l", pa.struct([("a", pa.int64())]))])))
    s.close()
    with pytest.raises(StateError, match="closed"):
        s.scan("v_totals/op3/left")
    s.close()  # idempotent


def test_load_fills_an_empty_arrangement(store):
    schema = pa.schema([("k", pa.int64()), ("v", pa.string())])
    store.ensure_arrangement("u", Layout(schema, ("k",)))
    store.ensure_arrangement("dup", Layout(schema, ("k",)))
    store.load("u", table(schema, [(i, str(i)) for i in range(1000)], [1] * 1000))  # unique keys: no consolidation
    store.load("dup", table(schema, [(1, "a"), (1, "a"), (1, "b"), (2, "c")], [1, 2, -1, 0]))
    assert store.count("u") == 1000 and as_counter(store.lookup("u", pa.table({"k": [5, 7]}))) == \
        {(5, "5"): 1, (7, "7"): 1}
    assert as_counter(store.scan("dup")) == {(1, "a"): 3, (1, "b"): -1}


# ---------------------------------------------------------------------- durability
def _counting_script(directory: Path, cache_mb: float) -> str:
    """A process that commits steps forever: step s adds keys s*10..s*10+9 and removes step s-3's."""
    return textwrap.dedent(f"""
        import pyarrow as pa
        from freshview.runtime.state import SpineStateStore
        from freshview.runtime.state.layout import Layout
        s = SpineStateStore({str(directory)!r}, cache_mb={cache_mb})
        layout = Layout(pa.schema([("k", pa.int64()), ("v", pa.string())]), ("k",), order="v")
        def delta(step, w):
            keys = list(range(step * 10, step * 10 + 10))
            return pa.table({{"k": pa.array(keys, pa.int64()), "v": [str(k) * 20 for k in keys],
                             "_weight": pa.array([w] * 10, pa.int64())}})
        step = s.get_meta("step", 0)
        while True:
            step += 1
            s.begin()
            for name in ("a", "b"):
                s.ensure_arrangement(name, layout)
                s.apply(name, delta(step, 1))
                if step > 3:
                    s.apply(name, delta(step - 3, -1))
            s.set_meta("step", step)
            s.commit()
            if step % 5 == 0:
                print(step, flush=True)
    """)


def _expected_keys(step: int) -> list[int]:
    return sorted(k for s in range(max(1, step - 2), step + 1) for k in range(s * 10, s * 10 + 10))


def _kill_after(script: str, seconds: float) -> None:
    env = dict(os.environ, PYTHONPATH=SRC)
    proc = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline(), proc.stderr.read().decode()  # it is committing
    time.sleep(seconds)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode()


@pytest.mark.parametrize("cache_mb", [0.02, 64])  # checkpoints nearly every step / never
def test_sigkill_mid_step_keeps_exactly_a_committed_prefix(tmp_path, cache_mb):
    directory = tmp_path / "st"
    seen = []
    for attempt in range(4):
        _kill_after(_counting_script(directory, cache_mb), 0.05 + 0.11 * attempt)
        s = SpineStateStore(directory)
        step = s.get_meta("step")
        seen.append(step)
        for name in ("a", "b"):
            assert sorted(s.scan(name).column("k").to_pylist()) == _expected_keys(step)
            assert set(s.scan(name).column("_weight").to_pylist()) == {1}
        s.close()
    assert seen == sorted(seen) and seen[-1] > seen[0]


def test_torn_or_corrupt_log_tail_is_ignored(tmp_path):
    schema = pa.schema([("k", pa.int64())])
    directory = tmp_path / "st"

    def crash(s: SpineStateStore) -> None:
        s._release()  # what a killed process leaves: no checkpoint, the log as written

    s = SpineStateStore(directory)
    s.ensure_arrangement("a", Layout(schema, ("k",)))
    for k in range(3):
        s.apply("a", table(schema, [(k,)], [1]))
    crash(s)
    wal = next(directory.glob("wal-*.log"))
    data = wal.read_bytes()
    wal.write_bytes(data[:-3])  # the last record torn
    s = SpineStateStore(directory)
    assert as_counter(s.scan("a")) == {(0,): 1, (1,): 1}
    assert wal.stat().st_size == log.read_records(pa.py_buffer(data[:-3]))[1]  # the torn tail is cut off
    s.apply("a", table(schema, [(7,)], [1]))  # appended after the last good record
    crash(s)
    data = bytearray(wal.read_bytes())
    data[-1] ^= 0xFF  # the last record corrupt
    wal.write_bytes(bytes(data))
    s = SpineStateStore(directory)
    assert as_counter(s.scan("a")) == {(0,): 1, (1,): 1}
    s.apply("a", table(schema, [(8,)], [1]))
    crash(s)
    s = SpineStateStore(directory)
    assert as_counter(s.scan("a")) == {(0,): 1, (1,): 1, (8,): 1}
    s.close()


def test_checkpoint_writes_runs_and_manifest_and_starts_a_new_log(tmp_path):
    schema = pa.schema([("k", pa.int64()), ("v", pa.float64())])
    directory = tmp_path / "st"
    s = SpineStateStore(directory, cache_mb=0.05)  # 50 KB: a checkpoint every few steps
    s.ensure_arrangement("a", Layout(schema, ("k",), order="v"))
    s.set_meta("m", [1])
    rng = np.random.default_rng(1)
    model: dict = {}
    for step in range(40):
        keys = rng.integers(0, 300, 60)
        weights = rng.choice([1, -1], 60)
        for k, w in zip(keys, weights):
            model[(int(k), float(k) / 2)] = model.get((int(k), float(k) / 2), 0) + int(w)
        s.apply("a", pa.table({"k": keys, "v": keys / 2, "_weight": weights}))
    manifest = log.read_manifest(directory)
    assert manifest.generation >= 2 and manifest.meta == {"m": "[1]"}
    assert all((directory / p).exists() for p in manifest.arrangements["a"]["runs"])
    assert len(list(directory.glob("wal-*.log"))) == 1
    s._release()  # without a final checkpoint: manifest + log replay
    s = SpineStateStore(directory)
    want = {r: w for r, w in model.items() if w}
    assert as_counter(s.scan("a")) == want
    s.close()
    referenced = set(log.read_manifest(directory).arrangements["a"]["runs"])
    assert {f"runs/{p.name}" for p in (directory / "runs").iterdir()} == referenced  # garbage collected
    s = SpineStateStore(directory)
    assert as_counter(s.scan("a")) == want
    s.close()


def test_a_second_process_cannot_open_the_directory(tmp_path):
    s = SpineStateStore(tmp_path / "st")
    with pytest.raises(StateError, match="in use by another process"):
        SpineStateStore(tmp_path / "st")
    script = f"from freshview.runtime.state import SpineStateStore; SpineStateStore({str(tmp_path / 'st')!r})"
    proc = subprocess.run([sys.executable, "-c", script], env=dict(os.environ, PYTHONPATH=SRC), capture_output=True)
    assert proc.returncode != 0 and b"is in use by another process" in proc.stderr
    s.close()
    SpineStateStore(tmp_path / "st").close()


def test_refuses_a_sqlite_state_directory(tmp_path):
    (tmp_path / "st").mkdir()
    (tmp_path / "st" / "state.sqlite").write_bytes(b"")
    with pytest.raises(StateError, match="SQLite"):
        SpineStateStore(tmp_path / "st")


def test_many_small_commits_with_both_merge_threads_busy(tmp_path, monkeypatch):
    monkeypatch.setattr(policy, "LARGE_ROWS", 40)  # most merges go to the large-merge thread, some stay small
    schema = pa.schema([("k", pa.int64()), ("v", pa.int64())])
    s = SpineStateStore(tmp_path / "st")
    for name in ("a", "b"):
        s.ensure_arrangement(name, Layout(schema, ("k",), order="v"))
    rng = np.random.default_rng(5)
    model: dict = {}
    for step in range(400):
        keys = rng.integers(0, 200, 8)
        weights = rng.choice([1, -1], 8)
        s.begin()
        for name in ("a", "b"):
            s.apply(name, table(schema, [(int(k), int(k) % 7) for k in keys], [int(w) for w in weights]))
        s.commit()
        for k, w in zip(keys, weights):
            model[(int(k), int(k) % 7)] = model.get((int(k), int(k) % 7), 0) + int(w)
        if step % 50 == 0:
            assert as_counter(s.lookup("a", pa.table({"k": pa.array(range(200), pa.int64())}))) == \
                {r: w for r, w in model.items() if w}
    want = {r: w for r, w in model.items() if w}
    assert as_counter(s.scan("a")) == want and as_counter(s.scan("b")) == want
    s.close()
    s = SpineStateStore(tmp_path / "st")
    assert as_counter(s.scan("b")) == want
    s.close()


def test_export_settles_merges_so_back_to_back_exports_name_the_same_files(tmp_path, monkeypatch):
    """A checkpoint is of a settled state: merges in flight are waited for and swapped in, none starts
    after, so a second export of the same committed state names exactly the files of the first."""
    from freshview.runtime.state import merger

    slow = merger.merge_runs

    def merge_slowly(*args, **kwargs):
        time.sleep(0.05)
        return slow(*args, **kwargs)

    monkeypatch.setattr(merger, "merge_runs", merge_slowly)
    schema = pa.schema([("k", pa.int64()), ("v", pa.int64())])
    s = SpineStateStore(tmp_path / "st")
    s.ensure_arrangement("a", Layout(schema, ("k",), order="v"))
    model: dict = {}
    for step in range(30):
        rows = [(step * 10 + i, i) for i in range(10)]
        s.apply("a", table(schema, rows, [1] * len(rows)))
        model.update({r: 1 for r in rows})
    assert s._merger.busy(s._catalog["a"]), "no merge in flight: the test would prove nothing"
    first, first_files = s.export()
    assert not s._merger.busy(s._catalog["a"])
    time.sleep(0.2)  # a merge started by the export would finish here
    second, second_files = s.export()
    assert second_files == first_files and second["arrangements"] == first["arrangements"]
    assert as_counter(s.scan("a")) == model
    s.close()
