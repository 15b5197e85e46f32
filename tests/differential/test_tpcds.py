"""The 99 TPC-DS queries as views against PostgreSQL on random change streams of the fact tables.

Each group of queries runs over small TPC-DS-shaped tables whose domains come
from the group's own literals (``tests.support.tpcds``): the dimensions are
fixed rows, the fact tables (store_sales, store_returns, catalog_sales,
catalog_returns, web_sales, web_returns, inventory) get random inserts,
deletes and updates with NULLs in their nullable foreign keys.  After every
step, under every executor, each view must equal PostgreSQL's answer to the
same SQL.

Top-k views keep the queries' ORDER BY ... LIMIT 100 (the data stays under a
hundred rows per view, so ties at the boundary do not arise).  Queries that
return two columns of the same name are aliased (``VIEW_FIXES``): a result
table needs unique column names (PostgreSQL's CREATE VIEW refuses them too).

All 99 are maintained.  ``SPARK_FAILS``: q9 runs in-process only; its Spark
step fails (see there).
"""

from __future__ import annotations

import pytest

from benchmarks.tpcds.queries import QUERIES, VIEWS, postgres_15_sql
from tests.support.differential import run_differential
from tests.support.tpcds import SCHEMAS, Shape

# Maintained since GROUPING SETS / ROLLUP / GROUPING() and non-equality correlations landed: their own
# groups (after the groups below, so those keep their data).
ROLLUPS = ("q5", "q18", "q22", "q27", "q41", "q67", "q77", "q80")
# GROUPING() inside a window function's arguments (PARTITION BY GROUPING(a) + GROUPING(b)): their own group.
WINDOWED_GROUPING = ("q36", "q70", "q86")
# Scalar subqueries that are not aggregates (sql.single_row; q14 and q23 also INTERSECT and several CTEs, q44
# rank() over a HAVING with one, q54 and q58 nested ones): their own group, last.
SCALAR = ("q6", "q14", "q23", "q44", "q54", "q58")



# A count over few rows can be zero, and q90 divides by one: on the test's small data both systems would
# fail the step with "division by zero" (a test of that belongs to tests/runtime); NULLIF keeps the step.
SMALL_DATA_FIXES = {"q90": [("/ Cast(pmc AS DECIMAL(15, 4))", "/ NULLIF(Cast(pmc AS DECIMAL(15, 4)), 0)")]}


def _fixed(sql: str, fixes: list[tuple[str, str]]) -> str:
    for old, new in fixes:
        assert old in sql, old
        sql = sql.replace(old, new)
    return sql


def view_sql(name: str) -> str:
    return _fixed(VIEWS[name], SMALL_DATA_FIXES.get(name, []))


def oracle_sql(name: str) -> str:
    # PostgreSQL 15 (the oracle) wants an alias on every subquery in FROM; freshview, like PostgreSQL 16+, does not.
    return postgres_15_sql(view_sql(name), name)


FIRST = [q for q in QUERIES if q not in ROLLUPS and q not in SCALAR and q not in WINDOWED_GROUPING]
GROUP_SIZE = 6
GROUPS = {f"g{i // GROUP_SIZE + 1}": FIRST[i:i + GROUP_SIZE] for i in range(0, len(FIRST), GROUP_SIZE)}
GROUPS.update({f"g{len(GROUPS) + 1}": list(ROLLUPS[:4]), f"g{len(GROUPS) + 2}": list(ROLLUPS[4:])})
_LAST_ROLLUPS = f"g{len(GROUPS)}"
GROUPS[f"g{len(GROUPS) + 1}"] = list(WINDOWED_GROUPING)
GROUPS[f"g{len(GROUPS) + 1}"] = list(SCALAR)
MAINTAINED = [q for qs in GROUPS.values() for q in qs]


def test_every_query_is_accounted_for():
    assert len(QUERIES) == 99
    assert sorted(MAINTAINED) == sorted(QUERIES)


# Views that fail under the Spark executor (run in-process only here, and as an xfail under Spark).
SPARK_FAILS = {"q9": "fifteen uncorrelated scalar subqueries over store_sales: the Spark step collects more than "
                     "spark.driver.maxResultSize (1 GiB) of task results even on 60 rows"}


def _run(make_flow, oracle, queries: list[str], seed: int, steps: int, executions=None, skip=()):
    shape = Shape([VIEWS[q] for q in queries], seed)  # the group's data, whichever of its views run
    views = [q for q in queries if q not in skip]
    report = run_differential(make_flow, oracle, sources=shape.sources(), views=[(q, view_sql(q)) for q in views],
                              seed=seed, steps=steps, initial_rows=60, changes_per_step=(1, 15), null_prob=0.03,
                              fixed_rows=shape.fixed_rows(), oracle_sql={q: oracle_sql(q) for q in views},
                              **({"executions": executions} if executions else {}))
    return report


def _group_of(query: str) -> str:
    return next(g for g, qs in GROUPS.items() if query in qs)


# The default run steps every group in-process and two groups under Spark as well (the Spark executor's
# rules are checked view by view elsewhere; a TPC-DS group under Spark costs minutes); the slow run does
# every group under both executors.
SPARK_DEFAULT = ("g1", _LAST_ROLLUPS)


@pytest.mark.parametrize("group", list(GROUPS))
def test_tpcds(make_flow, oracle, group):
    executions = None if group in SPARK_DEFAULT else ("local",)
    report = _run(make_flow, oracle, GROUPS[group], seed=int(group[1:]), steps=2, executions=executions,
                  skip=() if executions else SPARK_FAILS)
    assert report.steps == 2
    # Views that never had a row check little (their plans still run on every change): listed in the
    # output (pytest -s) and in docs/benchmarks.md; the group must not be all empty.
    empty = [name for name, counts in report.view_rows.items() if not any(counts)]
    print(f"TPC-DS group {group}: rows per step {report.view_rows}; never a row: {empty}")
    assert len(empty) < len(report.view_rows), f"views that never had a row: {empty}"


@pytest.mark.slow
@pytest.mark.xfail(reason="see SPARK_FAILS", strict=False)
@pytest.mark.parametrize("query", list(SPARK_FAILS))
def test_tpcds_under_spark(make_flow, oracle, query):
    group = _group_of(query)
    others = [q for q in GROUPS[group] if q != query]
    _run(make_flow, oracle, GROUPS[group], seed=int(group[1:]), steps=2, executions=("spark",), skip=others)


@pytest.mark.slow
@pytest.mark.parametrize("group", list(GROUPS))
def test_tpcds_longer(make_flow, oracle, group):  # every group under both executors
    report = _run(make_flow, oracle, GROUPS[group], seed=100 + int(group[1:]), steps=12, skip=SPARK_FAILS)
    assert report.steps == 12
