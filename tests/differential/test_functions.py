"""Differential tests of PostgreSQL's scalar functions: views using them over random change streams.

Each view runs under every executor against PostgreSQL on the same stream
(inserts, deletes, updates, NULLs, duplicates), compared after every step.
Arguments are kept inside each function's domain (sqrt of abs, make_date of
valid fields ...): a stream that made a function raise would stop the step
in both systems alike, which tests/runtime/test_functions.py covers.
"""

from __future__ import annotations

from tests.support.differential import run_differential

ORDERS = ("o_id INT, o_customer INT, o_status TEXT, o_date DATE, amount NUMERIC(10,2), "
          "qty INT, price FLOAT8, big BIGINT", ["o_id"],
          {"o_status": ["alpha", "b,c,d", "Été été", "x-y z", "", "aaa", "a.b.c", None]})
CUSTOMERS = ("c_id INT, c_name TEXT, c_region TEXT, c_ts TIMESTAMP, c_vip BOOL", ["c_id"],
             {"c_name": ["ann", "bob smith", "o'neil-mc", "ÉLODIE", "x1y22", None],
              "c_region": ["eu", "us", "apac", None]})
EVENTS = ("e_kind TEXT, e_val INT, e_small SMALLINT, e_at TIMESTAMPTZ", [])


def _run(make_flow, oracle, sources, views, seed, steps=8):
    report = run_differential(make_flow, oracle, sources=sources, views=views, seed=seed, steps=steps)
    assert report.steps >= steps
    return report


def test_math_functions(make_flow, oracle):
    _run(make_flow, oracle, {"orders": ORDERS}, [
        ("m1", "SELECT o_id, round(amount, 1) AS r1, round(price) AS rp, trunc(amount, 1) AS t1, trunc(price) AS tp, "
               "ceiling(amount) AS c, floor(price) AS f, abs(qty) AS a, mod(qty, 3) AS m, sign(amount) AS sa, "
               "sign(price) AS sp FROM orders"),
        ("m2", "SELECT o_id, sqrt(abs(price)) AS s, power(qty, 2) AS p2, power(abs(price), 0.5) AS ph, "
               "cbrt(price) AS cb, exp(qty) AS e, ln(abs(price) + 1) AS l, log(abs(qty) + 1) AS lg "
               "FROM orders WHERE qty < 50"),
        ("m3", "SELECT greatest(qty, o_customer, 3) AS g, least(amount, 2.5) AS l, COUNT(*) AS n "
               "FROM orders GROUP BY greatest(qty, o_customer, 3), least(amount, 2.5)"),
    ], seed=31)


def test_text_functions(make_flow, oracle):
    _run(make_flow, oracle, {"orders": ORDERS, "customers": CUSTOMERS}, [
        ("t1", "SELECT o_id, replace(o_status, 'a', 'A') AS r, split_part(o_status, ',', 2) AS sp, "
               "split_part(o_status, ' ', -1) AS spl, strpos(o_status, 'a') AS sa, position('é' in o_status) AS pe, "
               "left(o_status, 2) AS l2, right(o_status, -1) AS rm, lpad(o_status, 6, '*-') AS lp, "
               "rpad(o_status, qty) AS rp, repeat(o_status, qty % 3) AS rep, reverse(o_status) AS rev, "
               "char_length(o_status) AS cl, octet_length(o_status) AS ol FROM orders"),
        ("t2", "SELECT c_id, initcap(c_name) AS ic, md5(c_name) AS h, starts_with(c_name, 'b') AS sb, "
               "concat_ws('/', c_region, c_name, c_id, c_vip) AS cw, "
               "regexp_replace(c_name, '[aeiou]', '_', 'g') AS rx, regexp_replace(c_name, '(\\w+) (\\w+)', '\\2, \\1') AS sw "
               "FROM customers"),
        ("t3", "SELECT split_part(o_status, ',', 1) AS head, COUNT(*) AS n, SUM(qty) AS q FROM orders "
               "WHERE starts_with(o_status, 'a') OR o_status IS DISTINCT FROM 'aaa' GROUP BY split_part(o_status, ',', 1)"),
    ], seed=32)


def test_date_functions_and_intervals(make_flow, oracle):
    _run(make_flow, oracle, {"orders": ORDERS, "customers": CUSTOMERS, "events": EVENTS}, [
        ("d1", "SELECT o_id, date_part('year', o_date) AS y, date_part('dow', o_date) AS dw, "
               "make_date(2000 + abs(qty), 1 + abs(o_customer) % 12, 1 + abs(o_id) % 28) AS md, "
               "to_char(o_date, 'YYYY-MM-DD Dy') AS tc, o_date + qty * INTERVAL '1 day' AS due, "
               "o_date + (qty || ' months')::interval AS mo, o_date - INTERVAL '1 month' AS prev "
               "FROM orders"),
        ("d2", "SELECT c_id, to_char(c_ts, 'FMMonth DD, YYYY HH12:MI AM') AS tc, c_ts + INTERVAL '36 hours' AS later, "
               "EXTRACT(EPOCH FROM c_ts - DATE '2020-01-01') AS secs, "
               "EXTRACT(YEAR FROM age(c_ts, TIMESTAMP '1990-06-15 12:00:00')) AS yrs, "
               "date_part('hour', c_ts) AS h FROM customers WHERE c_ts - TIMESTAMP '2020-01-01' > INTERVAL '1 day'"),
        ("d3", "SELECT e_kind, date_part('month', e_at) AS m, COUNT(*) AS n FROM events "
               "WHERE e_at + e_val * INTERVAL '1 hour' >= TIMESTAMPTZ '2021-01-01 00:00:00+00' "
               "GROUP BY e_kind, date_part('month', e_at)"),
    ], seed=33)


def test_boolean_tests(make_flow, oracle):
    _run(make_flow, oracle, {"customers": CUSTOMERS, "orders": ORDERS}, [
        ("b1", "SELECT c_id, c_vip IS TRUE AS t, c_vip IS NOT FALSE AS nf, c_vip IS UNKNOWN AS u, "
               "c_region IS DISTINCT FROM 'eu' AS d FROM customers"),
        ("b2", "SELECT c_region, COUNT(*) AS n FROM customers WHERE c_vip IS NOT TRUE "
               "AND c_region IS NOT DISTINCT FROM c_region GROUP BY c_region"),
        ("b3", "SELECT o_id, qty FROM orders JOIN customers ON o_customer = c_id "
               "WHERE qty IS DISTINCT FROM c_id AND (qty > 3) IS NOT TRUE"),
    ], seed=34)


def test_interval_columns(make_flow, oracle):
    """Interval-valued output columns (timestamp differences, age, interval arithmetic, an aggregate's
    non-key interval), compared part by part (months, days, microseconds), and read by another view."""
    _run(make_flow, oracle, {"customers": CUSTOMERS, "orders": ORDERS}, [
        ("i1", "SELECT c_id, c_ts - TIMESTAMP '2024-01-01 06:30' AS d, age(c_ts, TIMESTAMP '2020-02-29 12:00') AS a, "
               "age(TIMESTAMP '2023-01-31', c_ts) AS b FROM customers"),
        ("i2", "SELECT o_id, qty * INTERVAL '1 month' AS m, INTERVAL '90 minutes' * qty AS h, "
               "(o_date + qty * INTERVAL '1 day') - TIMESTAMP '2024-01-01 06:00' AS x FROM orders"),
        ("i3", "SELECT c_region, max(c_ts) - min(c_ts) AS span, COUNT(*) AS n FROM customers GROUP BY c_region"),
        ("i4", "SELECT c_id, d + INTERVAL '1 hour' AS d1, d > INTERVAL '10 days' AS far, d * 2 AS twice, "
               "EXTRACT(EPOCH FROM a) AS ea FROM i1"),
    ], seed=53)


def test_date_literals_in_postgresql_forms(make_flow, oracle):
    # PostgreSQL reads a year-month-day with one-digit fields ('2021-2-1', TPC-DS's '2002-3-01') and a date
    # with a time part (DATE '2021-12-01 10:00' is 2021-12-01).
    _run(make_flow, oracle, {"orders": ORDERS, "customers": CUSTOMERS}, [
        ("dl1", "SELECT o_id, o_date FROM orders WHERE o_date BETWEEN '2021-2-1' AND Cast('2022-2-1' AS DATE) "
                "OR o_date = DATE '2024-12-1' OR o_date > DATE '2024-12-01 10:00'"),
        ("dl2", "SELECT c_id FROM customers WHERE c_ts < TIMESTAMP '2022-1-1 00:00:00' "
                "OR c_ts >= CAST('2024-2-1 09:30' AS TIMESTAMP)"),
    ], seed=35, steps=4)
