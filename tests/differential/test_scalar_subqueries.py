"""Scalar subqueries that are not aggregates (``sql.single_row``) against PostgreSQL.

A random stream over small domains with NULLs and duplicates (``c`` has no
key), where each subquery returns at most one row per place it is read (a
primary-key lookup, DISTINCT over one value, ORDER BY ... LIMIT 1), compared
with PostgreSQL after every step under every executor; and a step that makes
a subquery return two rows where its value is read: the view's step fails
with PostgreSQL's own message (checked against PostgreSQL over the same rows),
is rolled back, and the view goes on after a step that mends it.
"""

from __future__ import annotations

import re

import psycopg
import pyarrow as pa
import pytest

from freshview.errors import ExecutionError
from freshview.plan.functions import MORE_THAN_ONE_ROW
from freshview.schema import schema_from_ddl
from tests.differential.test_joins_subqueries import A, B, C
from tests.support.differential import run_differential


AT_MOST_ONE_ROW = [
    ("pk", "SELECT a_id, (SELECT b_v FROM b WHERE b_id = a.a_k) AS v FROM a"),
    ("pk_where", "SELECT a_id FROM a WHERE a_v = (SELECT b_v FROM b WHERE b.b_id = a.a_k)"),
    ("distinct", "SELECT a_id, (SELECT DISTINCT c_k FROM c WHERE c_k = a.a_k) AS k FROM a"),
    ("theta", "SELECT a_id, (SELECT DISTINCT c_k FROM c WHERE c_k > a.a_k AND c_k < a.a_k + 2) AS k FROM a"),
    ("uncorrelated", "SELECT a_id, a_v + (SELECT b_k FROM b WHERE b_id = 2) AS s FROM a"),
    ("uncorr_distinct", "SELECT a_id FROM a WHERE a_k = (SELECT DISTINCT c_w FROM c WHERE c_w = 1)"),
    ("limit1", "SELECT a_id, (SELECT b_v FROM b ORDER BY b_v DESC NULLS LAST, b_id LIMIT 1) AS top FROM a"),
    ("having", "SELECT a_k, COUNT(*) AS n FROM a GROUP BY a_k "
               "HAVING COUNT(*) > (SELECT b_v FROM b WHERE b_id = 1)"),
    ("grouped", "SELECT a_k, COUNT(*) AS n, (SELECT b_t FROM b WHERE b_id = a.a_k) AS t FROM a GROUP BY a_k"),
    ("nested", "SELECT a_id FROM a WHERE a_k IN "
               "(SELECT b_k FROM b WHERE b_v = (SELECT b_v FROM b WHERE b_id = 0))"),
]


def _at_most_one_row(make_flow, oracle, seed, steps, executions):
    report = run_differential(make_flow, oracle, sources={"a": A, "b": B, "c": C}, views=AT_MOST_ONE_ROW,
                              seed=seed, steps=steps, executions=executions)
    assert report.steps >= steps
    empty = [name for name, counts in report.view_rows.items() if not any(counts)]
    assert not empty, f"views that never had a row: {empty}"


def test_scalar_subqueries_of_at_most_one_row(make_flow, oracle):
    # In-process in the default run (the Spark lowering of single_row is checked below, under Spark too).
    _at_most_one_row(make_flow, oracle, seed=2301, steps=6, executions=("local",))


@pytest.mark.slow
def test_scalar_subqueries_of_at_most_one_row_longer(make_flow, oracle):  # both executors
    _at_most_one_row(make_flow, oracle, seed=2302, steps=12, executions=("local", "spark"))


DDL = {"a": "k INT, x INT", "b": "k INT, z INT"}
VIEWS = {
    "corr": "SELECT x, (SELECT z FROM b WHERE b.k = a.k) AS v FROM a",
    "uncorr": "SELECT x FROM a WHERE x = (SELECT DISTINCT z FROM b WHERE k = 1)",
}


def _rows(name: str, rows: list[tuple], weight: int = 1) -> pa.Table:
    names = [c.split()[0] for c in DDL[name].split(", ")]
    return pa.table({**{n: pa.array([r[i] for r in rows], pa.int32()) for i, n in enumerate(names)},
                     "_weight": pa.array([weight] * len(rows), pa.int64())})


def _postgres_error(oracle, b_rows: list[tuple], sql: str) -> str | None:
    oracle.load("b", _rows("b", b_rows).drop_columns(["_weight"]))
    try:
        oracle.query(sql)
    except psycopg.Error as err:
        return str(err).splitlines()[0]
    return None


@pytest.mark.parametrize("execution", ["local", "spark"])
def test_more_than_one_row_fails_the_step_as_postgresql_fails_the_query(make_flow, oracle, execution):
    flow = make_flow(execution=execution)
    for name, ddl in DDL.items():
        flow.register_source(name, ddl, primary_key=[])
        oracle.create_table(name, schema_from_ddl(ddl))
    for name, sql in VIEWS.items():
        flow.register_view(name, sql)
    a = [(1, 10), (2, 20), (None, 30)]
    oracle.load("a", _rows("a", a).drop_columns(["_weight"]))
    b = [(1, 10), (3, 7), (3, 8), (None, 5)]  # k = 3 has two rows, but no row of a reads it: no error
    flow.tick({"a": _rows("a", a), "b": _rows("b", b)})
    for name, sql in VIEWS.items():
        assert _postgres_error(oracle, b, sql) is None
        assert sorted(flow.snapshot(name).to_pylist(), key=str) == sorted(oracle.query(sql).to_pylist(), key=str)
    assert sorted(flow.snapshot("corr").to_pylist(), key=str) == [
        {"x": 10, "v": 10}, {"x": 20, "v": None}, {"x": 30, "v": None}]
    assert flow.snapshot("uncorr").to_pylist() == [{"x": 10}]
    before = {name: sorted(flow.snapshot(name).to_pylist(), key=str) for name in VIEWS}

    # A NULL beside b's row (1, 10): two rows at a.k = 1, two distinct values for uncorr.
    b1 = b + [(1, None)]
    for name in VIEWS:
        assert _postgres_error(oracle, b1, VIEWS[name]) == MORE_THAN_ONE_ROW
    with pytest.raises(ExecutionError, match=re.escape(MORE_THAN_ONE_ROW)):
        flow.tick("b", _rows("b", [(1, None)]))
    assert {name: sorted(flow.snapshot(name).to_pylist(), key=str) for name in VIEWS} == before  # rolled back

    # A duplicate of b's row (1, 10): two rows, equal ones, at a.k = 1 and for uncorr's DISTINCT one value.
    b2 = b + [(1, 10)]
    assert _postgres_error(oracle, b2, VIEWS["corr"]) == MORE_THAN_ONE_ROW
    assert _postgres_error(oracle, b2, VIEWS["uncorr"]) is None
    with pytest.raises(ExecutionError, match=re.escape(MORE_THAN_ONE_ROW)) as info:
        flow.tick("b", _rows("b", [(1, 10)]))
    assert getattr(info.value, "view", None) == "corr"
    assert {name: sorted(flow.snapshot(name).to_pylist(), key=str) for name in VIEWS} == before

    # A second distinct value for uncorr (and corr's key 2 gets two rows): both fail, as in PostgreSQL.
    b3 = b + [(1, 11), (2, 1), (2, 2)]
    for name in VIEWS:
        assert _postgres_error(oracle, b3, VIEWS[name]) == MORE_THAN_ONE_ROW
    with pytest.raises(ExecutionError, match=re.escape(MORE_THAN_ONE_ROW)):
        flow.tick("b", _rows("b", [(1, 11), (2, 1), (2, 2)]))
    assert {name: sorted(flow.snapshot(name).to_pylist(), key=str) for name in VIEWS} == before

    # A step that keeps one row per place read goes on: b's k = 2 gets one row.
    flow.tick("b", _rows("b", [(2, 2)]))
    b4 = b + [(2, 2)]
    for name, sql in VIEWS.items():
        assert _postgres_error(oracle, b4, sql) is None
        assert sorted(flow.snapshot(name).to_pylist(), key=str) == sorted(oracle.query(sql).to_pylist(), key=str)


@pytest.fixture
def maria(mysql_database):
    from tests.support.mysql_oracle import MariaDBOracle

    ora = MariaDBOracle(mysql_database)
    try:
        yield ora
    finally:
        ora.close()


def test_the_mysql_dialect_fails_with_mariadbs_message(make_flow, maria):
    import pymysql

    flow = make_flow(dialect="mysql", execution="local")
    for name, ddl in DDL.items():
        flow.register_source(name, ddl, primary_key=[])
        maria.create_table(name, schema_from_ddl(ddl))
    for name, sql in VIEWS.items():
        flow.register_view(name, sql)
    a, b = [(1, 10), (2, 20), (None, 30)], [(1, 10), (3, 7), (3, 8), (None, 5)]
    maria.load("a", _rows("a", a).drop_columns(["_weight"]))
    maria.load("b", _rows("b", b).drop_columns(["_weight"]))
    flow.tick({"a": _rows("a", a), "b": _rows("b", b)})
    for name, sql in VIEWS.items():
        assert sorted(flow.snapshot(name).to_pylist(), key=str) == sorted(maria.query(sql).to_pylist(), key=str)
    maria.load("b", _rows("b", b + [(1, 11)]).drop_columns(["_weight"]))
    with pytest.raises(pymysql.Error) as theirs:
        maria.query(VIEWS["corr"])
    with pytest.raises(ExecutionError) as ours:
        flow.tick("b", _rows("b", [(1, 11)]))
    assert theirs.value.args[1] == "Subquery returns more than 1 row" and theirs.value.args[1] in str(ours.value)
