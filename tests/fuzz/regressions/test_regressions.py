"""Failures the query fuzzer found, kept as regression tests.

Each case is the (shrunk) query with the schema and seed it failed with: the
seed fixes the change streams (``tests.fuzz.run.run_case``), so the test
replays the exact steps that went wrong, under both executors.  Cases not
fixed yet are ``xfail(strict=True)`` with the reason: when a fix lands they
turn red until the mark is removed.
"""

from __future__ import annotations

import pytest

from tests.fuzz.generate import Case, Table
from tests.fuzz.run import run_case


def replay(make_flow, oracle, seed, tables, sql, steps=4, executions=("local", "spark")):
    stats = run_case(Case(seed, tables, [sql]), make_flow, oracle, steps=steps, executions=list(executions))
    assert not stats.invalid, stats.invalid
    assert not stats.failures, "\n\n".join(f.render() for f in stats.failures)
    assert stats.passed == 1 and not stats.refused, stats.summary()


# seed=5021 query=2 (python3 -m tests.fuzz --seed 5021, before the streams were drawn per query):
# `a, b NATURAL FULL JOIN c` is a × (b ⟗ c); freshview computed (a × b) ⟗ c (20 rows for PostgreSQL's 0).
# RIGHT/FULL JOIN … ON after a comma list was refused already; USING/NATURAL now are too.
T5021 = [Table("t0", [("b1", "bool"), ("n1", "num"), ("i1", "int")], []),
         Table("t1", [("n1", "num"), ("n2", "num"), ("i1", "int"), ("s1", "text"), ("b1", "bool"),
                      ("d1", "date"), ("d2", "date")], [])]
COMMA_THEN = ("SELECT a13.s1 AS x26 FROM (SELECT 2 AS x22 FROM t1 AS a11 WHERE (a11.s1 < a11.s1)) AS a12, "
              "t1 AS a13 NATURAL {} JOIN t0 AS a14")


@pytest.mark.parametrize("side", ["FULL", "RIGHT"])
def test_5021_right_or_full_natural_join_after_a_comma_is_refused(make_flow, oracle, side):
    sql = COMMA_THEN.format(side)
    stats = run_case(Case(5021, T5021, [sql]), make_flow, oracle, steps=2, executions=["local"])
    assert not stats.failures, "\n\n".join(f.render() for f in stats.failures)
    assert list(stats.refused) == [f"{side} JOIN after a comma-separated FROM list (write the FROM list with "
                                   "JOIN ... ON) is not supported"]
    assert stats.unlocated == 0


def test_5021_left_natural_join_after_a_comma(make_flow, oracle):
    replay(make_flow, oracle, 5021, T5021, COMMA_THEN.format("LEFT").replace(" WHERE (a11.s1 < a11.s1)", ""))


# seed=102 query=1 and seed=300 query=2 (tests/fuzz/test_fuzz.py's seeds, shrunk by hand from the shrinker's
# 580 chars): an uncorrelated scalar subquery in the SELECT list beside a window function failed to compile
# ("internal: projection refers to column $2000000"): sqlglot's LAG and MAX … OVER are AggFuncs, so the query
# was taken for an aggregating one and the subquery placed after an aggregation that never came.
T102 = [Table("t0", [("n1", "num"), ("b1", "bool"), ("b2", "bool"), ("d1", "date"), ("s1", "text"),
                     ("s2", "text"), ("i1", "int")], [])]


def test_102_scalar_subquery_beside_a_window_function(make_flow, oracle):
    replay(make_flow, oracle, 102, T102,
           "SELECT (SELECT MAX(a22.i1) FROM t0 AS a22) AS x17, LAG(a19.b2) OVER (ORDER BY a19.i1, a19.b2) AS x19, "
           "SUM(a19.i1) OVER (PARTITION BY a19.s1) AS x20 FROM t0 AS a19", steps=3)


def test_102_scalar_subquery_beside_a_window_over_aggregates(make_flow, oracle):
    replay(make_flow, oracle, 102, T102,
           "SELECT a0.s1 AS x0, (SELECT MAX(a1.i1) FROM t0 AS a1) AS x1, SUM(SUM(a0.i1)) OVER () AS x2, "
           "rank() OVER (ORDER BY COUNT(*)) AS x3 FROM t0 AS a0 GROUP BY a0.s1", steps=3, executions=("local",))


# seed=1003 query=1 and seed=1004 query=1 (the first run with array and jsonb columns, shrunk by hand):
# an INT[] column crashed the in-process executor where Acero cannot carry a list: as a join's payload
# ("Data type list<item: int32> is not supported in join non-key field") and as a GROUP BY key of a
# DISTINCT or FILTERed aggregate ("Keys of type list<item: int32>").  Both join and group by row numbers now.
T1003 = [Table("t0", [("k", "int"), ("i1", "int"), ("b1", "bool"), ("r1", "intarr")], ["k"]),
         Table("t1", [("i1", "int"), ("s1", "text"), ("r1", "intarr")], [])]


def test_1004_array_column_through_a_join(make_flow, oracle):
    replay(make_flow, oracle, 1004, T1003,
           "SELECT a0.k AS x0, a0.r1 AS x1, a1.r1 AS x2, a1.s1 AS x3 FROM t0 AS a0 JOIN t1 AS a1 ON a0.i1 = a1.i1",
           steps=3)


def test_1003_group_by_an_array_with_distinct_and_filtered_aggregates(make_flow, oracle):
    replay(make_flow, oracle, 1003, T1003,
           "SELECT a0.r1 AS x0, SUM(DISTINCT a0.i1) AS x1, MIN(a0.k) FILTER (WHERE a0.b1) AS x2, COUNT(*) AS x3 "
           "FROM t0 AS a0 GROUP BY a0.r1", steps=3)


# seed=100 query=2 and seed=101 query=0 (tests/fuzz/test_fuzz.py's seeds once arrays were generated):
# `COUNT(...) = ANY(a10.r1)` (bigint = ANY(integer[])) was rejected ("operator does not exist"; PostgreSQL
# compares the numbers), and CAST(int_array AS TEXT) (a DISTINCT ON's total order) was accepted, then
# failed the step ("cannot cast type integer[] to text"): it is PostgreSQL's array output now.
T100 = [Table("t0", [("k", "int"), ("i1", "int"), ("s1", "text"), ("r1", "intarr")], ["k"])]


def test_100_bigint_equals_any_of_an_int_array(make_flow, oracle):
    replay(make_flow, oracle, 100, T100,
           "SELECT a0.k AS x0, (CAST(a0.i1 AS BIGINT) = ANY(a0.r1)) AS x1, (COUNT(*) = ANY(a0.r1)) AS x2 "
           "FROM t0 AS a0 GROUP BY a0.k, a0.i1, a0.r1", steps=3)


def test_100_using_an_array_column_is_refused(make_flow, oracle):
    """seed=100 query=1: JOIN … USING (r1) on INT[] columns crashed the step (Acero keys no list; the binder
    refuses = on arrays, USING went around it): refused with the reason now."""
    stats = run_case(Case(100, T100, ["SELECT a0.k AS x0 FROM t0 AS a0 LEFT JOIN t0 AS a1 USING (k, r1)"]),
                     make_flow, oracle, steps=1, executions=["local"])
    assert not stats.failures, "\n\n".join(f.render() for f in stats.failures)
    assert list(stats.refused) == ["JOIN USING / NATURAL JOIN on the array column '…' is not supported (comparing "
                                   "arrays; joins on arrays)"]
    assert stats.unlocated == 0


def test_101_array_cast_to_text(make_flow, oracle):
    replay(make_flow, oracle, 101, T100,
           "SELECT DISTINCT ON (a0.i1) a0.k AS x0, CAST(a0.r1 AS TEXT) AS x1 FROM t0 AS a0 "
           "ORDER BY a0.i1, CAST(a0.r1 AS TEXT), a0.k, a0.s1", steps=3)
