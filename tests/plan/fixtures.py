"""Shared fixtures of the rewrite rule tests: three small tables, plain plans from SQL, random data.

``raw(sql)`` is the plan the query builder emits before any rewrite;
``check_same_result(rule, sql)`` evaluates it and ``rule`` of it on random
tables (NULLs and duplicate rows included) with the brute-force evaluator.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from freshview.plan import nodes as pn
from freshview.schema import SqlType
from freshview.sql.build import QueryBuilder
from freshview.sql.parse import parse_query
from tests.support.plan_eval import evaluate

INT, TEXT, DATE = SqlType("int4"), SqlType("text"), SqlType("date")
TABLES: dict[str, pn.Columns] = {
    "a": (("x", INT), ("y", INT), ("s", TEXT)),
    "b": (("x", INT), ("z", INT), ("t", TEXT)),
    "c": (("z", INT), ("w", INT)),
}
A, B, C = (pn.Scan(name, cols) for name, cols in TABLES.items())


class Catalog:
    def relation_columns(self, name: str):
        return (TABLES[name], False) if name in TABLES else None


def raw(sql: str) -> pn.Node:
    """The builder's plain plan for ``sql``: no rewrite applied."""
    return QueryBuilder(sql, Catalog()).query(parse_query(sql))


_values = {"int4": st.one_of(st.none(), st.integers(0, 3)), "text": st.sampled_from([None, "p", "q"])}


def _rows(columns: pn.Columns):
    row = st.tuples(*[_values[t.kind] for _, t in columns])
    return st.lists(row, max_size=6).map(Counter)  # repeated rows are duplicates


DATA = st.fixed_dictionaries({name: _rows(cols) for name, cols in TABLES.items()})


def check_same_result(rule, plan: pn.Node, examples: int = 12) -> None:
    """``rule(plan)`` has ``plan``'s columns and rows on random tables."""
    rewritten = rule(plan)
    assert [t for _, t in rewritten.columns] == [t for _, t in plan.columns]

    @settings(max_examples=examples, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
    @given(tables=DATA)
    def same(tables):
        assert evaluate(rewritten, tables) == evaluate(plan, tables)

    same()


# Queries each rule is checked on: joins of every kind, WHERE over outer joins, ORs, aggregates, subqueries.
QUERIES = [
    "SELECT a.x, b.z FROM a, b WHERE a.x = b.x AND a.y > 1",
    "SELECT a.s FROM a JOIN b ON a.x = b.x JOIN c ON b.z = c.z WHERE c.w < 2 OR a.y IS NULL",
    "SELECT a.x, b.t FROM a, b WHERE (a.x = b.x AND a.y = 1) OR (a.x = b.x AND b.z = 2)",
    "SELECT a.x, b.z FROM a LEFT JOIN b ON a.x = b.x AND b.z > 1 WHERE b.t IS NULL",
    "SELECT a.x, b.z FROM a LEFT JOIN b ON a.x = b.x WHERE b.z = 1 AND a.y < 3",
    "SELECT a.y, b.z FROM a RIGHT JOIN b ON a.x = b.x WHERE a.y IS NULL OR b.z > 0",
    "SELECT a.x, b.x AS bx FROM a FULL JOIN b ON a.x = b.x AND a.y < b.z WHERE a.s = 'p'",
    "SELECT x, count(*), sum(y) FROM a WHERE s IS NOT NULL GROUP BY x HAVING x > 1 AND count(*) > 1",
    "SELECT t.x FROM (SELECT x, y + 1 AS v FROM a) AS t WHERE t.v > 2",
    "SELECT a.x FROM a WHERE a.x IN (SELECT b.x FROM b WHERE b.z > 1)",
    "SELECT a.x FROM a WHERE NOT EXISTS (SELECT 1 FROM b WHERE b.x = a.x AND b.z > a.y)",
    "SELECT a.x FROM a WHERE a.x NOT IN (SELECT b.z FROM b)",
    "SELECT DISTINCT a.s FROM a, c WHERE a.y = c.w",
    "SELECT g.x, g.n FROM (SELECT x, count(*) AS n FROM b GROUP BY x) AS g WHERE g.x = 1 AND g.n > 1",
]


def before(rule, plan: pn.Node) -> pn.Node:
    """``plan`` with the rules that run before ``rule`` (``plan.rewrite.RULES``) applied."""
    from freshview.plan.rewrite import RULES, optimize

    return optimize(plan, RULES[:RULES.index(rule)])
