"""Set operations and WITH against PostgreSQL on random change streams.

Sources without a key carry duplicate rows and NULLs from small domains, so
every set operation's duplicate rule is exercised (a row on both sides, on
one side only, several times on each, NULL rows that must match each other).
ORDER BY without LIMIT is accepted and ignored: PostgreSQL's view has the
same rows.  Every view must have rows at some step, or it checked nothing.
"""

from __future__ import annotations

from decimal import Decimal

from tests.support.differential import run_differential

SMALL = {"k": [1, 2, 3], "v": ["x", "y"]}
A = ("a_k INT, a_v TEXT", [], {"a_k": SMALL["k"], "a_v": SMALL["v"]})  # no key: duplicates
B = ("b_k INT, b_v TEXT", [], {"b_k": SMALL["k"], "b_v": SMALL["v"]})
C = ("c_id INT, c_k BIGINT, c_n NUMERIC(6,2), c_v TEXT", ["c_id"],
     {"c_k": [1, 2, 4], "c_n": [Decimal(x) for x in ("1.00", "2.50", "3.00")],
      "c_v": SMALL["v"]})


def _run(make_flow, oracle, sources, views, seed, steps=8):
    report = run_differential(make_flow, oracle, sources=sources, views=views, seed=seed, steps=steps,
                              changes_per_step=(1, 12), initial_rows=20, null_prob=0.15)
    empty = [name for name, counts in report.view_rows.items() if not any(counts)]
    assert not empty, f"views that never had a row: {empty}"
    assert report.steps >= steps


def test_union_intersect_except_and_their_all_forms(make_flow, oracle):
    _run(make_flow, oracle, {"a": A, "b": B}, [
        ("u", "SELECT a_k, a_v FROM a UNION SELECT b_k, b_v FROM b"),
        ("ua", "SELECT a_k, a_v FROM a UNION ALL SELECT b_k, b_v FROM b"),
        ("i", "SELECT a_k, a_v FROM a INTERSECT SELECT b_k, b_v FROM b"),
        ("ia", "SELECT a_k, a_v FROM a INTERSECT ALL SELECT b_k, b_v FROM b"),
        ("e", "SELECT a_k, a_v FROM a EXCEPT SELECT b_k, b_v FROM b"),
        ("ea", "SELECT a_k, a_v FROM a EXCEPT ALL SELECT b_k, b_v FROM b"),
    ], seed=31, steps=10)


def test_mixed_chains_parentheses_types_and_order_by(make_flow, oracle):
    _run(make_flow, oracle, {"a": A, "b": B, "c": C}, [
        # INTERSECT binds tighter than UNION and EXCEPT; the rest is left to right.
        ("chain", "SELECT a_k FROM a UNION SELECT b_k FROM b INTERSECT ALL SELECT c_k FROM c "
                  "EXCEPT SELECT c_id FROM c WHERE c_id > 8"),
        ("paren", "(SELECT a_k, a_v FROM a EXCEPT ALL SELECT b_k, b_v FROM b) UNION ALL "
                  "(SELECT b_k, b_v FROM b INTERSECT SELECT c_k, c_v FROM c) ORDER BY 1, 2"),
        # int vs bigint vs numeric: the common type, as UNION ALL unifies.
        ("types", "SELECT a_k FROM a INTERSECT ALL SELECT c_n FROM c UNION ALL SELECT c_k FROM c WHERE c_k = 4"),
        ("ordered", "SELECT a_v, a_k FROM a WHERE a_k IS NOT NULL ORDER BY a_v DESC, 2"),
        ("agg_over", "SELECT k, COUNT(*) AS n FROM (SELECT a_k AS k FROM a EXCEPT ALL SELECT b_k FROM b) AS d "
                     "GROUP BY k ORDER BY n"),
    ], seed=32)


def test_common_table_expressions(make_flow, oracle):
    _run(make_flow, oracle, {"a": A, "b": B, "c": C}, [
        ("twice", "WITH t AS (SELECT a_k, a_v FROM a WHERE a_k IS NOT NULL) "
                  "SELECT x.a_k, y.a_v AS v2 FROM t AS x JOIN t AS y ON x.a_k = y.a_k"),
        ("chained", "WITH t(k, v) AS (SELECT b_k, b_v FROM b), u AS (SELECT k, COUNT(*) AS n FROM t GROUP BY k) "
                    "SELECT u.k, u.n, c_v FROM u JOIN c ON u.k = c.c_k"),
        ("setop_in_cte", "WITH s AS (SELECT a_k, a_v FROM a INTERSECT ALL SELECT b_k, b_v FROM b) "
                         "SELECT a_v, COUNT(*) AS n FROM s GROUP BY a_v"),
        ("nested", "SELECT q.k FROM (WITH w AS (SELECT b_k AS k FROM b UNION SELECT c_k FROM c) "
                   "SELECT k FROM w WHERE k IS NOT NULL) AS q EXCEPT ALL SELECT a_k FROM a"),
        ("shadow", "WITH c AS (SELECT a_k AS c_k FROM a ORDER BY 1) SELECT c_k FROM c UNION ALL SELECT b_k FROM b"),
    ], seed=33)


def test_with_inside_subqueries_and_exists_over_no_columns(make_flow, oracle):
    _run(make_flow, oracle, {"a": A, "b": B, "c": C}, [
        ("exists_with", "SELECT a_k, a_v FROM a WHERE EXISTS (WITH w AS (SELECT b_k, b_v FROM b WHERE b_v = 'x') "
                        "SELECT 1 FROM w WHERE w.b_k = a.a_k)"),
        ("not_exists_with", "SELECT c_id FROM c WHERE NOT EXISTS (WITH w AS (SELECT a_k FROM a) "
                            "SELECT FROM w WHERE w.a_k = c.c_k)"),
        ("in_with", "SELECT c_id, c_v FROM c WHERE c_k IN (WITH w AS (SELECT b_k FROM b) SELECT b_k FROM w)"),
        ("scalar_with", "SELECT c_id, (WITH w AS (SELECT a_k FROM a WHERE a_k IS NOT NULL) "
                        "SELECT COUNT(*) FROM w WHERE w.a_k = c.c_k) AS n FROM c"),
        ("exists_no_columns", "SELECT c_id FROM c WHERE EXISTS (SELECT FROM a WHERE a_v = 'y')"),
        # how PostgreSQL prints IN lists in a view's definition (read through it: sql.expand)
        ("any_all", "SELECT c_id, c_v FROM c WHERE c_k = ANY (ARRAY[1, 4]) AND c_v <> ALL (ARRAY['x', NULL]) "
                    "OR c_id = ANY (ARRAY[2, 3])"),
    ], seed=34)
