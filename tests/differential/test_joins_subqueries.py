"""Differential tests: outer joins and subqueries against PostgreSQL on random change streams.

Small key domains make matches come and go, so NULL-padded rows appear and
disappear; NULLs sit in join keys, IN lists and correlation columns, and
keyless tables hold duplicates.  Every view is compared after every step
under every executor.
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


def test_outer_joins(make_flow, oracle):
    _run(make_flow, oracle, {"a": A, "b": B}, [
        ("lj", "SELECT a_id, a_k, b_id, b_v FROM a LEFT JOIN b ON a_k = b_k"),
        ("lj_res", "SELECT a_id, b_id FROM a LEFT OUTER JOIN b ON a_k = b_k AND b_v > 1 AND a_v < 3 "
                   "AND a_v <> b_v"),
        ("rj", "SELECT a_id, b_id, b_t FROM a RIGHT JOIN b ON a_k = b_k AND a_v >= b_v"),
        ("fj", "SELECT a_id, a_v, b_id, b_v FROM a FULL JOIN b ON a_k = b_k AND a_s <> b_t"),
        ("lj_where", "SELECT a_id, b_id FROM a LEFT JOIN b ON a_k = b_k WHERE b_id IS NULL OR b_v = a_v"),
        ("lj_count", "SELECT a_k, COUNT(b_id) AS n, COUNT(*) AS m, SUM(b_v) AS s FROM a "
                     "LEFT JOIN b ON a_k = b_k AND b_t NOT LIKE '%b%' GROUP BY a_k"),
        ("lj_nokey", "SELECT a_id, b_id FROM a LEFT JOIN b ON a_v < b_v - 2"),
    ], seed=31)


def test_chained_and_mixed_joins(make_flow, oracle):
    _run(make_flow, oracle, {"a": A, "b": B, "c": C}, [
        ("lj_ij", "SELECT a_id, b_id, c_w FROM a LEFT JOIN b ON a_k = b_k JOIN c ON c_k = a_v"),
        ("ij_lj", "SELECT a_id, b_id, c_w FROM a JOIN b ON a_k = b_k LEFT JOIN c ON c_k = b_v AND c_w > 1"),
        ("lj_lj", "SELECT a_id, b_id, c_w FROM a LEFT JOIN b ON a_k = b_k LEFT JOIN c ON c_k = b_v "
                  "WHERE a_v > 0"),
        ("lj_fj", "SELECT a_id, b_id, c_k, c_w FROM a LEFT JOIN b ON a_k = b_k FULL JOIN c ON c_k = b_v "
                  "WHERE c_w IS NULL OR c_w < 3"),
        ("comma_lj", "SELECT a_id, b_id, c_w FROM a, b LEFT JOIN c ON c_k = b_k WHERE a_k = c_w OR c_w IS NULL"),
        ("rj_ij", "SELECT a_id, b_id, c_w FROM a RIGHT JOIN b ON a_k = b_k JOIN c ON c_k = b_v AND c_w <> a_v"),
    ], seed=32)


def test_in_and_not_in(make_flow, oracle):
    _run(make_flow, oracle, {"a": A, "b": B, "c": C}, [
        ("in1", "SELECT a_id, a_k FROM a WHERE a_k IN (SELECT b_v FROM b WHERE b_t <> 'a')"),
        ("in_dup", "SELECT a_id FROM a WHERE a_v IN (SELECT c_w FROM c)"),
        ("nin1", "SELECT a_id, a_k FROM a WHERE a_k NOT IN (SELECT b_v FROM b WHERE b_id > 3)"),
        ("nin_c", "SELECT a_id FROM a WHERE a_v NOT IN (SELECT c_w FROM c WHERE c_k = a_k) AND a_id > 1"),
        ("in_corr", "SELECT a_id FROM a WHERE a_v IN (SELECT b_v FROM b WHERE b_k = a_k)"),
        ("in_grp", "SELECT a_id FROM a WHERE a_k IN (SELECT c_k FROM c GROUP BY c_k HAVING SUM(c_w) > 4)"),
        ("nin_not", "SELECT a_id FROM a WHERE NOT (a_k IN (SELECT b_k FROM b))"),
    ], seed=33)


def test_exists_and_not_exists(make_flow, oracle):
    _run(make_flow, oracle, {"a": A, "b": B, "c": C}, [
        ("ex", "SELECT a_id FROM a WHERE EXISTS (SELECT * FROM b WHERE b_k = a_k AND b_v > 1)"),
        ("nex", "SELECT a_id, a_v FROM a WHERE NOT EXISTS (SELECT 1 FROM c WHERE c_k = a_k)"),
        ("ex_res", "SELECT a_id FROM a WHERE EXISTS (SELECT * FROM b WHERE b_k = a_k AND b_v <> a_v)"),
        ("nex_res", "SELECT a_id FROM a WHERE NOT EXISTS (SELECT * FROM b WHERE b_k = a_k AND b_v > a_v)"),
        ("ex_unc", "SELECT a_id FROM a WHERE EXISTS (SELECT 1 FROM c WHERE c_w = 4)"),
        ("nex_unc", "SELECT a_id FROM a WHERE NOT EXISTS (SELECT 1 FROM b WHERE b_v = 4 AND b_k = 4)"),
        ("q21", "SELECT l1.b_id FROM b l1 WHERE EXISTS (SELECT * FROM b l2 WHERE l2.b_k = l1.b_k AND "
                "l2.b_v <> l1.b_v) AND NOT EXISTS (SELECT * FROM b l3 WHERE l3.b_k = l1.b_k AND "
                "l3.b_v <> l1.b_v AND l3.b_id > l1.b_id)"),
    ], seed=34)


def test_scalar_subqueries(make_flow, oracle):
    _run(make_flow, oracle, {"a": A, "b": B, "c": C}, [
        ("sc_where", "SELECT a_id FROM a WHERE a_v > (SELECT AVG(b_v) FROM b)"),
        ("sc_corr", "SELECT a_id, a_v FROM a WHERE a_v < (SELECT 0.5 * AVG(b_v) + 1 FROM b WHERE b_k = a_k)"),
        ("sc_min", "SELECT a_id FROM a WHERE a_v = (SELECT MIN(c_w) FROM c WHERE c_k = a_k)"),
        ("count_bug", "SELECT a_id, (SELECT COUNT(*) FROM c WHERE c_k = a_k) AS n, "
                      "(SELECT COUNT(c_w) + 1 FROM c WHERE c_k = a_v) AS m FROM a"),
        ("sc_select", "SELECT a_id, (SELECT MAX(b_v) FROM b) AS top, "
                      "(SELECT SUM(b_v) FROM b WHERE b_k = a_k) AS s FROM a"),
        ("sc_having", "SELECT a_k, COUNT(*) AS n FROM a GROUP BY a_k HAVING COUNT(*) > (SELECT COUNT(*) FROM c) / 10"),
        ("sc_agg_sel", "SELECT a_k, SUM(a_v) - (SELECT MIN(c_w) FROM c) AS d FROM a GROUP BY a_k"),
    ], seed=35)


def test_views_over_outer_joins_and_subqueries(make_flow, oracle):
    _run(make_flow, oracle, {"a": A, "b": B, "c": C}, [
        ("base", "SELECT a_id, a_k, b_v FROM a LEFT JOIN b ON a_k = b_k"),
        ("counts", "SELECT a_k, COUNT(b_v) AS n FROM base GROUP BY a_k"),
        ("nested", "SELECT t.a_k, t.n FROM (SELECT a_k, COUNT(b_v) AS n FROM a LEFT JOIN b ON a_k = b_k "
                   "GROUP BY a_k) AS t WHERE t.n NOT IN (SELECT c_w FROM c) AND EXISTS (SELECT 1 FROM b "
                   "WHERE b_k = t.a_k)"),
        ("over_view", "SELECT a_k FROM counts WHERE n > (SELECT AVG(n) FROM counts)"),
    ], seed=36)

# Tables sharing column names, for USING and NATURAL joins (u_k/k and v also in both).
U = ("u_id INT, k INT, v INT, u_s TEXT", ["u_id"], {"k": _small, "v": _small})
W = ("w_id INT, k INT, v INT, w_t TEXT", ["w_id"], {"k": _small, "v": _small})
X = ("k INT, x_w INT", [], {"k": _small, "x_w": _small})  # no key: duplicates


def test_using_and_natural_joins(make_flow, oracle):
    _run(make_flow, oracle, {"u": U, "w": W, "x": X}, [
        ("us_in", "SELECT * FROM u JOIN x USING (k)"),
        ("us_left", "SELECT * FROM u LEFT JOIN w USING (k, v)"),
        ("us_right", "SELECT k, u.k AS uk, w.k AS wk, u_id, w_id FROM u RIGHT JOIN w USING (k)"),
        ("us_full", "SELECT * FROM u FULL OUTER JOIN w USING (v, k) WHERE k IS NULL OR k <> 2"),
        ("us_full_grp", "SELECT k, COUNT(*) AS n, COUNT(u_id) AS nu, SUM(w.v) AS sv FROM u FULL JOIN w "
                        "USING (k) GROUP BY k"),
        ("nat_in", "SELECT * FROM u NATURAL JOIN w"),
        ("nat_full", "SELECT * FROM w NATURAL FULL JOIN x"),
        ("us_chain", "SELECT * FROM u FULL JOIN x USING (k) LEFT JOIN w USING (k, v)"),
        ("us_comma", "SELECT u_id, u.k AS uk, x.k AS xk, x_w, w_id FROM w, u JOIN x USING (k) WHERE w.v = u.v"),
        ("us_on", "SELECT k, u_id, w_id, x_w FROM u LEFT JOIN w USING (k) JOIN x AS x2 (xk, x_w) "
                  "ON x2.x_w = w.v OR xk = k"),
    ], seed=37)


def test_subqueries_as_values(make_flow, oracle):
    _run(make_flow, oracle, {"a": A, "b": B, "c": C}, [
        ("or_in", "SELECT a_id FROM a WHERE a_v = 1 OR a_k IN (SELECT b_v FROM b WHERE b_t <> 'a')"),
        ("or_ex", "SELECT a_id, a_v FROM a WHERE a_v > 3 OR EXISTS (SELECT 1 FROM b WHERE b_k = a_k AND b_v > 1)"),
        ("not_and", "SELECT a_id FROM a WHERE NOT (a_v IN (SELECT c_w FROM c WHERE c_k = a_k) AND a_k > 1)"),
        ("sel_in", "SELECT a_id, a_v IN (SELECT c_w FROM c) AS m, a_k NOT IN (SELECT b_v FROM b) AS n FROM a"),
        ("sel_ex", "SELECT a_id, EXISTS (SELECT 1 FROM b WHERE b_k = a_k AND b_v <> a_v) AS e, "
                   "NOT EXISTS (SELECT 1 FROM c WHERE c_w = 4) AS f FROM a"),
        ("case_in", "SELECT a_id, CASE WHEN a_k IN (SELECT b_k FROM b WHERE b_v = a_v) THEN 'y' "
                    "WHEN a_v IN (SELECT c_k FROM c) IS NULL THEN 'u' ELSE 'n' END AS c FROM a"),
        ("or_grp", "SELECT a_k, COUNT(*) AS n FROM a WHERE a_v IS NULL OR a_v IN (SELECT c_w FROM c "
                   "WHERE c_k = a_k) OR NOT EXISTS (SELECT 1 FROM b WHERE b_v = a_v) GROUP BY a_k"),
        ("or_join", "SELECT a_id, b_id FROM a JOIN b ON a_k = b_k WHERE b_v < 2 OR a_v IN (SELECT c_w FROM c "
                    "WHERE c_k = b_v)"),
    ], seed=38, steps=5)  # (each mark join lowers into several joins: few steps keep the Spark run short)


def test_correlated_scalars_after_aggregation(make_flow, oracle):
    _run(make_flow, oracle, {"a": A, "b": B, "c": C}, [
        ("having_corr", "SELECT a_k, SUM(a_v) AS s FROM a GROUP BY a_k "
                        "HAVING SUM(a_v) > (SELECT 0.5 * SUM(b_v) FROM b WHERE b_k = a_k)"),
        ("sel_corr", "SELECT a_k, COUNT(*) AS n, (SELECT COUNT(*) FROM c WHERE c_k = a_k) AS m FROM a "
                     "GROUP BY a_k"),
        ("sel_corr_expr", "SELECT a_k, a_v, SUM(a_id) - (SELECT MAX(b_v) FROM b WHERE b_k = a_k AND "
                          "b_v = a_v) AS d FROM a GROUP BY a_k, a_v"),
        ("value_outer", "SELECT a_id, (SELECT COUNT(*) * a_v FROM c WHERE c_k = a_k) AS p FROM a"),
        ("value_outer_agg", "SELECT a_k, (SELECT SUM(b_v) + a_k FROM b WHERE b_k = a_k) AS q FROM a "
                            "GROUP BY a_k"),
    ], seed=39, steps=6)


# The TPC-H queries that use these constructs (Q2, Q4, Q13, Q16-Q18, Q20-Q22) run unmodified in
# tests/differential/test_tpch.py.


def test_subqueries_in_from_without_alias(make_flow, oracle):
    # PostgreSQL 16+: a subquery in FROM may go without an alias; its columns are referred to unqualified.
    views = [
        ("anon1", "SELECT a_k, COUNT(*) AS n FROM (SELECT a_k FROM a WHERE a_v > 1 UNION ALL "
                  "SELECT b_k FROM b) GROUP BY a_k"),
        ("anon2", "SELECT a_id, b_id FROM (SELECT a_id, a_k FROM a), (SELECT b_id, b_k FROM b WHERE b_v < 3) "
                  "WHERE a_k = b_k"),
        ("anon3", "SELECT SUM(m) AS s FROM (SELECT MAX(a_v) AS m FROM a GROUP BY a_k)"),
    ]
    # The oracle's PostgreSQL (15) wants aliases: the same queries with them.
    aliased = {
        "anon1": views[0][1].replace("FROM b)", "FROM b) t"),
        "anon2": views[1][1].replace("FROM a)", "FROM a) t1").replace("b_v < 3)", "b_v < 3) t2"),
        "anon3": views[2][1].replace("a_k)", "a_k) t"),
    }
    assert all(aliased[n] != sql for n, sql in views)
    report = run_differential(make_flow, oracle, sources={"a": A, "b": B}, views=views, seed=39, steps=5,
                              oracle_sql=aliased)
    assert report.steps == 5
