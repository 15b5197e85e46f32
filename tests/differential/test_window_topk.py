"""Differential tests of top-k and window functions against PostgreSQL, after every step, every executor.

Where PostgreSQL's answer depends on the order of rows it does not specify
(ROW_NUMBER, NTILE, LAG/LEAD, FIRST_VALUE over ties, LIMIT over ties), the
queries' ORDER BY is total (it ends in the primary key, or in every column
of a keyless table, whose duplicate rows are then interchangeable).
freshview's own tie rule is unit-tested in tests/runtime/test_window.py.
"""

from __future__ import annotations

from tests.support.differential import run_differential

ORDERS = ("o_id INT, o_customer INT, o_status TEXT, o_date DATE, amount NUMERIC(10,2), "
          "qty INT, price FLOAT8, big BIGINT", ["o_id"])
EVENTS = ("e_kind TEXT, e_val INT, e_small SMALLINT", [])  # no key: duplicate rows
# Small domains: many ties, partitions emptied and refilled.
ORDERS_SMALL = (ORDERS[0], ORDERS[1], {"o_customer": [1, 2, 3], "o_status": ["a", "b"], "qty": [1, 2, 3]})


def _run(make_flow, oracle, sources, views, seed, steps=10):
    report = run_differential(make_flow, oracle, sources=sources, views=views, seed=seed, steps=steps)
    assert report.steps >= steps
    return report


def test_top_k(make_flow, oracle):
    report = _run(make_flow, oracle, {"orders": ORDERS, "events": EVENTS}, [
        ("t1", "SELECT o_id, qty, amount FROM orders ORDER BY qty DESC, o_id LIMIT 5"),
        ("t2", "SELECT o_id, price FROM orders ORDER BY price NULLS FIRST, o_id LIMIT 4 OFFSET 3"),
        ("t3", "SELECT o_id FROM orders ORDER BY amount DESC NULLS LAST, o_id FETCH FIRST 3 ROWS ONLY"),
        ("t4", "SELECT e_kind, e_val FROM events ORDER BY e_val, e_kind, e_small LIMIT 6"),
        ("t5", "SELECT o_customer, SUM(amount) AS total FROM orders GROUP BY o_customer "
               "ORDER BY total DESC NULLS LAST, o_customer NULLS FIRST LIMIT 3"),
        ("t6", "SELECT o_id, qty FROM orders ORDER BY o_date DESC, o_id OFFSET 25"),
        ("t7", "SELECT o_id AS k FROM orders UNION ALL SELECT e_val FROM events ORDER BY 1 DESC LIMIT 5"),
        ("t8", "SELECT e_val FROM events ORDER BY 1 LIMIT 0"),
    ], seed=41, steps=12)
    assert report.empty_view_steps.get("t1", 0) < report.steps  # not vacuous


def test_per_group_top_k_via_ranks(make_flow, oracle):
    _run(make_flow, oracle, {"orders": ORDERS_SMALL}, [
        ("g1", "SELECT * FROM (SELECT o_customer, o_id, amount, row_number() OVER "
               "(PARTITION BY o_customer ORDER BY amount DESC, o_id) AS rn FROM orders) s WHERE rn <= 2"),
        ("g2", "SELECT o_status, o_id, rank() OVER (PARTITION BY o_status ORDER BY qty) AS r, "
               "dense_rank() OVER (PARTITION BY o_status ORDER BY qty) AS dr FROM orders"),
        ("g3", "SELECT o_id, ntile(3) OVER (PARTITION BY o_customer ORDER BY o_id) AS tile, "
               "ntile(2) OVER (ORDER BY qty, o_id) AS half FROM orders"),
        ("g4", "SELECT o_customer, total, rank() OVER (ORDER BY total DESC) AS r FROM "
               "(SELECT o_customer, SUM(qty) AS total FROM orders GROUP BY o_customer) t"),
    ], seed=42, steps=12)


def test_lag_lead_first_last(make_flow, oracle):
    _run(make_flow, oracle, {"orders": ORDERS_SMALL, "events": EVENTS}, [
        ("l1", "SELECT o_id, lag(qty) OVER (PARTITION BY o_customer ORDER BY o_id) AS prev, "
               "lead(amount, 2, 0) OVER (PARTITION BY o_customer ORDER BY o_id) AS next2, "
               "qty - lag(qty, 1, qty) OVER (ORDER BY o_date, o_id) AS diff FROM orders"),
        ("l2", "SELECT o_id, first_value(amount) OVER (PARTITION BY o_status ORDER BY o_id) AS fv, "
               "last_value(amount) OVER (PARTITION BY o_status ORDER BY o_id) AS lv_default, "
               "last_value(o_id) OVER (PARTITION BY o_status ORDER BY qty, o_id "
               "ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING) AS lv FROM orders"),
        ("l3", "SELECT e_kind, e_val, lag(e_val) OVER (PARTITION BY e_kind ORDER BY e_val, e_small) AS p "
               "FROM events"),
    ], seed=43, steps=12)


def test_window_aggregates_and_frames(make_flow, oracle):
    _run(make_flow, oracle, {"orders": ORDERS_SMALL, "events": EVENTS}, [
        ("a1", "SELECT o_id, SUM(qty) OVER (PARTITION BY o_customer ORDER BY o_date) AS running, "
               "COUNT(*) OVER (PARTITION BY o_customer ORDER BY o_date) AS n, "
               "COUNT(qty) OVER (PARTITION BY o_customer) AS nq, AVG(amount) OVER (PARTITION BY o_status) AS a "
               "FROM orders"),
        ("a2", "SELECT o_id, SUM(amount) OVER (ORDER BY o_id ROWS BETWEEN 2 PRECEDING AND 1 FOLLOWING) AS s, "
               "MIN(price) OVER (ORDER BY o_id ROWS 3 PRECEDING) AS lo, "
               "MAX(o_date) OVER (PARTITION BY o_customer ORDER BY o_id ROWS BETWEEN 1 FOLLOWING AND 3 FOLLOWING) "
               "AS hi, SUM(price) OVER (PARTITION BY o_status ORDER BY o_id ROWS BETWEEN 1 PRECEDING AND "
               "1 FOLLOWING) AS sp FROM orders"),
        ("a3", "SELECT o_id, SUM(big) OVER (ORDER BY qty RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS sb, "
               "AVG(qty) OVER (ORDER BY qty RANGE BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING) AS aq, "
               "MAX(amount) OVER (PARTITION BY o_customer ORDER BY qty) AS m, "
               "SUM(price) OVER (PARTITION BY o_customer ORDER BY o_id) AS rp FROM orders"),
        ("a5", "SELECT o_id, SUM(qty) OVER (PARTITION BY o_customer ORDER BY amount RANGE BETWEEN 1.5 PRECEDING "
               "AND 2 FOLLOWING) AS s1, COUNT(*) OVER (ORDER BY qty DESC RANGE BETWEEN 1 PRECEDING AND CURRENT ROW) "
               "AS c1, MAX(o_id) OVER (ORDER BY price RANGE BETWEEN 2.5 PRECEDING AND 0.5 PRECEDING) AS m1, "
               "COUNT(*) OVER (ORDER BY amount RANGE BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING) AS c2, "
               "COUNT(*) OVER (ORDER BY amount DESC NULLS LAST RANGE BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) "
               "AS c3, SUM(price) OVER (ORDER BY big NULLS FIRST RANGE BETWEEN 2 FOLLOWING AND 5 FOLLOWING) AS c4 "
               "FROM orders"),
        ("a4", "SELECT e_kind, e_val, SUM(e_small) OVER (PARTITION BY e_kind) AS s, "
               "COUNT(*) OVER () AS n, MIN(e_val) OVER (PARTITION BY e_kind ORDER BY e_small) AS lo FROM events"),
    ], seed=44, steps=12)


def test_windows_over_aggregates_and_views(make_flow, oracle):
    _run(make_flow, oracle, {"orders": ORDERS_SMALL}, [
        ("w1", "SELECT o_customer, o_status, SUM(qty) AS s, "
               "SUM(SUM(qty)) OVER (PARTITION BY o_customer) AS per_customer, "
               "rank() OVER (PARTITION BY o_status ORDER BY SUM(qty) DESC) AS r "
               "FROM orders GROUP BY o_customer, o_status"),
        ("w2", "SELECT o_id, qty, row_number() OVER (ORDER BY qty DESC, o_id) AS rn FROM orders "
               "ORDER BY rn LIMIT 4"),
        ("w3", "SELECT DISTINCT o_customer, COUNT(*) OVER (PARTITION BY o_customer) AS n FROM orders"),
    ], seed=45, steps=12)


def test_partitions_emptied_and_refilled(make_flow, oracle):
    tiny = (ORDERS[0], ORDERS[1], {"o_customer": [1, 2, 3, 4, 5, 6], "qty": [1, 2, 3]})
    report = run_differential(make_flow, oracle, sources={"orders": tiny}, views=[
        ("p1", "SELECT o_customer, o_id, qty, row_number() OVER (PARTITION BY o_customer ORDER BY qty, o_id) AS rn, "
               "sum(qty) OVER (PARTITION BY o_customer) AS s, lag(o_id) OVER (PARTITION BY o_customer "
               "ORDER BY o_id) AS prev FROM orders"),
        ("p2", "SELECT o_id, qty FROM orders ORDER BY qty DESC, o_id LIMIT 2"),
        ("p3", "SELECT count(*) OVER () AS n, max(o_id) OVER (PARTITION BY qty) AS m FROM orders"),
        ("partitions", "SELECT DISTINCT o_customer FROM orders"),
    ], seed=46, steps=12, initial_rows=3, changes_per_step=(1, 4))
    assert report.steps >= 12
    assert len(set(report.view_rows["partitions"])) > 2  # partitions came and went


def test_views_over_top_k_and_window_views(make_flow, oracle):
    _run(make_flow, oracle, {"orders": ORDERS_SMALL}, [
        ("ranked", "SELECT o_customer, o_id, amount, rank() OVER (PARTITION BY o_customer ORDER BY amount DESC) "
                   "AS r FROM orders"),
        ("top", "SELECT o_customer, COUNT(*) AS n FROM ranked WHERE r <= 2 GROUP BY o_customer"),
        ("best", "SELECT o_id, amount FROM ranked ORDER BY amount DESC NULLS LAST, o_id LIMIT 3"),
    ], seed=47, steps=10)
