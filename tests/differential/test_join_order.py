"""Differential tests: joins written in FROM orders the planner reorders (issue 23), against PostgreSQL.

Comma lists whose neighbours share no condition, a self-join chain in a scrambled order with a theta
condition, a cross product the query has under an aggregate, an anti-join and a LEFT JOIN around
reordered inner joins.  Small key domains, NULLs in every key, a keyless source with duplicate rows;
every view compared after every step under both executors.
"""

from __future__ import annotations

from tests.support.differential import run_differential

_small = [0, 1, 2, 3, 4]
A = ("a_id INT, a_k INT, a_v INT, a_s TEXT", ["a_id"], {"a_k": _small, "a_v": _small})
B = ("b_id INT, b_k INT, b_v INT, b_t TEXT", ["b_id"], {"b_k": _small, "b_v": _small})
C = ("c_k INT, c_w INT", [], {"c_k": _small, "c_w": _small})  # no key: duplicates


def test_reordered_joins(make_flow, oracle):
    report = run_differential(make_flow, oracle, sources={"a": A, "b": B, "c": C}, views=[
        ("abc", "SELECT a_id, b_id, c_w FROM a, b, c WHERE a_k = c_k AND b_k = c_w"),
        ("chain", "SELECT a1.a_id, a2.a_id AS a2_id, b_t FROM a a1, c, a a2, b "
                  "WHERE a1.a_k = b_k AND b_v = c_k AND c_w = a2.a_v AND a2.a_s IS NOT NULL AND a1.a_v < a2.a_k"),
        ("crossed", "SELECT c_w, COUNT(*) AS n, SUM(a_v) AS s, COUNT(b_t) AS t FROM a, b, c "
                    "WHERE a_k = c_k AND b_v = 2 AND b_k = 1 GROUP BY c_w"),
        ("anti_lj", "SELECT a_id, b.b_id, c_w, b2.b_t FROM a, b, c LEFT JOIN b b2 ON b2.b_k = c_w "
                    "WHERE a_k = c_k AND b.b_v = c_w AND NOT EXISTS (SELECT 1 FROM b b3 WHERE b3.b_id = a_v)"),
    ], seed=41, steps=6, initial_rows=20)
    assert report.steps == 6 and all(max(rows) > 0 for rows in report.view_rows.values()), report.view_rows
