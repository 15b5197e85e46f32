"""Differential tests: SQL as people write it (issue 23) against PostgreSQL on random change streams.

Subqueries correlated by non-equalities, constant relations (SELECT without
FROM, VALUES, generate_series), parenthesised joins, derived-table column
lists, DISTINCT ON, grouping sets and LATERAL.  Small key domains with NULLs
and duplicates make correlated groups empty and fill again; every view is
compared with PostgreSQL after every step under every executor.
"""

from __future__ import annotations

from tests.differential.test_joins_subqueries import A, B, C, _run, _small  # the same sources and driver


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


def test_constant_relations(make_flow, oracle):
    _run(make_flow, oracle, {"a": A, "b": B}, [
        ("one", "SELECT 1 AS x, 'a' AS y, 2.5 * 2 AS z"),
        ("vals_join", "SELECT a_id, v.label FROM a JOIN (VALUES (1, 'one'), (2, NULL), (1 + 2, 'th' || 'ree')) "
                      "AS v(k, label) ON a_k = v.k"),
        ("in_values", "SELECT a_id FROM a WHERE a_v IN (VALUES (1), (3), (NULL)) OR a_k NOT IN (VALUES (0), (4))"),
        ("series", "SELECT g, COUNT(a_id) AS n FROM generate_series(0, 5) AS g LEFT JOIN a ON a_k = g GROUP BY g"),
        ("whole_values", "VALUES (1, 'x'), (2, 'y'), (2, 'y')"),
        ("nofrom_sub", "SELECT a_id, (SELECT 7) + a_v AS s FROM a"),
        ("series_step", "SELECT x FROM generate_series(10, -2, -3) AS s(x) "
                        "WHERE x NOT IN (SELECT b_v FROM b WHERE b_v IS NOT NULL)"),
    ], seed=233)


def test_parenthesised_joins(make_flow, oracle):
    _run(make_flow, oracle, {"a": A, "b": B, "c": C}, [
        ("pj_full", "SELECT a_id, b.b_id, c_k, c_w, b2.b_id AS b2 FROM (a JOIN b ON a_k = b.b_k) "
                    "FULL JOIN (c JOIN b AS b2 ON c_k = b2.b_k) ON a_v = c_w"),
        ("pj_cross", "SELECT * FROM (a CROSS JOIN c) WHERE a_k = c_w"),
        ("pj_nested", "SELECT x.a_id, b_id, c_w FROM ((a AS x LEFT JOIN b ON x.a_k = b_k AND b_v > 1) "
                      "LEFT JOIN c ON c_k = b_v)"),
        ("pj_alias", "SELECT j.a_id, j.c_w FROM (a JOIN c ON a_k = c_k) AS j WHERE j.a_v < 3"),
        ("pj_right", "SELECT a_id, b_id, c_w FROM b RIGHT JOIN (a LEFT JOIN c ON a_v = c_w) ON b_k = a_k"),
    ], seed=234)


def test_distinct_on_and_renamed_duplicate_columns(make_flow, oracle):
    _run(make_flow, oracle, {"a": A, "b": B}, [
        ("don", "SELECT DISTINCT ON (a_k) a_k, a_v, a_id FROM a ORDER BY a_k, a_v DESC, a_id"),
        ("don_alias", "SELECT DISTINCT ON (k) a_k AS k, a_id FROM a ORDER BY 1, a_id DESC"),
        ("don_grouped", "SELECT DISTINCT ON (b_k) b_k, b_v, COUNT(*) AS n FROM b GROUP BY b_k, b_v "
                        "ORDER BY b_k, n DESC, b_v NULLS FIRST"),
        ("dup_rename", "SELECT * FROM (SELECT a_k, a_k, a_v FROM a) AS q(x, y, z) WHERE x = z"),
        ("dup_cte", "WITH w(p, q) AS (SELECT b_v, b_v FROM b) SELECT p, COUNT(q) AS n FROM w GROUP BY p"),
    ], seed=235)


def test_grouping_sets_rollup_cube(make_flow, oracle):
    _run(make_flow, oracle, {"a": A, "c": C}, [
        ("rollup", "SELECT a_k, a_v, COUNT(*) AS n, SUM(a_id) AS s, GROUPING(a_k, a_v) AS g FROM a "
                   "GROUP BY ROLLUP (a_k, a_v)"),
        ("cube", "SELECT c_k, c_w, COUNT(c_w) AS n, MAX(c_w) AS mx FROM c GROUP BY CUBE (c_k, c_w) "
                 "HAVING COUNT(*) > 1"),
        ("sets", "SELECT a_k, a_s, COUNT(*) AS n, GROUPING(a_s) AS gs FROM a "
                 "GROUP BY GROUPING SETS ((a_k, a_s), (a_k), ())"),
        ("mixed", "SELECT a_k, a_v, AVG(a_id) AS av FROM a WHERE a_id > 3 GROUP BY a_k, ROLLUP (a_v)"),
    ], seed=236)


def test_lateral_subqueries(make_flow, oracle):
    _run(make_flow, oracle, {"a": A, "b": B, "c": C}, [
        ("lat_count", "SELECT a_id, s.n, s.t FROM a, LATERAL (SELECT COUNT(*) AS n, SUM(b_v) AS t FROM b "
                      "WHERE b_k = a.a_k + 2) s"),
        ("lat_rows", "SELECT a_id, s.b_id FROM a LEFT JOIN LATERAL (SELECT b_id, b_v FROM b "
                     "WHERE b_k = a.a_k AND b_v < a.a_v) s ON s.b_v > 0"),
        ("lat_grouped", "SELECT a_id, k, m FROM a CROSS JOIN LATERAL (SELECT c_k, MAX(c_w) AS m FROM c "
                        "WHERE c_w <= a_v GROUP BY c_k) AS s(k, m)"),
        ("lat_nofrom", "SELECT a_id, x FROM a, LATERAL (SELECT a_v + a_k AS x) t WHERE x > 2"),
        ("lat_uncorrelated", "SELECT a_id, u.n FROM a CROSS JOIN LATERAL (SELECT COUNT(*) AS n FROM b) u"),
        ("lat_distinct", "SELECT a_k, w FROM a, LATERAL (SELECT DISTINCT c_w AS w FROM c WHERE c_k = a.a_v) s"),
    ], seed=237)


AN = ("a_id INT, a_k INT, a_v INT, a_s TEXT", ["a_id"], {"a_k": _small + [None], "a_v": _small + [None]})
BN = ("b_id INT, b_k INT, b_v INT, b_t TEXT", ["b_id"], {"b_k": _small + [None], "b_v": _small + [None]})


def test_null_correlation_values(make_flow, oracle):
    """NULLs in the outer values a subquery is computed for: each its own group, joined back null-safe."""
    _run(make_flow, oracle, {"a": AN, "b": BN}, [
        ("null_scalar", "SELECT a_id, (SELECT COUNT(*) FROM b WHERE b_v IS DISTINCT FROM a_v AND b_k < 3) AS n, "
                        "(SELECT MIN(b_id) FROM b WHERE b_v > a_v) AS lo FROM a"),
        ("null_lateral", "SELECT a_id, s.n FROM a, LATERAL (SELECT COUNT(b_id) AS n FROM b "
                         "WHERE b_k IS NOT DISTINCT FROM a.a_k AND b_v <= 2) s"),
        ("null_nin", "SELECT a_id FROM a WHERE a_k NOT IN (SELECT b_k FROM b WHERE b_v > a_v)"),
        ("null_rollup", "SELECT a_k, a_v, COUNT(*) AS n, GROUPING(a_k, a_v) AS g FROM a GROUP BY ROLLUP (a_k, a_v)"),
        ("null_don", "SELECT DISTINCT ON (a_k) a_k, a_v, a_id FROM a ORDER BY a_k, a_v NULLS FIRST, a_id"),
    ], seed=238)
