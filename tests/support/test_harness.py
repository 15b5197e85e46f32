"""Self-tests of the test harness: PostgreSQL fixture, oracle, comparison, streams, driver.

These run without the engine (and without Spark): ``run_differential`` is
exercised against ``FakeFlow``, a DuckDB-backed stand-in.
"""

from __future__ import annotations

import datetime as dt
import random
from collections import Counter
from decimal import Decimal

import psycopg
import pyarrow as pa
import pytest

from freshview.schema import WEIGHT, schema_from_ddl
from tests.support.differential import run_differential
from tests.support.fake_flow import FakeFlow
from tests.support.oracle import PgOracle, assert_same_rows, table_rows
from tests.support.streams import RandomTable, fold_deltas

ALL_TYPES_DDL = (
    "a INT2, b INT4, c INT8, d NUMERIC(10,2), e FLOAT8, f TEXT, g VARCHAR(20), "
    "h BOOL, i DATE, j TIMESTAMP, k TIMESTAMPTZ"
)
UTC = dt.timezone.utc


def _all_types_rows() -> pa.Table:
    schema = schema_from_ddl(ALL_TYPES_DDL).arrow()
    rows = [
        (1, 100000, 2**40, Decimal("12.34"), 1.5, "x%y", "a_b", True, dt.date(2024, 2, 29),
         dt.datetime(2024, 1, 1, 12, 0, 0, 123456), dt.datetime(2024, 1, 1, 23, 59, tzinfo=UTC)),
        (-3, -7, -9, Decimal("-0.05"), -2.25, "", "Abc", False, dt.date(1999, 12, 31),
         dt.datetime(2000, 1, 1), dt.datetime(1970, 1, 1, tzinfo=UTC)),
        (None,) * 11,
        (None,) * 11,  # a duplicate row
        (7, None, 3, None, None, "é", None, None, None, None, None),
    ]
    arrays = [pa.array([r[i] for r in rows], type=f.type) for i, f in enumerate(schema)]
    return pa.Table.from_arrays(arrays, schema=schema)


# -- PostgreSQL fixture --------------------------------------------------------

def test_pg_fixture_answers(pg: str) -> None:
    assert "127.0.0.1" in pg and ":5432/" not in pg
    with psycopg.connect(pg) as conn:
        assert conn.execute("SELECT 1 + 1").fetchone() == (2,)
        settings = dict(conn.execute(
            "SELECT name, setting FROM pg_settings WHERE name IN "
            "('wal_level', 'max_replication_slots', 'max_wal_senders', 'fsync', 'TimeZone')"
        ).fetchall())
    assert settings == {"wal_level": "logical", "max_replication_slots": "10",
                        "max_wal_senders": "10", "fsync": "off", "TimeZone": "UTC"}


# -- oracle ----------------------------------------------------------------------

def test_oracle_roundtrips_all_types(oracle: PgOracle) -> None:
    oracle.create_table("t", schema_from_ddl(ALL_TYPES_DDL))
    rows = _all_types_rows()
    oracle.load("t", rows)
    got = oracle.query("t")
    assert got.num_rows == 5
    assert got.schema.field("d").type == pa.decimal128(4, 2)
    assert got.schema.field("k").type == pa.timestamp("us", tz="UTC")
    assert got.schema.field("i").type == pa.date32()
    assert_same_rows(got, rows, context="round trip")
    # Exact values, not only within tolerance.
    assert sorted(map(repr, table_rows(got))) == sorted(map(repr, table_rows(rows)))

    oracle.create_view("v", "SELECT f, COUNT(*) AS n, SUM(d) AS s, AVG(b) AS av FROM t GROUP BY f")
    oracle.create_view("vv", "SELECT n, COUNT(*) AS k FROM v GROUP BY n")  # a view over a view
    assert_same_rows(oracle.query("v"), pa.table({
        "f": ["x%y", "", None, "é"], "n": [1, 1, 2, 1],
        "s": [Decimal("12.34"), Decimal("-0.05"), None, None],
        "av": [Decimal(100000), Decimal(-7), None, None],
    }), context="view")
    assert_same_rows(oracle.query("vv"), pa.table({"n": [1, 2], "k": [3, 1]}), context="view of view")
    assert oracle.query("SELECT AVG(b) FROM t WHERE b IS NOT NULL").column(0)[0].as_py() == Decimal(99993) / 2

    # load replaces the content.
    oracle.load("t", rows.slice(0, 1))
    assert oracle.query("t").num_rows == 1
    assert_same_rows(oracle.query("vv"), pa.table({"n": [1], "k": [1]}), context="after reload")


def test_oracle_empty_result_keeps_types(oracle: PgOracle) -> None:
    oracle.create_table("t", schema_from_ddl("x INT, y NUMERIC(5,1), z TEXT"))
    got = oracle.query("SELECT x, y, z, SUM(x) AS s FROM t GROUP BY x, y, z")
    assert got.num_rows == 0
    assert got.column_names == ["x", "y", "z", "s"]
    assert got.schema.field("x").type == pa.int32()
    assert got.schema.field("s").type == pa.int64()


def test_oracle_reset_and_primary_key(pg: str) -> None:
    with PgOracle(pg) as ora:
        ora.create_table("k", schema_from_ddl("id INT, v TEXT", ["id"]))
        with pytest.raises(psycopg.errors.UniqueViolation):
            ora.load("k", pa.table({"id": pa.array([1, 1], pa.int32()), "v": ["a", "b"]}))
        first = ora.schema_name
        ora.reset()
        assert ora.schema_name != first
        with pytest.raises(psycopg.errors.UndefinedTable):
            ora.query("k")
        with psycopg.connect(pg) as conn:
            assert conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = %s",
                                (first,)).fetchone() == (0,)


# -- assert_same_rows ---------------------------------------------------------------

def _t(rows: list[tuple], names: tuple[str, ...] = ("a", "b")) -> pa.Table:
    return pa.Table.from_pylist([dict(zip(names, r)) for r in rows]) if rows else \
        pa.table({n: pa.array([], pa.int64()) for n in names})


def test_assert_same_rows_passes_on_reordered_rows_and_other_names() -> None:
    assert_same_rows(_t([(1, "x"), (2, None), (2, None)]),
                     _t([(2, None), (1, "x"), (2, None)], names=("p", "q")), context="ok")


def test_assert_same_rows_detects_missing_row() -> None:
    with pytest.raises(AssertionError) as err:
        assert_same_rows(_t([(1, "x")]), _t([(1, "x"), (2, "y")]), context="seed=3 step=4 view=v")
    msg = str(err.value)
    assert "seed=3 step=4 view=v" in msg and "only in expected" in msg and "(2, 'y')" in msg
    assert "only in actual:" not in msg


def test_assert_same_rows_detects_extra_duplicate() -> None:
    with pytest.raises(AssertionError, match=r"only in actual:\n    \(1, 'x'\)"):
        assert_same_rows(_t([(1, "x"), (1, "x")]), _t([(1, "x")]), context="dup")


def test_assert_same_rows_detects_different_value() -> None:
    with pytest.raises(AssertionError) as err:
        assert_same_rows(_t([(1, "x")]), _t([(1, "X")]), context="val")
    assert "(1, 'x')" in str(err.value) and "(1, 'X')" in str(err.value)
    with pytest.raises(AssertionError):
        assert_same_rows(_t([(1, None)]), _t([(1, "")]), context="null vs empty")


def test_assert_same_rows_column_count() -> None:
    with pytest.raises(AssertionError, match="columns"):
        assert_same_rows(_t([(1, "x")]), pa.table({"a": [1]}), context="cols")


def test_assert_same_rows_numeric_tolerance() -> None:
    dec = pa.table({"v": pa.array([Decimal("0.3333333333333333"), Decimal("2.50")], pa.decimal128(20, 16))})
    dec2 = pa.table({"v": pa.array([Decimal("0.33333333333333333333"), Decimal("2.5")], pa.decimal128(38, 20))})
    assert_same_rows(dec, dec2, context="decimal scales")
    flt = pa.table({"v": [1 / 3, 2.5]})
    assert_same_rows(dec, flt, context="decimal vs float")
    assert_same_rows(pa.table({"v": [0.1 + 0.2, 1e-17]}), pa.table({"v": [0.3, 0.0]}), context="float")
    assert_same_rows(pa.table({"v": [float("nan")]}), pa.table({"v": [float("nan")]}), context="nan")
    with pytest.raises(AssertionError):
        assert_same_rows(pa.table({"v": [Decimal("1.000001")]}), pa.table({"v": [Decimal("1")]}), context="d")
    with pytest.raises(AssertionError):
        assert_same_rows(pa.table({"v": [1.0001]}), pa.table({"v": [1.0]}), context="f")
    # Integers of different widths are equal values.
    assert_same_rows(pa.table({"v": pa.array([5], pa.int16())}),
                     pa.table({"v": pa.array([Decimal(5)], pa.decimal128(38, 0))}), context="int vs dec")


def test_assert_same_rows_temporal() -> None:
    ts = dt.datetime(2024, 1, 1, 12, tzinfo=UTC)
    other_zone = ts.astimezone(dt.timezone(dt.timedelta(hours=2)))
    assert_same_rows(pa.table({"t": [ts], "d": [dt.date(2024, 1, 1)]}),
                     pa.table({"t": pa.array([other_zone], pa.timestamp("us", tz="Europe/Berlin")),
                               "d": [dt.date(2024, 1, 1)]}), context="same instant")
    with pytest.raises(AssertionError):
        assert_same_rows(pa.table({"d": [dt.date(2024, 1, 1)]}), pa.table({"d": [dt.date(2024, 1, 2)]}),
                         context="dates")


# -- RandomTable ---------------------------------------------------------------------

def _check_stream(table: RandomTable, steps: int) -> list[pa.Table]:
    deltas = []
    deltas.append(table.step(30, inserts_only=True))
    for _ in range(steps):
        delta = table.step(table.rng.randint(1, 25))
        assert delta.schema == table.schema.arrow(with_weight=True)
        assert set(delta.column(WEIGHT).to_pylist()) <= {1, -1}
        deltas.append(delta)
        if table.has_key:
            keys = [table.key_of(r) for r in table_rows(table.current())]
            assert len(keys) == len(set(keys)), "duplicate live primary key"
    folded = fold_deltas(deltas)
    assert all(w > 0 for w in folded.values()), "a delta deleted a row that did not exist"
    assert folded == Counter(table_rows(table.current()))
    return deltas


def test_random_table_keeps_primary_key_and_integrates() -> None:
    schema = schema_from_ddl("id INT, grp INT, amount NUMERIC(10,2), name TEXT, at TIMESTAMPTZ", ["id"])
    table = RandomTable("t", schema, random.Random(1))
    deltas = _check_stream(table, 200)
    all_rows = [r for d in deltas for r in table_rows(d.drop_columns([WEIGHT]))]
    assert any(r[2] is None for r in all_rows) and any(r[3] is None for r in all_rows)
    assert all(r[0] is not None for r in all_rows)
    assert any(isinstance(r[2], Decimal) and r[2] < 0 for r in all_rows)
    # Updates that change the key: some delta deletes key k and inserts only other keys.
    assert len({r[0] for r in all_rows}) > 20


def test_random_table_composite_key_and_domains() -> None:
    schema = schema_from_ddl("a TEXT, b INT, v FLOAT8, d DATE", ["a", "b"])
    table = RandomTable("t", schema, random.Random(2), domains={"a": ["p", "q", "r"], "v": [0.5, None]})
    _check_stream(table, 200)
    assert {r[0] for r in table_rows(table.current())} <= {"p", "q", "r"}


def test_random_table_without_key_has_duplicates_and_empty_groups() -> None:
    schema = schema_from_ddl("g INT, s TEXT, f FLOAT4, b BOOL, ts TIMESTAMP, i INT8")
    table = RandomTable("t", schema, random.Random(3), domains={"g": [1, 2, 3]})
    saw_duplicate = saw_group_vanish = False
    table.step(20, inserts_only=True)
    for _ in range(200):
        before = {r[0] for r in table.rows}
        table.step(table.rng.randint(1, 25))
        after = {r[0] for r in table.rows}
        saw_group_vanish |= bool(before - after)
        saw_duplicate |= len(table.rows) != len(set(table.rows))
    assert saw_duplicate and saw_group_vanish


def test_random_table_without_key_integrates() -> None:
    schema = schema_from_ddl("g INT, s TEXT")
    _check_stream(RandomTable("t", schema, random.Random(4)), 200)


def test_random_table_is_reproducible() -> None:
    schema = schema_from_ddl("id INT, g INT, s TEXT", ["id"])
    a, b = RandomTable("t", schema, random.Random(9)), RandomTable("t", schema, random.Random(9))
    for _ in range(20):
        assert a.step(10).equals(b.step(10))


# -- run_differential (against the DuckDB-backed FakeFlow) ----------------------------

SOURCES = {
    "orders": ("o_id INT, o_customer INT, amount NUMERIC(10,2), note TEXT", ["o_id"]),
    "customers": ("c_id INT, name TEXT", ["c_id"], {"c_id": list(range(8))}),
    "events": ("kind TEXT, n INT", []),
}
VIEWS = [
    ("totals", "SELECT o_customer, SUM(amount) AS total, COUNT(*) AS n FROM orders GROUP BY o_customer"),
    ("joined", "SELECT c.name, o.amount FROM orders o JOIN customers c ON o.o_customer = c.c_id"),
    ("hist", "SELECT n, COUNT(*) AS k FROM totals GROUP BY n"),
    ("kinds", "SELECT kind, n FROM events WHERE n > 2"),
]


@pytest.mark.parametrize("poll_watch", [False, True])
def test_run_differential_passes_on_a_correct_flow(oracle: PgOracle, poll_watch: bool) -> None:
    flows: list[FakeFlow] = []

    def make_flow(execution: str) -> FakeFlow:
        flows.append(FakeFlow(poll_watch=poll_watch))
        return flows[-1]

    report = run_differential(make_flow, oracle, SOURCES, VIEWS, steps=8, seed=5, executions=("a", "b"))
    assert len(flows) == 2  # one flow per execution mode, each checked
    for flow in flows:
        flow.close()
    assert report.steps == 8 and report.ticks >= 9
    assert set(report.view_rows) == {v for v, _ in VIEWS}
    assert all(len(counts) == 9 for counts in report.view_rows.values())


@pytest.mark.parametrize("poll_watch", [False, True])
@pytest.mark.parametrize("bug", ["ignore_deletes", "drop_watch"])
def test_run_differential_catches_a_broken_flow(oracle: PgOracle, bug: str, poll_watch: bool) -> None:
    flow = FakeFlow(bug=bug, poll_watch=poll_watch)
    with pytest.raises(AssertionError, match=r"seed=7 step=\d+ view="):
        run_differential(lambda execution: flow, oracle, SOURCES, VIEWS, steps=8, seed=7, watch_timeout=0.2,
                         executions=("fake",))
    flow.close()
