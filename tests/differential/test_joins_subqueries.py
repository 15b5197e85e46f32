"""Differential tests: outer joins and subqueries against PostgreSQL on random change streams.

Small key domains make matches come and go, so NULL-padded rows appear and
disappear; NULLs sit in join keys, IN lists and correlation columns, and
keyless tables hold duplicates.  Every view is compared after every step
under every executor.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

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


# TPC-H shapes (Q2, Q4, Q13, Q16, Q17, Q18, Q20, Q21, Q22) over small TPC-H-like tables whose domains make
# their predicates match; Q16 counts without DISTINCT and Q18's threshold is scaled to the data.
_D = [dt.date(1993, 6, 1) + dt.timedelta(days=30 * i) for i in range(20)]
_K = list(range(10))  # order and customer keys
_P = list(range(5))  # part and supplier keys: (part, supplier) pairs recur in partsupp and lineitem
TPCH = {
    "region": ("r_regionkey INT, r_name TEXT", ["r_regionkey"], {"r_regionkey": [0, 1], "r_name": ["EUROPE", "EUROPE", "ASIA"]}),
    "nation": ("n_nationkey INT, n_name TEXT, n_regionkey INT", ["n_nationkey"],
               {"n_nationkey": [0, 1, 2, 3], "n_name": ["SAUDI ARABIA", "CANADA"], "n_regionkey": [0, 1]}),
    "supplier": ("s_suppkey BIGINT, s_name TEXT, s_nationkey INT, s_acctbal NUMERIC(15,2), s_comment TEXT",
                 ["s_suppkey"], {"s_suppkey": _P, "s_nationkey": [0, 1, 2, 3],
                                 "s_comment": ["Customer Complaints", "fine", "x"]}),
    "part": ("p_partkey BIGINT, p_name TEXT, p_brand TEXT, p_type TEXT, p_size INT, p_container TEXT",
             ["p_partkey"], {"p_partkey": _P, "p_name": ["forest green", "forest red", "red"], "p_brand": ["Brand#23", "Brand#45"],
                             "p_type": ["LARGE BRASS", "LARGE BRASS", "MEDIUM POLISHED TIN", "SMALL TIN"], "p_size": [15, 15, 14],
                             "p_container": ["MED BOX", "SM CASE"]}),
    "partsupp": ("ps_partkey BIGINT, ps_suppkey BIGINT, ps_availqty INT, ps_supplycost NUMERIC(15,2)",
                 ["ps_partkey", "ps_suppkey"], {"ps_partkey": _P, "ps_suppkey": _P, "ps_availqty": [5, 20, 40],
                                                "ps_supplycost": [Decimal("1.00"), Decimal("2.00"), Decimal("3.00")]}),
    "customer": ("c_custkey BIGINT, c_phone TEXT, c_acctbal NUMERIC(15,2)", ["c_custkey"],
                 {"c_custkey": _K, "c_phone": ["13-555", "31-555", "99-555"],
                  "c_acctbal": [Decimal(v) for v in ("-5.00", "10.00", "20.00", "90.00")]}),
    "orders": ("o_orderkey BIGINT, o_custkey BIGINT, o_orderstatus TEXT, o_orderdate DATE, o_orderpriority TEXT, "
               "o_comment TEXT", ["o_orderkey"],
               {"o_orderkey": _K, "o_custkey": _K, "o_orderstatus": ["F", "F", "O"], "o_orderdate": _D[:5], "o_orderpriority": ["1-URGENT", "5-LOW"],
                "o_comment": ["special requests", "fine", "nothing special"]}),
    "lineitem": ("l_orderkey BIGINT, l_linenumber INT, l_partkey BIGINT, l_suppkey BIGINT, l_quantity NUMERIC(15,2), "
                 "l_extendedprice NUMERIC(15,2), l_shipdate DATE, l_commitdate DATE, l_receiptdate DATE",
                 ["l_orderkey", "l_linenumber"],
                 {"l_orderkey": _K, "l_linenumber": [1, 2, 3, 4], "l_partkey": _P, "l_suppkey": _P,
                  "l_quantity": [Decimal(q) for q in (1, 5, 10, 25)], "l_extendedprice": [Decimal("100.00")],
                  "l_shipdate": _D, "l_commitdate": _D[4:], "l_receiptdate": _D[:14]}),
}


def test_tpch_subquery_shapes(make_flow, oracle):
    from tests.sql.test_subqueries import Q2, Q4, Q13, Q17, Q20, Q21, Q22

    q2 = Q2.replace("p_mfgr, s_address, s_phone, s_comment", "s_comment")
    q16 = ("select p_brand, p_type, p_size, count(ps_suppkey) as supplier_cnt from partsupp, part "
           "where p_partkey = ps_partkey and p_brand <> 'Brand#45' and p_type not like 'MEDIUM POLISHED%' "
           "and p_size in (49, 14, 23, 45, 19, 3, 36, 9, 15) and ps_suppkey not in (select s_suppkey from supplier "
           "where s_comment like '%Customer%Complaints%') group by p_brand, p_type, p_size")
    q18 = ("select o_orderkey, o_orderdate, sum(l_quantity) as qty from orders, lineitem where o_orderkey in "
           "(select l_orderkey from lineitem group by l_orderkey having sum(l_quantity) > 30) "
           "and o_orderkey = l_orderkey group by o_orderkey, o_orderdate")
    q20 = Q20.replace("s_name, s_address", "s_name")
    q21 = Q21
    q22 = Q22
    report = run_differential(make_flow, oracle, sources=TPCH, seed=37, steps=6, initial_rows=40, null_prob=0.03,
                              views=[("q2", q2), ("q4", Q4), ("q13", Q13), ("q16", q16), ("q17", Q17), ("q18", q18),
                                     ("q20", q20), ("q21", q21), ("q22", q22)])
    empty = [name for name, counts in report.view_rows.items() if not any(counts)]
    assert not empty, f"views that never had a row: {empty}"
