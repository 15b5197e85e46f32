"""Result tables: keys derived from plans, and step deltas applied as upserts and deletes."""

from __future__ import annotations

from decimal import Decimal

import psycopg
import pyarrow as pa
import pytest

from freshview.connectors.postgres.sink import COUNT_COLUMN, ResultTable, result_shape
from freshview.schema import schema_from_ddl
from freshview.sql import build_plan

SRC = schema_from_ddl("id INT, grp TEXT, amount NUMERIC(10,2)", ["id"])


class Catalog:
    def relation_columns(self, name):
        return (tuple((c.name, c.type) for c in SRC.columns), False) if name == "t" else None


def shape(sql_text):
    return result_shape(build_plan(sql_text, Catalog()))


def test_keys_follow_the_view_kind():
    agg = shape("SELECT grp, SUM(amount) AS total, COUNT(*) AS n FROM t GROUP BY grp")
    assert agg.key == ("grp",) and not agg.counted and agg.nullable_key
    assert agg.columns == (("grp", "text"), ("total", "numeric"), ("n", "bigint"))
    assert shape("SELECT DISTINCT grp FROM t").key == ("grp",)
    bag = shape("SELECT grp, amount FROM t WHERE amount > 0")
    assert bag.counted and bag.key == ("grp", "amount")
    assert shape("SELECT COUNT(*) AS n FROM t").key == ()


def delta(rows, names, types):
    cols = list(zip(*rows))
    arrays = [pa.array(list(c), t) for c, t in zip(cols[:-1], types)] + [pa.array(list(cols[-1]), pa.int64())]
    return pa.Table.from_arrays(arrays, names=names + ["_weight"])


@pytest.fixture
def conn(pg):
    with psycopg.connect(pg) as c:
        yield c
        c.rollback()


def contents(conn, table, order):
    return conn.execute(f"SELECT * FROM {table} ORDER BY {order}").fetchall()


def test_aggregate_view_updates_rows_in_place_and_keeps_null_groups(conn):
    table = ResultTable("public.fv_totals", shape("SELECT grp, SUM(amount) AS total FROM t GROUP BY grp"))
    for stmt in table.create_sql():
        conn.execute(stmt)
    types = [pa.string(), pa.decimal128(38, 2)]
    table.apply(conn, delta([("a", Decimal("1.00"), 1), (None, Decimal("2.00"), 1)], ["grp", "total"], types))
    assert contents(conn, "fv_totals", "grp NULLS LAST") == [("a", Decimal("1.00")), (None, Decimal("2.00"))]
    table.apply(conn, delta([("a", Decimal("1.00"), -1), ("a", Decimal("5.00"), 1),
                             (None, Decimal("2.00"), -1)], ["grp", "total"], types))
    assert contents(conn, "fv_totals", "grp") == [("a", Decimal("5.00"))]


def test_bag_view_counts_duplicates(conn):
    table = ResultTable("public.fv_bag", shape("SELECT grp, amount FROM t"))
    for stmt in table.create_sql():
        conn.execute(stmt)
    types = [pa.string(), pa.decimal128(10, 2)]
    table.apply(conn, delta([("a", Decimal("1.00"), 2), ("b", None, 1)], ["grp", "amount"], types))
    assert contents(conn, "fv_bag", "grp") == [("a", Decimal("1.00"), 2), ("b", None, 1)]
    table.apply(conn, delta([("a", Decimal("1.00"), -1), ("b", None, -1)], ["grp", "amount"], types))
    assert contents(conn, "fv_bag", "grp") == [("a", Decimal("1.00"), 1)]
    assert COUNT_COLUMN in [d.name for d in conn.execute("SELECT * FROM fv_bag").description]


def test_global_aggregate_single_row(conn):
    table = ResultTable("public.fv_count", shape("SELECT COUNT(*) AS n FROM t"))
    for stmt in table.create_sql():
        conn.execute(stmt)
    table.apply(conn, delta([(0, 1)], ["n"], [pa.int64()]))
    table.apply(conn, delta([(0, -1), (3, 1)], ["n"], [pa.int64()]))
    assert contents(conn, "fv_count", "n") == [(3,)]


# ---------------------------------------------------------------------------- the write path
import collections  # noqa: E402
import datetime as dt  # noqa: E402

from freshview.connectors.postgres import sink as sink_module  # noqa: E402
from freshview.connectors.postgres.sink import ResultShape  # noqa: E402

PATHS = {"python": 10**9, "arrow": 0}  # SMALL_ROWS: every delta rendered by Python, or every one by Arrow


@pytest.fixture(params=list(PATHS))
def path(request, monkeypatch):
    monkeypatch.setattr(sink_module, "SMALL_ROWS", PATHS[request.param])
    return request.param


def make(conn, name, columns, key, counted=False, nullable=False):
    table = ResultTable(f"public.{name}", ResultShape(tuple(columns), tuple(key), counted, nullable))
    for stmt in table.create_sql():
        conn.execute(stmt)
    return table


def weighted(columns, rows):
    """A delta: ``rows`` are tuples of values then the weight; ``columns`` (name, arrow type)."""
    data = list(zip(*rows)) if rows else [[] for _ in range(len(columns) + 1)]
    arrays = [pa.array(list(d), t) for d, (_, t) in zip(data, columns)] + [pa.array(list(data[-1]), pa.int64())]
    return pa.Table.from_arrays(arrays, names=[n for n, _ in columns] + ["_weight"])


TYPED = [("t", "text", pa.string()), ("n", "numeric(20,4)", pa.decimal128(20, 4)), ("i", "bigint", pa.int64()),
         ("s", "smallint", pa.int16()), ("f", "double precision", pa.float64()), ("r", "real", pa.float32()),
         ("b", "boolean", pa.bool_()), ("d", "date", pa.date32()), ("ts", "timestamp", pa.timestamp("us")),
         ("tz", "timestamptz", pa.timestamp("us", tz="UTC")), ("iv", "interval", pa.duration("us")),
         ("u", "numeric", pa.decimal128(38, 6))]
UTC = dt.timezone.utc
TYPED_ROWS = [
    ("", Decimal("1.5000"), -(2**63), -32768, 0.1, 0.1, True, dt.date(2024, 2, 29),
     dt.datetime(2024, 1, 1, 10, 0, 0, 500000), dt.datetime(2024, 1, 1, 8, 0, tzinfo=UTC),
     dt.timedelta(days=-1, seconds=5, microseconds=7), Decimal("0.000001")),
    ('a "quoted", {braced} \\ back\tslash\nnewline é', Decimal("-12345678901234.5678"), 2**63 - 1, 32767,
     float("inf"), float("-inf"), False, dt.date(1, 1, 1), dt.datetime(1, 1, 1), dt.datetime(2262, 4, 11, tzinfo=UTC),
     dt.timedelta(days=40000, microseconds=1), Decimal("-99999999999999999999999999999999.999999")),
    ("NULL", Decimal("0.0000"), 0, 0, 1e300, 3.4028234663852886e38, None, None, None, None, dt.timedelta(0), None),
    (None, None, None, None, None, None, None, None, None, None, None, None),
]


def test_every_type_is_written_exactly(conn, path):
    table = make(conn, "fv_typed", [(n, t) for n, t, _ in TYPED], [n for n, _, _ in TYPED], counted=True,
                 nullable=True)
    rows = [r + (1,) for r in TYPED_ROWS] + [(None,) * 12 + (1,)]  # the all-NULL row twice: counted
    delta = weighted([(n, a) for n, _, a in TYPED], rows[:3] + [rows[3][:-1] + (2,)])
    assert table.apply(conn, delta) == 4
    got = conn.execute("SELECT * FROM fv_typed ORDER BY i NULLS LAST").fetchall()
    expected = sorted(TYPED_ROWS[:3], key=lambda r: r[2]) + [TYPED_ROWS[3]]
    for have, want in zip(got, expected):
        assert have[:-1][:5] == want[:5]
        assert have[5] == (None if want[5] is None else pytest.approx(want[5], rel=1e-7))  # real: float32
        assert have[6:12] == tuple(v.replace(tzinfo=UTC) if isinstance(v, dt.datetime) and v.tzinfo else v
                                   for v in want[6:12])
    assert [r[-1] for r in got] == [1, 1, 1, 2]
    nan = weighted([("f", pa.float64())], [(float("nan"), 1)])
    nan_table = make(conn, "fv_nan", [("f", "double precision")], ["f"], counted=True, nullable=True)
    nan_table.apply(conn, nan)
    assert str(conn.execute("SELECT f FROM fv_nan").fetchone()[0]) == "nan"


def test_null_keys_are_keys(conn, path):
    table = make(conn, "fv_nk", [("a", "text"), ("b", "integer"), ("total", "bigint")], ["a", "b"], nullable=True)
    cols = [("a", pa.string()), ("b", pa.int32()), ("total", pa.int64())]
    table.apply(conn, weighted(cols, [(None, None, 1, 1), (None, 1, 2, 1), ("x", None, 3, 1), ("x", 1, 4, 1)]))
    # every group changes: an old row and a new row for each, in any order; (x, NULL) disappears
    table.apply(conn, weighted(cols, [(None, None, 10, 1), (None, None, 1, -1), (None, 1, 2, -1), (None, 1, 20, 1),
                                      ("x", None, 3, -1), ("x", 1, 4, -1), ("x", 1, 40, 1), ("y", None, 5, 1)]))
    assert contents(conn, "fv_nk", "a NULLS FIRST, b NULLS FIRST") == [
        (None, None, 10), (None, 1, 20), ("x", 1, 40), ("y", None, 5)]


def test_counted_rows_come_and_go(conn, path):
    table = make(conn, "fv_bag2", [("g", "text"), ("v", "integer")], ["g", "v"], counted=True, nullable=True)
    cols = [("g", pa.string()), ("v", pa.int32())]
    table.apply(conn, weighted(cols, [("a", 1, 3), (None, None, 1), ("b", 2, 1)]))
    table.apply(conn, weighted(cols, [("a", 1, -2), (None, None, -1), ("b", 2, 1), ("c", 3, 1)]))
    assert contents(conn, "fv_bag2", "g") == [("a", 1, 1), ("b", 2, 2), ("c", 3, 1)]
    table.apply(conn, weighted(cols, [("a", 1, -1), ("b", 2, -2)]))
    assert contents(conn, "fv_bag2", "g") == [("c", 3, 1)]


def test_the_single_row_of_a_global_aggregate(conn, path):
    table = make(conn, "fv_global", [("n", "bigint"), ("s", "numeric")], [])
    cols = [("n", pa.int64()), ("s", pa.decimal128(38, 6))]
    table.apply(conn, weighted(cols, [(0, None, 1)]))
    table.apply(conn, weighted(cols, [(0, None, -1), (2, Decimal(5), 1)]))
    assert contents(conn, "fv_global", "n") == [(2, Decimal("5.000000"))]
    table.apply(conn, weighted(cols, [(3, Decimal(6), 1), (2, Decimal(5), -1)]))  # new row first this time
    assert contents(conn, "fv_global", "n") == [(3, Decimal("6.000000"))]
    table.apply(conn, weighted(cols, [(3, Decimal(6), -1)]))  # gone (e.g. HAVING)
    assert contents(conn, "fv_global", "n") == []


def test_a_large_delta_in_several_statements(conn, path, monkeypatch):
    monkeypatch.setattr(sink_module, "CHUNK_ROWS", 3_000)
    table = make(conn, "fv_big", [("k", "integer"), ("v", "numeric(12,2)"), ("note", "text")], ["k"])
    counted = make(conn, "fv_bigbag", [("k", "integer"), ("note", "text")], ["k", "note"], counted=True,
                   nullable=True)
    cols = [("k", pa.int32()), ("v", pa.decimal128(12, 2)), ("note", pa.string())]
    model = {k: (Decimal(k) / 4, f"n{k % 7}" if k % 5 else None) for k in range(20_000)}
    table.apply(conn, weighted(cols, [(k, v, n, 1) for k, (v, n) in model.items()]))
    bag = collections.Counter((k % 1000, n) for k, (_, n) in model.items())  # consolidated: counts
    counted.apply(conn, weighted([("k", pa.int32()), ("note", pa.string())], [r + (c,) for r, c in bag.items()]))
    rows = []
    for k in range(0, 20_000, 2):  # half the keys change, a quarter of those disappear; 5,000 new keys
        v, n = model[k]
        rows.append((k, v, n, -1))
        if k % 8:
            model[k] = (v + 1, "changed")
            rows.append((k, v + 1, "changed", 1))
        else:
            del model[k]
    for k in range(20_000, 25_000):
        model[k] = (Decimal(1), None)
        rows.append((k, Decimal(1), None, 1))
    statements = table.statements(weighted(cols, rows))
    netted = 7_500 + 2_500 + 5_000  # upserts, deletes, new keys
    assert len(statements) == (1 if path == "python" else -(-netted // 3_000))  # a statement per chunk
    assert table.apply(conn, weighted(cols, rows)) == netted
    got = conn.execute("SELECT k, v, note FROM fv_big ORDER BY k").fetchall()
    assert got == [(k, v, n) for k, (v, n) in sorted(model.items())]
    assert conn.execute("SELECT count(*), sum(_fv_count) FROM fv_bigbag").fetchone() == (len(bag), 20_000)


def test_one_statement_per_view_and_it_is_prepared(pg):
    with psycopg.connect(pg, autocommit=True) as c:
        c.execute("DROP TABLE IF EXISTS fv_prep")
        table = make(c, "fv_prep", [("k", "integer"), ("v", "bigint")], ["k"])
        cols = [("k", pa.int32()), ("v", pa.int64())]
        try:
            for i in range(8):
                delta = weighted(cols, [(1, i - 1, -1), (1, i, 1)] if i else [(1, 0, 1)])
                assert len(table.statements(delta)) == 1
                with c.transaction():
                    table.apply(c, delta)
            assert c.execute("SELECT v FROM fv_prep").fetchall() == [(7,)]
            prepared = c.execute("SELECT statement FROM pg_prepared_statements").fetchall()
            assert any("fv_prep" in s for (s,) in prepared)
        finally:
            c.execute("DROP TABLE fv_prep")


ARRAYS = [("k", "text[]", pa.list_(pa.string())), ("xs", "integer[]", pa.list_(pa.int32())),
          ("fs", "double precision[]", pa.list_(pa.float64())), ("ds", "date[]", pa.list_(pa.date32())),
          ("ns", "numeric(10,2)[]", pa.list_(pa.decimal128(10, 2))), ("iv", "interval", pa.month_day_nano_interval())]


def test_arrays_and_intervals_are_written_exactly(conn, path):
    """Array columns (keys too) and intervals with months, days and microseconds, every part signed."""
    table = make(conn, "fv_arrays", [(n, t) for n, t, _ in ARRAYS], ["k"], nullable=True)
    cols = [(n, a) for n, _, a in ARRAYS]
    odd = ['a "q", {b} \\ c', None, "", "NULL", "x,y"]
    table.apply(conn, weighted(cols, [
        (odd, [1, None, -3], [0.5, float("inf"), None], [dt.date(2024, 2, 29)], [Decimal("1.50"), None],
         pa.scalar((14, -3, -5_000_000_000), pa.month_day_nano_interval()).as_py(), 1),
        ([], [], [], [], [], pa.scalar((0, 1, 0), pa.month_day_nano_interval()).as_py(), 1),
        (None, None, None, None, None, None, 1),
    ]))
    got = conn.execute("SELECT k, xs, fs, ds, ns, iv::text, iv = interval '1 year 2 mons -3 days -5 seconds' "
                       "FROM fv_arrays ORDER BY k NULLS LAST").fetchall()
    assert got == [([], [], [], [], [], "1 day", False),
                   (odd, [1, None, -3], [0.5, float("inf"), None], [dt.date(2024, 2, 29)], [Decimal("1.50"), None],
                    "1 year 2 mons -3 days -00:00:05", True),
                   (None, None, None, None, None, None, None)]
    table.apply(conn, weighted(cols, [([], [], [], [], [], pa.scalar((0, 1, 0), pa.month_day_nano_interval()).as_py(),
                                       -1), ([], [7], [], [], [], None, 1)]))
    assert conn.execute("SELECT k, xs FROM fv_arrays WHERE k = '{}'").fetchall() == [([], [7])]
