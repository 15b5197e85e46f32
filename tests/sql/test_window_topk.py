"""The front end of top-k and window functions: plan shapes, types, and every refusal with its position."""

from __future__ import annotations

import pytest

from freshview.errors import SqlError, UnsupportedSqlError
from freshview.plan import nodes as pn
from freshview.schema import SqlType
from tests.sql.test_build import plan


def nodes(node, kind):
    return [n for n in pn.walk(node) if isinstance(n, kind)]


def test_order_by_limit_offset_becomes_a_topk_over_output_columns():
    p = plan("SELECT o_id, amount FROM orders ORDER BY amount DESC, 1 LIMIT 3 OFFSET 2")
    assert isinstance(p, pn.TopK) and (p.limit, p.offset) == (3, 2)
    assert p.order == (pn.SortKey(1, True, True), pn.SortKey(0, False, False))  # DESC: NULLS FIRST by default
    assert [n for n, _ in p.columns] == ["o_id", "amount"]


def test_order_by_a_column_not_selected_rides_along_hidden():
    p = plan("SELECT o_id FROM orders ORDER BY o_date NULLS FIRST FETCH FIRST 2 ROWS ONLY")
    assert isinstance(p, pn.Project) and [n for n, _ in p.columns] == ["o_id"]
    top = p.input
    assert isinstance(top, pn.TopK) and top.limit == 2 and top.order == (pn.SortKey(1, False, True),)


def test_offset_alone_and_limit_all():
    assert plan("SELECT o_id FROM orders ORDER BY 1 OFFSET 5").limit is None
    p = plan("SELECT o_id FROM orders ORDER BY 1 LIMIT ALL OFFSET 1")
    assert isinstance(p, pn.TopK) and (p.limit, p.offset) == (None, 1)


def test_order_by_without_limit_is_ignored():
    assert not nodes(plan("SELECT o_id FROM orders ORDER BY o_id"), pn.TopK)


def test_union_all_with_order_by_limit():
    p = plan("SELECT o_id FROM orders UNION ALL SELECT c_id FROM customers ORDER BY o_id DESC LIMIT 4")
    assert isinstance(p, pn.TopK) and isinstance(p.input, pn.UnionAll) and p.order == (pn.SortKey(0, True, True),)


def test_per_group_top_k_through_row_number():
    p = plan("SELECT * FROM (SELECT o_customer, o_id, row_number() OVER (PARTITION BY o_customer "
             "ORDER BY amount DESC) AS rn FROM orders) s WHERE rn <= 3")
    (w,) = nodes(p, pn.Window)
    assert len(w.partition) == 1 and w.order[0].descending and w.functions[0].func == "row_number"
    assert dict(p.columns)["rn"] == SqlType("int8")


def test_window_result_types_follow_postgresql():
    p = plan("SELECT sum(o_id) OVER () AS a, sum(big) OVER () AS b, avg(o_id) OVER () AS c, avg(f) OVER () AS d, "
             "count(*) OVER () AS e, ntile(2) OVER () AS g, rank() OVER () AS h, lag(amount) OVER () AS i, "
             "lag(o_id, 1, 0.5) OVER () AS j, sum(amount) OVER () AS k FROM orders")
    t = {n: (ty.kind, ty.scale) for n, ty in p.columns}
    assert t["a"] == ("int8", None) and t["b"][0] == "numeric" and t["c"][0] == "numeric"
    assert t["d"][0] == "float8" and t["e"][0] == "int8" and t["g"][0] == "int4" and t["h"][0] == "int8"
    assert t["i"] == ("numeric", 2) and t["j"][0] == "numeric" and t["k"][0] == "numeric"


def test_windows_over_an_aggregate_and_one_node_per_window_spec():
    p = plan("SELECT o_customer, sum(amount) AS s, rank() OVER (ORDER BY sum(amount) DESC) AS r, "
             "dense_rank() OVER (ORDER BY sum(amount) DESC) AS d, count(*) OVER () AS n "
             "FROM orders GROUP BY o_customer")
    ws = nodes(p, pn.Window)
    assert len(ws) == 2 and sorted(len(w.functions) for w in ws) == [1, 2]
    assert nodes(p, pn.Aggregate)


def test_window_output_names_are_the_function_names():
    p = plan("SELECT row_number() OVER (), sum(o_id) OVER () FROM orders")
    assert [n for n, _ in p.columns] == ["row_number", "sum"]


def test_frames_are_bound():
    p = plan("SELECT sum(o_id) OVER (ORDER BY o_id ROWS BETWEEN 2 PRECEDING AND 1 FOLLOWING) AS a, "
             "sum(o_id) OVER (ORDER BY o_id ROWS 3 PRECEDING) AS b, "
             "sum(o_id) OVER (ORDER BY o_id RANGE BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING) AS c FROM orders")
    (w,) = nodes(p, pn.Window)
    a, b, c = (f.frame for f in w.functions)
    assert a == pn.Frame("rows", pn.FrameBound("preceding", 2), pn.FrameBound("following", 1))
    assert b == pn.Frame("rows", pn.FrameBound("preceding", 3), pn.FrameBound("current_row"))
    assert c == pn.Frame("range", pn.FrameBound("current_row"), pn.FrameBound("unbounded_following"))


@pytest.mark.parametrize("sql, error, fragment, column", [
    ("SELECT o_id FROM orders WHERE row_number() OVER () > 1", UnsupportedSqlError, "in WHERE", 44),
    ("SELECT o_customer FROM orders GROUP BY o_customer HAVING rank() OVER () > 1", UnsupportedSqlError,
     "in HAVING", 65),
    ("SELECT sum(o_id) OVER w FROM orders WINDOW w AS (ORDER BY o_id)", UnsupportedSqlError, "WINDOW clause", 37),
    ("SELECT sum(o_id) OVER (ORDER BY o_id GROUPS 1 PRECEDING) FROM orders", UnsupportedSqlError, "GROUPS", 38),
    ("SELECT sum(o_id) OVER (ORDER BY o_id ROWS UNBOUNDED PRECEDING EXCLUDE TIES) FROM orders",
     UnsupportedSqlError, "EXCLUDE", 63),
    ("SELECT sum(o_id) OVER (ORDER BY o_date RANGE 2 PRECEDING) FROM orders", UnsupportedSqlError, "RANGE", 40),
    ("SELECT sum(o_id) OVER (ORDER BY o_id, f RANGE 2 PRECEDING) FROM orders", SqlError, "exactly one", 41),
    ("SELECT sum(o_id) OVER (ORDER BY o_id RANGE 0.5 PRECEDING) FROM orders", SqlError, "offset type numeric", 38),
    ("SELECT nth_value(o_id, 2) OVER () FROM orders", UnsupportedSqlError, "NTH_VALUE", 8),
    ("SELECT percent_rank() OVER (ORDER BY o_id) FROM orders", UnsupportedSqlError, "PERCENT_RANK", 8),
    ("SELECT count(*) FILTER (WHERE o_id > 1) OVER () FROM orders", UnsupportedSqlError, "FILTER", None),
    ("SELECT sum(DISTINCT o_id) OVER () FROM orders", UnsupportedSqlError, "DISTINCT", None),
    ("SELECT sum(row_number() OVER ()) OVER () FROM orders", UnsupportedSqlError, "window function", 25),
    ("SELECT sum(row_number() OVER ()) FROM orders", UnsupportedSqlError, "window function", 25),
    ("SELECT ntile(o_id) OVER () FROM orders", UnsupportedSqlError, "NTILE", 14),
    ("SELECT ntile(0) OVER () FROM orders", SqlError, "greater than zero", 8),
    ("SELECT lag(o_id, o_customer) OVER () FROM orders", UnsupportedSqlError, "offset", 18),
    ("SELECT sum(o_id) OVER (ORDER BY o_id ROWS BETWEEN CURRENT ROW AND 1 PRECEDING) FROM orders", SqlError,
     "current row", None),
    ("SELECT o_id FROM orders ORDER BY o_id LIMIT o_customer", UnsupportedSqlError, "LIMIT", 45),
    ("SELECT o_id FROM orders ORDER BY o_id LIMIT -1", SqlError, "must not be negative", None),
    ("SELECT o_id FROM orders ORDER BY o_id OFFSET o_id", UnsupportedSqlError, "OFFSET", 46),
    ("SELECT o_id FROM orders ORDER BY o_id FETCH FIRST 2 ROWS WITH TIES", UnsupportedSqlError, "WITH TIES", None),
    ("SELECT o_id FROM orders ORDER BY 3 LIMIT 1", SqlError, "position 3", 34),
    ("SELECT DISTINCT o_id FROM orders ORDER BY o_date LIMIT 1", SqlError, "SELECT DISTINCT", 43),
    ("SELECT o_id FROM orders UNION ALL SELECT c_id FROM customers ORDER BY o_id + 1 LIMIT 2", SqlError,
     "UNION", 71),
])
def test_refusals_name_the_construct_and_its_position(sql, error, fragment, column):
    with pytest.raises(error) as info:
        plan(sql)
    assert fragment.lower() in str(info.value).lower(), str(info.value)
    if column is not None:
        assert info.value.location is not None and info.value.location.column == column, str(info.value)


def test_result_tables_of_topk_and_window_views_are_counted_rows():
    from freshview.connectors.postgres.sink import result_shape

    for sql in ("SELECT o_customer, sum(amount) AS s FROM orders GROUP BY o_customer ORDER BY s DESC LIMIT 3",
                "SELECT o_customer, rank() OVER (ORDER BY o_id) AS r FROM orders",
                "SELECT * FROM (SELECT o_customer, o_id, row_number() OVER (PARTITION BY o_customer ORDER BY o_id) "
                "AS rn FROM orders) s WHERE rn <= 2"):
        shape = result_shape(plan(sql))
        assert shape.counted and shape.key == tuple(n for n, _ in shape.columns), sql
