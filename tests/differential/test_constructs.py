"""Differential tests: every supported construct against PostgreSQL on random change streams.

Each test registers a few views over random sources, ticks 10+ random steps
(inserts, deletes, updates, NULLs, duplicates, emptied groups) and, after
every step, compares each view's snapshot with PostgreSQL running the same
SQL over the same data.  A failure names the seed and the step to replay.
"""

from __future__ import annotations

import pytest

from tests.support.differential import run_differential

ORDERS = ("o_id INT, o_customer INT, o_status TEXT, o_date DATE, amount NUMERIC(10,2), "
          "qty INT, price FLOAT8, big BIGINT", ["o_id"])
CUSTOMERS = ("c_id INT, c_name TEXT, c_region TEXT, c_ts TIMESTAMP, c_vip BOOL", ["c_id"])
EVENTS = ("e_kind TEXT, e_val INT, e_small SMALLINT, e_at TIMESTAMPTZ", [])  # no key: duplicates
LINES = ("l_order INT, l_no INT, l_part INT, l_qty INT, l_price NUMERIC(12,2)", ["l_order", "l_no"])


def _run(make_flow, oracle, sources, views, seed, steps=10):
    report = run_differential(make_flow, oracle, sources=sources, views=views, seed=seed, steps=steps)
    assert report.steps >= steps
    return report


def test_filters_and_projections(make_flow, oracle):
    _run(make_flow, oracle, {"orders": ORDERS}, [
        ("f1", "SELECT o_id, amount * 2 AS dbl, qty + 1 AS q1, qty / 3 AS third, qty % 4 AS m, -qty AS neg "
               "FROM orders WHERE amount > 5 AND NOT (o_status = 'b') OR qty IS NULL"),
        ("f2", "SELECT o_id, CASE WHEN qty > 5 THEN 'hi' WHEN qty > 2 THEN 'mid' ELSE 'lo' END AS band, "
               "COALESCE(o_status, 'none') AS st, NULLIF(qty, 3) AS nq FROM orders WHERE o_customer IN (1, 2, 3, NULL)"),
        ("f3", "SELECT o_id, price * qty AS total, big + qty AS b2, amount / 4 AS quarter FROM orders "
               "WHERE qty BETWEEN 2 AND 7 AND price IS NOT NULL"),
        ("f4", "SELECT o_status, o_date FROM orders WHERE o_status LIKE 'a%' OR o_status ILIKE '%B%' "
               "OR o_status NOT LIKE '%\\_%'"),
    ], seed=11)


def test_string_date_and_cast_functions(make_flow, oracle):
    _run(make_flow, oracle, {"orders": ORDERS, "events": EVENTS}, [
        ("s1", "SELECT o_id, lower(o_status) AS lo, upper(o_status) AS up, length(o_status) AS len, "
               "substring(o_status from 2 for 2) AS sub, trim(o_status) AS tr, o_status || '-' || o_id AS cat "
               "FROM orders"),
        ("s2", "SELECT o_id, EXTRACT(YEAR FROM o_date) AS y, EXTRACT(MONTH FROM o_date) AS m, "
               "EXTRACT(DOW FROM o_date) AS dow, date_trunc('month', o_date) AS mon, o_date + 1 AS next "
               "FROM orders WHERE o_date >= DATE '2022-01-01'"),
        ("s3", "SELECT CAST(qty AS NUMERIC(10,2)) AS qn, CAST(amount AS INT) AS ai, qty::text AS qt, "
               "CAST(price AS INT) AS pi, amount::float8 AS af FROM orders"),
        ("s4", "SELECT e_kind, e_val, EXTRACT(HOUR FROM e_at) AS h, date_trunc('day', e_at) AS d, "
               "e_small * 2 AS s2 FROM events WHERE e_val <> 3"),
    ], seed=12)


def test_group_by_aggregates(make_flow, oracle):
    _run(make_flow, oracle, {"orders": ORDERS}, [
        ("g1", "SELECT o_customer, COUNT(*) AS n, COUNT(qty) AS nq, SUM(qty) AS sq, SUM(amount) AS sa, "
               "AVG(qty) AS aq, AVG(amount) AS aa, SUM(price) AS sp, AVG(price) AS ap, SUM(big) AS sb "
               "FROM orders GROUP BY o_customer"),
        ("g2", "SELECT o_status, o_customer % 3 AS bucket, COUNT(*) AS n FROM orders "
               "GROUP BY o_status, o_customer % 3 HAVING COUNT(*) > 1"),
        ("g3", "SELECT o_date, SUM(qty * 2) AS s FROM orders WHERE amount > 0 GROUP BY 1"),
    ], seed=13, steps=12)


def test_min_max_under_deletes(make_flow, oracle):
    _run(make_flow, oracle, {"orders": ORDERS, "customers": CUSTOMERS}, [
        ("mm1", "SELECT o_customer, MIN(amount) AS lo, MAX(amount) AS hi, MIN(o_status) AS s, MAX(o_date) AS d, "
                "MIN(price) AS p, MAX(qty) AS q FROM orders GROUP BY o_customer"),
        ("mm2", "SELECT MIN(qty) AS lo, MAX(qty) AS hi, COUNT(*) AS n FROM orders"),
        ("mm3", "SELECT c_region, MIN(c_ts) AS first, MAX(c_name) AS last, MAX(c_vip::int) AS anyvip "
                "FROM customers GROUP BY c_region"),
    ], seed=14, steps=14)


def test_global_aggregates_over_empty_input(make_flow, oracle):
    _run(make_flow, oracle, {"orders": ORDERS}, [
        ("e1", "SELECT COUNT(*) AS n, SUM(qty) AS s, AVG(amount) AS a, MIN(o_status) AS m FROM orders "
               "WHERE qty > 8"),
        ("e2", "SELECT COUNT(*) AS n FROM orders WHERE 1 = 0"),
    ], seed=15)


def test_inner_joins(make_flow, oracle):
    _run(make_flow, oracle, {"orders": ORDERS, "customers": CUSTOMERS, "lines": LINES}, [
        ("j1", "SELECT o_id, c_name, amount FROM orders JOIN customers ON o_customer = c_id"),
        ("j2", "SELECT o.o_id, c.c_region, l.l_qty FROM orders o, customers c, lines l "
               "WHERE o.o_customer = c.c_id AND l.l_order = o.o_id AND l.l_qty > 1"),
        ("j3", "SELECT o_id, c_id FROM orders JOIN customers ON o_customer = c_id AND o_id < c_id + 5 "
               "WHERE c_region <> 'a'"),
        ("j4", "SELECT c_region, l_part, COUNT(*) AS n, SUM(l_price) AS rev FROM lines "
               "JOIN orders ON l_order = o_id JOIN customers ON c_id = o_customer GROUP BY c_region, l_part"),
    ], seed=16, steps=12)


def test_distinct_union_all_and_subqueries(make_flow, oracle):
    _run(make_flow, oracle, {"orders": ORDERS, "events": EVENTS}, [
        ("d1", "SELECT DISTINCT o_status, o_customer FROM orders"),
        ("d2", "SELECT DISTINCT e_kind FROM events"),
        ("u1", "SELECT o_status AS k, qty AS v FROM orders UNION ALL SELECT e_kind, e_val FROM events"),
        ("sq", "SELECT t.k, t.n * 2 AS n2 FROM (SELECT o_customer AS k, COUNT(*) AS n FROM orders "
               "GROUP BY o_customer) AS t WHERE t.n > 1"),
        ("ev", "SELECT e_kind, e_val, e_small FROM events"),
    ], seed=17)


def test_views_over_views(make_flow, oracle):
    _run(make_flow, oracle, {"orders": ORDERS, "customers": CUSTOMERS}, [
        ("totals", "SELECT o_customer, SUM(amount) AS total, COUNT(*) AS n FROM orders GROUP BY o_customer"),
        ("vip", "SELECT c_region, COUNT(*) AS n, SUM(total) AS t FROM totals JOIN customers ON o_customer = c_id "
                "WHERE total > 10 GROUP BY c_region"),
        ("agg_of_agg", "SELECT n, COUNT(*) AS customers, MAX(total) AS top FROM totals GROUP BY n"),
        ("top_region", "SELECT MAX(t) AS best FROM vip"),
    ], seed=18, steps=12)


@pytest.mark.parametrize("seed", [101, 202])
def test_mixed_random_seeds(make_flow, oracle, seed):
    _run(make_flow, oracle, {"orders": ORDERS, "customers": CUSTOMERS}, [
        ("m1", "SELECT c_region, o_status, COUNT(*) AS n, AVG(amount) AS a, MIN(qty) AS lo "
               "FROM orders JOIN customers ON o_customer = c_id GROUP BY c_region, o_status"),
        ("m2", "SELECT DISTINCT c_region FROM customers WHERE c_vip"),
    ], seed=seed, steps=8)
