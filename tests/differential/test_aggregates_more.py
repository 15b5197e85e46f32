"""Differential tests of the aggregates beyond COUNT/SUM/AVG/MIN/MAX, against PostgreSQL.

DISTINCT aggregates, string_agg (with ORDER BY inside), bool_and/bool_or/every,
var/stddev (exact types and floats with NaN and Infinity), FILTER (WHERE ...),
GROUP BY expressions and positions, aggregates in HAVING and in expressions:
random insert/update/delete streams with NULLs and duplicates, compared with
PostgreSQL after every step under every executor.
"""

from __future__ import annotations

from tests.support.differential import run_differential

ORDERS = ("o_id INT, o_customer INT, o_status TEXT, amount NUMERIC(10,2), qty INT, price FLOAT8, "
          "flag BOOL, big BIGINT", ["o_id"])
EVENTS = ("e_kind TEXT, e_val INT, e_f FLOAT8, e_ok BOOL, e_tag TEXT", [])  # no key: duplicates
# Dyadic floats (sums stay exact), with NaN and ±Infinity now and then.
_F = [0.5, 1.25, -2.0, 3.0, 3.0, 7.75, -0.5, 12.0, float("nan"), float("inf"), float("-inf"), None]
EVENT_DOMAINS = {"e_f": _F, "e_tag": ["a", "b", "c", "bb", "A", "", None],
                 "e_kind": ["x", "y", "z", None]}


def _run(make_flow, oracle, sources, views, seed, steps=10):
    report = run_differential(make_flow, oracle, sources=sources, views=views, seed=seed, steps=steps)
    assert report.steps >= steps
    return report


def test_distinct_aggregates(make_flow, oracle):
    _run(make_flow, oracle, {"orders": ORDERS}, [
        ("da1", "SELECT o_customer, COUNT(DISTINCT qty) AS nq, SUM(DISTINCT qty) AS sq, AVG(DISTINCT amount) AS aa, "
                "SUM(DISTINCT amount) AS sa, COUNT(qty) AS n, MIN(DISTINCT qty) AS lo, MAX(DISTINCT o_status) AS hi "
                "FROM orders GROUP BY o_customer"),
        ("da2", "SELECT COUNT(DISTINCT o_status) AS ns, SUM(DISTINCT big) AS sb, AVG(DISTINCT price) AS ap, "
                "COUNT(*) AS n FROM orders"),
        ("da3", "SELECT o_status, SUM(qty) / COUNT(DISTINCT o_customer) AS per, COUNT(DISTINCT o_customer) AS nc "
                "FROM orders GROUP BY o_status HAVING COUNT(DISTINCT o_customer) > 1"),
        ("da4", "SELECT o_customer, string_agg(DISTINCT o_status, ',' ORDER BY o_status DESC) AS st, "
                "var_samp(DISTINCT qty) AS vq, stddev_pop(DISTINCT amount) AS sa FROM orders GROUP BY o_customer"),
    ], seed=31, steps=8)


def test_distinct_over_floats_with_nan_and_infinity(make_flow, oracle):
    _run(make_flow, oracle, {"events": (EVENTS[0], EVENTS[1], EVENT_DOMAINS)}, [
        ("df", "SELECT e_kind, COUNT(DISTINCT e_f) AS n, var_pop(DISTINCT e_f) AS vp, "
               "stddev_samp(DISTINCT e_f) AS ss, string_agg(DISTINCT e_tag, '/' ORDER BY e_tag) AS t "
               "FROM events GROUP BY e_kind"),
        # NaN and ±Infinity counted apart from the finite sum: deleting them brings the finite sum back
        ("sf", "SELECT e_kind, SUM(DISTINCT e_f) AS sd, AVG(DISTINCT e_f) AS ad, SUM(e_f) AS s, AVG(e_f) AS a "
               "FROM events GROUP BY e_kind"),
        ("sg", "SELECT SUM(DISTINCT e_f) AS sd, SUM(e_f) AS s, AVG(DISTINCT e_f) AS ad FROM events"),
    ], seed=37, steps=12)


def test_bool_and_variance(make_flow, oracle):
    _run(make_flow, oracle, {"orders": ORDERS}, [
        ("b1", "SELECT o_customer, bool_and(flag) AS a, bool_or(flag) AS o, every(qty > 3) AS e "
               "FROM orders GROUP BY o_customer"),
        ("v1", "SELECT o_customer, stddev(qty) AS sd, stddev_samp(amount) AS ss, stddev_pop(qty) AS sp, "
               "variance(amount) AS v, var_samp(big) AS vs, var_pop(amount) AS vp, COUNT(qty) AS n "
               "FROM orders GROUP BY o_customer"),
        ("v2", "SELECT var_pop(qty) AS vp, stddev(amount) AS sd, bool_or(flag) AS o FROM orders WHERE qty > 2"),
    ], seed=32, steps=8)


def test_float_variance_with_nan_and_infinity(make_flow, oracle):
    _run(make_flow, oracle, {"events": (EVENTS[0], EVENTS[1], EVENT_DOMAINS)}, [
        ("fv", "SELECT e_kind, var_samp(e_f) AS vs, var_pop(e_f) AS vp, stddev_samp(e_f) AS ss, "
               "stddev_pop(e_f) AS sp, COUNT(e_f) AS n FROM events GROUP BY e_kind"),
        ("fb", "SELECT e_kind, bool_and(e_ok) AS a, bool_or(e_ok) AS o FROM events GROUP BY e_kind"),
    ], seed=33, steps=14)


def test_string_agg(make_flow, oracle):
    _run(make_flow, oracle, {"events": (EVENTS[0], EVENTS[1], EVENT_DOMAINS), "orders": ORDERS}, [
        ("s1", "SELECT e_kind, string_agg(e_tag, ',' ORDER BY e_tag) AS tags FROM events GROUP BY e_kind"),
        ("s2", "SELECT e_kind, string_agg(e_tag, ' | ' ORDER BY e_val DESC NULLS LAST, e_tag) AS t "
               "FROM events GROUP BY e_kind"),
        ("s3", "SELECT string_agg(o_status, '' ORDER BY o_id) AS all_status, COUNT(*) AS n FROM orders"),
        ("s4", "SELECT o_customer, string_agg(o_status || ':' || qty, ';' ORDER BY o_id DESC) AS hist "
               "FROM orders WHERE o_customer < 5 GROUP BY o_customer"),
        ("s5", "SELECT e_kind, string_agg(e_tag, ',' ORDER BY e_f NULLS FIRST, e_tag) AS t, "
               "string_agg(e_kind || e_val, ',' ORDER BY e_f DESC, e_tag DESC NULLS LAST, e_val) AS u "
               "FROM events GROUP BY e_kind"),
    ], seed=34, steps=12)


def test_filter_clause(make_flow, oracle):
    _run(make_flow, oracle, {"orders": ORDERS}, [
        ("f1", "SELECT o_customer, COUNT(*) FILTER (WHERE qty > 3) AS big, COUNT(qty) FILTER (WHERE flag) AS nf, "
               "SUM(amount) FILTER (WHERE o_status = 'a') AS sa, AVG(qty) FILTER (WHERE amount > 0) AS aq, "
               "COUNT(DISTINCT qty) FILTER (WHERE flag) AS dq, MIN(amount) FILTER (WHERE NOT flag) AS lo "
               "FROM orders GROUP BY o_customer"),
        ("f2", "SELECT COUNT(*) FILTER (WHERE price > 0) AS pos, bool_and(flag) FILTER (WHERE qty < 5) AS a, "
               "stddev(qty) FILTER (WHERE qty IS NOT NULL) AS sd, "
               "string_agg(o_status, ',' ORDER BY o_id) FILTER (WHERE qty > 4) AS st, "
               "SUM(DISTINCT qty) FILTER (WHERE o_customer > 2) AS sdq FROM orders"),
    ], seed=35, steps=12)


def test_group_by_expressions_and_positions(make_flow, oracle):
    _run(make_flow, oracle, {"orders": ORDERS}, [
        ("p1", "SELECT o_customer % 3 AS b, o_status, COUNT(*) AS n, SUM(qty) AS s FROM orders GROUP BY 1, 2"),
        ("p2", "SELECT qty * 2 + 1 AS k, COUNT(DISTINCT o_status) AS n FROM orders GROUP BY qty * 2 + 1"),
        ("p3", "SELECT upper(o_status) AS u, COUNT(*) AS n FROM orders GROUP BY upper(o_status) "
               "HAVING SUM(qty) > 5 AND bool_or(flag)"),
        ("p4", "SELECT o_customer, SUM(amount) / COUNT(DISTINCT qty) AS r, MAX(qty) - MIN(qty) AS spread "
               "FROM orders GROUP BY 1 HAVING COUNT(DISTINCT qty) > 0"),
    ], seed=36, steps=8)


def test_array_agg(make_flow, oracle):
    """array_agg keeps NULL elements, follows its ORDER BY (ties: by value, NULLs last, where PostgreSQL
    leaves them unspecified, so the views order by a key), and an empty group has no row."""
    _run(make_flow, oracle, {"events": (EVENTS[0], EVENTS[1], EVENT_DOMAINS), "orders": ORDERS}, [
        ("a1", "SELECT o_customer, array_agg(qty ORDER BY o_id) AS qs, array_agg(o_status ORDER BY o_id DESC) AS st, "
               "array_agg(amount ORDER BY o_id) AS am, COUNT(*) AS n FROM orders GROUP BY o_customer"),
        ("a2", "SELECT array_agg(o_id ORDER BY qty NULLS FIRST, o_id) AS ids, array_agg(flag ORDER BY o_id) AS fl "
               "FROM orders WHERE o_customer < 4"),
        ("a3", "SELECT e_kind, array_agg(DISTINCT e_tag) AS tags, array_agg(DISTINCT e_val ORDER BY e_val DESC) AS v "
               "FROM events GROUP BY e_kind"),
        ("a4", "SELECT qs, COUNT(*) AS n FROM (SELECT o_customer, array_agg(qty ORDER BY qty, o_id) AS qs "
               "FROM orders GROUP BY o_customer) s GROUP BY qs"),
        ("a5", "SELECT DISTINCT array_agg(o_status ORDER BY o_status) AS st FROM orders GROUP BY o_customer"),
    ], seed=41, steps=10)


def test_array_agg_without_order_by(make_flow, oracle):
    """Without ORDER BY freshview orders the elements by value (NULLs last); PostgreSQL's order is the
    rows', unspecified: compared as multisets of elements."""
    report = run_differential(make_flow, oracle, {"events": (EVENTS[0], EVENTS[1], EVENT_DOMAINS)}, [
        ("u1", "SELECT e_kind, array_agg(e_tag) AS tags, array_agg(e_f) AS fs FROM events GROUP BY e_kind"),
        ("u2", "SELECT array_agg(e_val) AS vs FROM events WHERE e_ok"),
    ], seed=43, steps=10, unordered_lists=("u1", "u2"))
    assert report.steps >= 10
