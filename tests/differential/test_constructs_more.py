"""Differential tests: SQL as people write it (issue 23) against PostgreSQL on random change streams.

Subqueries correlated by non-equalities, constant relations (SELECT without
FROM, VALUES, generate_series), parenthesised joins, derived-table column
lists, DISTINCT ON, grouping sets and LATERAL.  Small key domains with NULLs
and duplicates make correlated groups empty and fill again; every view is
compared with PostgreSQL after every step under every executor.
"""

from __future__ import annotations

from tests.support.differential import run_differential

_small = [0, 1, 2, 3, 4]
A = ("a_id INT, a_k INT, a_v INT, a_s TEXT", ["a_id"], {"a_k": _small, "a_v": _small})
B = ("b_id INT, b_k INT, b_v INT, b_t TEXT", ["b_id"], {"b_k": _small, "b_v": _small})
C = ("c_k INT, c_w INT", [], {"c_k": _small, "c_w": _small})  # no key: duplicates


def _run(make_flow, oracle, sources, views, seed, steps=10):
    report = run_differential(make_flow, oracle, sources=sources, views=views, seed=seed, steps=steps)
    assert report.steps >= steps
    return report


def test_scalar_subqueries_correlated_by_non_equalities(make_flow, oracle):
    _run(make_flow, oracle, {"a": A, "b": B, "c": C}, [
        ("rank_like", "SELECT a_id, (SELECT count(*) FROM a AS x WHERE x.a_v > a.a_v) AS n FROM a"),
        ("mixed", "SELECT a_id, (SELECT sum(b_v) FROM b WHERE b_k = a_k AND b_v <= a_v) AS s, "
                  "(SELECT count(c_w) + 1 FROM c WHERE c_k <> a_k AND c_w >= a_v) AS m FROM a"),
        ("in_where", "SELECT a_id FROM a WHERE a_v >= (SELECT max(c_w) FROM c WHERE c_k < a_k)"),
        ("outer_value", "SELECT a_id, (SELECT count(*) * a.a_k FROM b WHERE b.b_v < a.a_v) AS w FROM a"),
        ("two_cols", "SELECT a_id, (SELECT min(b_id) FROM b WHERE b_v BETWEEN a_k AND a_v) AS lo FROM a"),
        ("null_ok", "SELECT a_id, (SELECT count(*) FROM c WHERE c_w IS DISTINCT FROM a_v) AS d FROM a"),
    ], seed=231)


def test_in_exists_correlated_by_non_equalities(make_flow, oracle):
    _run(make_flow, oracle, {"a": A, "b": B, "c": C}, [
        ("ex", "SELECT a_id FROM a WHERE EXISTS (SELECT 1 FROM b AS x WHERE x.b_v < a.a_v)"),
        ("nex", "SELECT a_id FROM a WHERE NOT EXISTS (SELECT 1 FROM c WHERE c_w > a_v AND c_k = a_k)"),
        ("in_theta", "SELECT a_id FROM a WHERE a_k IN (SELECT b_k FROM b WHERE b_v < a_v)"),
        ("nin_theta", "SELECT a_id FROM a WHERE a_k NOT IN (SELECT c_k FROM c WHERE c_w > a_v)"),
        ("nin_mixed", "SELECT a_id FROM a WHERE a_v NOT IN (SELECT b_v FROM b WHERE b_k = a_k AND b_id < a_id)"),
        ("mark_theta", "SELECT a_id, a_k IN (SELECT c_k FROM c WHERE c_w <= a_v) AS m FROM a"),
    ], seed=232)
