"""MySQL result tables: types and keys from plans, and step deltas applied as keyed upserts and deletes."""

from __future__ import annotations

import collections
import datetime as dt
import random
import time
from decimal import Decimal

import pyarrow as pa
import pymysql
import pytest
from hypothesis import given, settings, strategies as st

from freshview.connectors.mysql import sink as sink_module
from freshview.connectors.mysql.sink import (
    COUNT_COLUMN, KEY_COLUMN, ResultShape, ResultTable, UnsupportedValueError, commit_step, insert_texts, key_digest,
    mysql_type, plan_result_shape, read_position, statement_packets)
from freshview.errors import SchemaError
from freshview.plan.shape import ResultKey
from freshview.schema import SqlType, parse_type, schema_from_ddl
from freshview.sql import build_plan

SRC = schema_from_ddl("id INT, grp TEXT, amount NUMERIC(10,2), x DOUBLE PRECISION", ["id"])


class Catalog:
    def relation_columns(self, name):
        return (tuple((c.name, c.type) for c in SRC.columns), False) if name == "t" else None


def shape(sql_text):
    return plan_result_shape(build_plan(sql_text, Catalog()))


# ------------------------------------------------------------------------------------------- pure
def test_types():
    assert [mysql_type(parse_type(t)) for t in ("smallint", "int", "bigint", "real", "double precision", "text",
                                                "boolean", "date", "timestamp", "timestamptz", "interval")] == [
        "smallint", "int", "bigint", "float", "double", "longtext", "tinyint(1)", "date", "datetime(6)",
        "datetime(6)", "time(6)"]
    assert mysql_type(SqlType.numeric(12, 2)) == "decimal(12,2)"
    assert mysql_type(SqlType.numeric()) == "decimal(65,6)"  # unbounded: MySQL's widest, freshview's scale
    assert mysql_type(SqlType.numeric(None, 16)) == "decimal(65,16)"  # AVG
    with pytest.raises(SchemaError, match="at most 30"):
        mysql_type(SqlType.numeric(38, 35))


def test_keys_follow_the_view_kind():
    agg = shape("SELECT grp, SUM(amount) AS total, COUNT(*) AS n FROM t GROUP BY grp")
    assert agg.key == ("grp",) and not agg.counted
    assert agg.columns == (("grp", "longtext"), ("total", "decimal(65,2)"), ("n", "bigint"))
    assert shape("SELECT DISTINCT grp FROM t").key == ("grp",)
    bag = shape("SELECT grp, amount FROM t WHERE amount > 0")
    assert bag.counted and bag.key == ("grp", "amount")
    assert shape("SELECT COUNT(*) AS n FROM t").key == ()
    assert shape("SELECT grp, x FROM t").floats == ("x",)


def test_reserved_column_names_are_refused():
    with pytest.raises(SchemaError, match="_fv_key"):
        sink_module.result_shape([("_fv_key", SqlType("int4"))], ResultKey((0,), False, False))


def test_key_digest_is_typed_and_null_aware():
    assert key_digest([None]) != key_digest(["None"]) != key_digest([1])
    assert key_digest([1]) != key_digest(["1"])
    assert key_digest(["a", None]) != key_digest([None, "a"])
    assert key_digest([0.0]) == key_digest([-0.0])
    assert key_digest(["a"]) != key_digest(["A"]) != key_digest(["a "])
    assert len(key_digest([1, "x"])) == 16


def test_statements_of_a_keyed_delta_are_deletes_then_upserts():
    table = ResultTable("app.v", ResultShape((("g", "longtext"), ("n", "bigint")), ("g",), False))
    delta = pa.table({"g": ["a", "b", "b"], "n": [1, 2, 3], "_weight": [-1, -1, 1]})
    deleted, upserted = table.statements(delta)
    assert deleted.sql.startswith("DELETE FROM `app`.`v` WHERE `_fv_key` IN (%s)")
    assert list(deleted.params) == [key_digest(["a"])]
    assert upserted.rows.to_pylist() == [{"_fv_key": key_digest(["b"]), "g": "b", "n": 3}]
    assert upserted.suffix == " ON DUPLICATE KEY UPDATE `n` = VALUES(`n`)"
    [text] = insert_texts(upserted, repr)
    assert text == ("INSERT INTO `app`.`v` (`_fv_key`, `g`, `n`) VALUES "
                    f"(X'{key_digest(['b']).hex()}',_utf8mb4 X'62',3) ON DUPLICATE KEY UPDATE `n` = VALUES(`n`)")


def test_literals_split_into_statements_by_size(monkeypatch):
    monkeypatch.setattr(sink_module, "STATEMENT_BYTES", 100)
    table = ResultTable("v", ResultShape((("g", "longtext"), ("d", "decimal(65,16)")), (), False))
    awkward = "x'\\y" * 10  # quotes and backslashes travel as hex, whatever NO_BACKSLASH_ESCAPES says
    rows = pa.table({"g": ["", None, awkward, "é"],
                     "d": pa.array([Decimal("1E-16"), None, Decimal("-0.0000000123456789"), Decimal(5)],
                                   pa.decimal128(38, 16))})
    texts = insert_texts(sink_module.Statement(table._insert, rows=rows), repr)
    values = ",".join(t.removeprefix("INSERT INTO `v` (`g`, `d`) VALUES ") for t in texts)
    assert len(texts) == 3 and values == (
        "(_utf8mb4 X'',0.0000000000000001),(NULL,NULL),"
        f"(_utf8mb4 X'{awkward.encode().hex()}',-0.0000000123456789),(_utf8mb4 X'c3a9',5.0000000000000000)")


def test_create_sql():
    table = ResultTable("app.`we``ird`", ResultShape((("g", "longtext"), ("v", "int")), ("g", "v"), True))
    assert table.create_sql() == [
        "CREATE TABLE `app`.`we``ird` (`_fv_key` binary(16) NOT NULL PRIMARY KEY, `g` longtext, `v` int, "
        "`_fv_count` bigint NOT NULL) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"]


# ---------------------------------------------------------------------------------- against MariaDB
PATHS = {"one": 1 << 30, "many": 40}  # STATEMENT_BYTES: one INSERT per step, or one per row or two


@pytest.fixture(params=list(PATHS))
def path(request, monkeypatch):
    monkeypatch.setattr(sink_module, "STATEMENT_BYTES", PATHS[request.param])
    return request.param


@pytest.fixture
def conn(fv):
    sink_module.prepare_session(fv)
    return fv


def make(conn, name, columns, key, counted=False):
    table = ResultTable(name, ResultShape(tuple(columns), tuple(key), counted,
                                          tuple(n for n, t in columns if t in ("double", "float"))))
    with conn.cursor() as cur:
        for stmt in table.create_sql():
            cur.execute(stmt)
    return table


def weighted(columns, rows):
    """A delta: ``rows`` are tuples of values then the weight; ``columns`` (name, arrow type)."""
    data = list(zip(*rows)) if rows else [[] for _ in range(len(columns) + 1)]
    arrays = [pa.array(list(d), t) for d, (_, t) in zip(data, columns)] + [pa.array(list(data[-1]), pa.int64())]
    return pa.Table.from_arrays(arrays, names=[n for n, _ in columns] + ["_weight"])


def contents(conn, table):
    """The table's rows without the hash key, sorted (NULLs first)."""
    with conn.cursor() as cur:
        cur.execute(f"SELECT * FROM {table}")
        names = [d[0] for d in cur.description]
        rows = [tuple(v for n, v in zip(names, r) if n != KEY_COLUMN) for r in cur.fetchall()]
    return sorted(rows, key=lambda r: [(v is not None, v) for v in r])


TYPED = [("t", "longtext", pa.string()), ("n", "decimal(20,4)", pa.decimal128(20, 4)), ("i", "bigint", pa.int64()),
         ("s", "smallint", pa.int16()), ("f", "double", pa.float64()), ("r", "float", pa.float32()),
         ("b", "tinyint(1)", pa.bool_()), ("d", "date", pa.date32()), ("ts", "datetime(6)", pa.timestamp("us")),
         ("tz", "datetime(6)", pa.timestamp("us", tz="UTC")), ("iv", "time(6)", pa.duration("us")),
         ("u", "decimal(65,6)", pa.decimal128(38, 6))]
UTC = dt.timezone.utc
TYPED_ROWS = [
    ("", Decimal("1.5000"), -(2**63), -32768, 0.1, 0.5, True, dt.date(2024, 2, 29),
     dt.datetime(2024, 1, 1, 10, 0, 0, 500000), dt.datetime(2024, 1, 1, 8, 0, tzinfo=UTC),
     dt.timedelta(days=-1, seconds=5, microseconds=7), Decimal("0.000001")),
    ("a 'quoted', \"double\" \\ back\tslash\nnewline é \x00 😀", Decimal("-1234567890123456.5678"), 2**63 - 1,
     32767, 1e300, -2.5, False, dt.date(1000, 1, 1), dt.datetime(1000, 1, 1), dt.datetime(9999, 12, 31, tzinfo=UTC),
     dt.timedelta(hours=838, microseconds=1), Decimal("-99999999999999999999999999999999.999999")),
    ("NULL", Decimal("0.0000"), 0, 0, -0.0, 0.0, None, None, None, None, dt.timedelta(0), None),
    (None, None, None, None, None, None, None, None, None, None, None, None),
]


def test_every_type_is_written_exactly(conn, path):
    table = make(conn, "fv_typed", [(n, t) for n, t, _ in TYPED], [n for n, _, _ in TYPED], counted=True)
    delta = weighted([(n, a) for n, _, a in TYPED], [r + (1,) for r in TYPED_ROWS[:3]] + [TYPED_ROWS[3] + (2,)])
    assert table.apply(conn, delta) == 4
    conn.commit()
    with conn.cursor() as cur:
        cur.execute("SELECT * FROM fv_typed ORDER BY i IS NULL, i")
        got = [r[1:] for r in cur.fetchall()]
    expected = sorted(TYPED_ROWS[:3], key=lambda r: r[2]) + [TYPED_ROWS[3]]
    for have, want in zip(got, expected):
        want = tuple(v.replace(tzinfo=None) if isinstance(v, dt.datetime) else v for v in want)
        assert have[:-1] == want[:6] + (None if want[6] is None else int(want[6]),) + want[7:]
    assert [r[-1] for r in got] == [1, 1, 1, 2]


def test_infinite_floats_are_refused_by_column(conn, path):
    table = make(conn, "fv_inf", [("f", "double")], ["f"], counted=True)
    with pytest.raises(UnsupportedValueError, match="view column f holds inf"):
        table.apply(conn, weighted([("f", pa.float64())], [(float("inf"), 1)]))


def test_out_of_range_intervals_are_errors_not_truncations(conn):
    import pymysql

    table = make(conn, "fv_iv", [("iv", "time(6)")], ["iv"], counted=True)
    with pytest.raises(pymysql.err.MySQLError, match="Incorrect time value"):
        table.apply(conn, weighted([("iv", pa.duration("us"))], [(dt.timedelta(days=40), 1)]))


def test_null_and_text_keys_are_keys(conn, path):
    table = make(conn, "fv_nk", [("a", "longtext"), ("b", "int"), ("total", "bigint")], ["a", "b"])
    cols = [("a", pa.string()), ("b", pa.int32()), ("total", pa.int64())]
    long = "x" * 5000
    table.apply(conn, weighted(cols, [(None, None, 1, 1), (None, 1, 2, 1), ("x", None, 3, 1), ("x", 1, 4, 1),
                                      ("a", 1, 6, 1), ("A", 1, 7, 1), ("a ", 1, 8, 1), (long, 1, 9, 1),
                                      (long + "y", 1, 10, 1)]))
    # every group changes: an old row and a new row for each, in any order; (x, NULL) disappears
    table.apply(conn, weighted(cols, [(None, None, 10, 1), (None, None, 1, -1), (None, 1, 2, -1), (None, 1, 20, 1),
                                      ("x", None, 3, -1), ("x", 1, 4, -1), ("x", 1, 40, 1), ("y", None, 5, 1),
                                      ("A", 1, 7, -1), (long, 1, 9, -1), (long, 1, 90, 1)]))
    conn.commit()
    assert contents(conn, "fv_nk") == [
        (None, None, 10), (None, 1, 20), ("a", 1, 6), ("a ", 1, 8), ("x", 1, 40), (long, 1, 90),
        (long + "y", 1, 10), ("y", None, 5)]


def test_counted_rows_come_and_go(conn, path):
    table = make(conn, "fv_bag", [("g", "longtext"), ("v", "int")], ["g", "v"], counted=True)
    cols = [("g", pa.string()), ("v", pa.int32())]
    table.apply(conn, weighted(cols, [("a", 1, 3), (None, None, 1), ("b", 2, 1)]))
    table.apply(conn, weighted(cols, [("a", 1, -2), (None, None, -1), ("b", 2, 1), ("c", 3, 1)]))
    assert contents(conn, "fv_bag") == [("a", 1, 1), ("b", 2, 2), ("c", 3, 1)]
    table.apply(conn, weighted(cols, [("a", 1, -1), ("b", 2, -2)]))
    assert contents(conn, "fv_bag") == [("c", 3, 1)]
    assert COUNT_COLUMN in [d[0] for d in _description(conn, "fv_bag")]


def _description(conn, table):
    with conn.cursor() as cur:
        cur.execute(f"SELECT * FROM {table} LIMIT 0")
        return cur.description


def test_the_single_row_of_a_global_aggregate(conn, path):
    table = make(conn, "fv_global", [("n", "bigint"), ("s", "decimal(65,6)")], [])
    cols = [("n", pa.int64()), ("s", pa.decimal128(38, 6))]
    table.apply(conn, weighted(cols, [(0, None, 1)]))
    table.apply(conn, weighted(cols, [(0, None, -1), (2, Decimal(5), 1)]))
    assert contents(conn, "fv_global") == [(2, Decimal("5.000000"))]
    table.apply(conn, weighted(cols, [(3, Decimal(6), 1), (2, Decimal(5), -1)]))  # new row first this time
    assert contents(conn, "fv_global") == [(3, Decimal("6.000000"))]
    table.apply(conn, weighted(cols, [(3, Decimal(6), -1)]))  # gone (e.g. HAVING)
    assert contents(conn, "fv_global") == []


@pytest.mark.parametrize("counted", [False, True], ids=["keyed", "counted"])
def test_random_deltas_equal_the_reference_after_every_step(conn, path, counted, monkeypatch):
    """Random consolidated steps (NULLs, duplicates, keys that come, change and go) against a Python model."""
    monkeypatch.setattr(sink_module, "DELETE_CHUNK", 7)  # several DELETE statements per step
    rng = random.Random(10 + counted)
    cols = [("g", pa.string()), ("k", pa.int64()), ("v", pa.decimal128(12, 2))]
    table = make(conn, f"fv_rand_{int(counted)}", [("g", "longtext"), ("k", "bigint"), ("v", "decimal(12,2)")],
                 ["g", "k", "v"] if counted else ["g", "k"], counted=counted)
    groups = [None, "a", "A", "b", "", "é"]

    def some_value():
        return None if rng.random() < 0.2 else Decimal(rng.randint(-50, 50)) / 4

    model: collections.Counter = collections.Counter()  # row -> multiplicity (keyed: at most one row per key)
    for step in range(25):
        changes: collections.Counter = collections.Counter()
        if counted:
            for row in list(model):
                if rng.random() < 0.3:
                    changes[row] -= rng.randint(1, model[row])
            for _ in range(rng.randint(0, 40)):
                changes[(rng.choice(groups), rng.choice([None, 1, 2, 3]), some_value())] += rng.randint(1, 3)
        else:
            current = {r[:2]: r for r in model}
            for key in {(rng.choice(groups), rng.choice([None, 1, 2, 3])) for _ in range(rng.randint(0, 20))}:
                old, new = current.get(key), key + (some_value(),)
                if old is not None:
                    changes[old] -= 1
                if old is None or rng.random() < 0.7:  # a new key, or a changed (else deleted) one
                    changes[new] += 1
        changes = collections.Counter({r: w for r, w in changes.items() if w})  # consolidated: no zero weights
        rows = [r + (w,) for r, w in changes.items()]
        rng.shuffle(rows)
        table.apply(conn, weighted(cols, rows))
        conn.commit()
        model.update(changes)
        model = +model
        expected = sorted(((r + (c,)) if counted else r for r, c in model.items()),
                          key=lambda r: [(v is not None, v) for v in r])
        assert contents(conn, table.table) == expected, f"step {step}"


@pytest.fixture(params=["one by one", "multi-statement"])
def step_conn(request, fv, mysql_database):
    """The sink's connection: statements sent one by one, or (as ``connect`` opens it) several per packet."""
    if request.param == "one by one":
        sink_module.prepare_session(fv)
        yield fv
        return
    from pymysql.constants import CLIENT

    conn = pymysql.connect(**mysql_database, client_flag=CLIENT.MULTI_STATEMENTS)
    sink_module.prepare_session(conn)
    assert sink_module.multi_statements(conn) and not sink_module.multi_statements(fv)
    try:
        yield conn
    finally:
        conn.close()


def test_statement_packets_join_statements_up_to_the_limit():
    texts = ["START TRANSACTION", "x" * 30, "y" * 5, "z" * 50, "COMMIT"]
    assert statement_packets(texts, multi=False) == texts
    assert statement_packets(texts, multi=True) == [";\n".join(texts)]
    assert statement_packets(texts, multi=True, limit=40) == ["START TRANSACTION", "x" * 30 + ";\n" + "y" * 5,
                                                              "z" * 50, "COMMIT"]


def test_results_and_position_commit_together(step_conn, path):
    conn = step_conn
    sent, clock = commit_step(conn, [], "other", "0-1-1")
    assert sent == 0 and abs(clock - time.time()) < 60  # the server's clock after the commit
    a = make(conn, "fv_a", [("k", "bigint"), ("v", "bigint")], ["k"])
    b = make(conn, "fv_b", [("f", "double")], ["f"], counted=True)
    cols = [("k", pa.int64()), ("v", pa.int64())]
    assert read_position(conn, "app") is None
    commit_step(conn, [(a, weighted(cols, [(1, 10, 1), (2, 20, 1)]))], "app", "0-1-5", changes=2, lag_ms=3.0)
    assert read_position(conn, "app") == "0-1-5"
    # the second table's write fails after the first one's went out: neither results nor position move
    with pytest.raises(UnsupportedValueError):
        commit_step(conn, [(a, weighted(cols, [(1, 10, -1), (3, 30, 1)])),
                           (b, weighted([("f", pa.float64())], [(float("nan"), 1)]))], "app", "0-1-9")
    assert read_position(conn, "app") == "0-1-5"
    assert contents(conn, "fv_a") == [(1, 10), (2, 20)]
    # a failure inside the database (a dropped result table) too
    with conn.cursor() as cur:
        cur.execute("DROP TABLE fv_b")
    with pytest.raises(Exception, match="fv_b"):
        commit_step(conn, [(a, weighted(cols, [(3, 30, 1)])), (b, weighted([("f", pa.float64())], [(1.0, 1)]))],
                    "app", "0-1-9")
    assert read_position(conn, "app") == "0-1-5" and contents(conn, "fv_a") == [(1, 10), (2, 20)]
    with conn.cursor() as cur:
        cur.execute("SELECT steps, changes, lag_ms, status FROM freshview.progress WHERE source = 'app'")
        assert cur.fetchone() == (1, 2, 3.0, "running")


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_few_rows_are_written_value_by_value_to_the_same_text(data):
    """insert_texts' two ways (value by value for a step's few rows, Arrow for more) write the same text."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sink_module, "STATEMENT_BYTES", data.draw(st.sampled_from([60, 200, 4 << 20])))
        _same_text_both_ways(data)


def _same_text_both_ways(data):
    n = data.draw(st.integers(1, 12))
    texts = st.one_of(st.none(), st.text(max_size=6))
    rows = pa.table({
        "k": pa.array(data.draw(st.lists(st.one_of(st.none(), st.binary(min_size=16, max_size=16)), min_size=n, max_size=n)),
                      pa.binary(16)),
        "g": pa.array(data.draw(st.lists(texts, min_size=n, max_size=n)), pa.string()),
        "i": pa.array(data.draw(st.lists(st.one_of(st.none(), st.integers(-2**63, 2**63 - 1)), min_size=n, max_size=n)),
                      pa.int64()),
        "d": pa.array(data.draw(st.lists(st.one_of(st.none(), st.decimals(min_value=-10**20, max_value=10**20, places=6,
                                                                          allow_nan=False)), min_size=n, max_size=n)),
                      pa.decimal128(38, 6)),
        "f": pa.array(data.draw(st.lists(st.one_of(st.none(), st.floats(allow_nan=False, allow_infinity=False)),
                                         min_size=n, max_size=n)), pa.float64()),
        "t": pa.array(data.draw(st.lists(st.one_of(st.none(), st.dates()), min_size=n, max_size=n)), pa.date32()),
    })
    statement = sink_module.Statement("INSERT INTO `v` VALUES ", rows=rows, suffix=" ON DUPLICATE KEY UPDATE i = i")
    escape = pymysql.converters.escape_item
    literal = lambda v: escape(v, "utf8mb4")  # noqa: E731
    assert insert_texts(statement, literal, small_rows=n) == insert_texts(statement, literal, small_rows=0)
