"""Outer joins and subqueries in the front end: the plans they lower to, and every refusal."""

from __future__ import annotations

import pytest

from freshview.errors import SqlError, UnknownColumnError, UnsupportedSqlError
from freshview.plan import nodes as pn
from freshview.plan.explain import render
from freshview.schema import schema_from_ddl
from freshview.sql import build_plan

TPCH = {
    "region": "r_regionkey INT, r_name TEXT, r_comment TEXT",
    "nation": "n_nationkey INT, n_name TEXT, n_regionkey INT, n_comment TEXT",
    "part": "p_partkey BIGINT, p_name TEXT, p_mfgr TEXT, p_brand TEXT, p_type TEXT, p_size INT, "
            "p_container TEXT, p_retailprice NUMERIC(15,2), p_comment TEXT",
    "supplier": "s_suppkey BIGINT, s_name TEXT, s_address TEXT, s_nationkey INT, s_phone TEXT, "
                "s_acctbal NUMERIC(15,2), s_comment TEXT",
    "partsupp": "ps_partkey BIGINT, ps_suppkey BIGINT, ps_availqty INT, ps_supplycost NUMERIC(15,2), ps_comment TEXT",
    "customer": "c_custkey BIGINT, c_name TEXT, c_address TEXT, c_nationkey INT, c_phone TEXT, "
                "c_acctbal NUMERIC(15,2), c_mktsegment TEXT, c_comment TEXT",
    "orders": "o_orderkey BIGINT, o_custkey BIGINT, o_orderstatus TEXT, o_totalprice NUMERIC(15,2), "
              "o_orderdate DATE, o_orderpriority TEXT, o_clerk TEXT, o_shippriority INT, o_comment TEXT",
    "lineitem": "l_orderkey BIGINT, l_partkey BIGINT, l_suppkey BIGINT, l_linenumber INT, "
                "l_quantity NUMERIC(15,2), l_extendedprice NUMERIC(15,2), l_discount NUMERIC(15,2), "
                "l_tax NUMERIC(15,2), l_returnflag TEXT, l_linestatus TEXT, l_shipdate DATE, l_commitdate DATE, "
                "l_receiptdate DATE, l_shipinstruct TEXT, l_shipmode TEXT, l_comment TEXT",
    "a": "x INT, y INT, s TEXT",
    "b": "x INT, z INT, t TEXT",
}
SCHEMAS = {name: schema_from_ddl(ddl) for name, ddl in TPCH.items()}

# The TPC-H queries that need outer joins or subqueries (ORDER BY / LIMIT dropped: a view is a table).
Q2 = """select s_acctbal, s_name, n_name, p_partkey, p_mfgr, s_address, s_phone, s_comment
from part, supplier, partsupp, nation, region
where p_partkey = ps_partkey and s_suppkey = ps_suppkey and p_size = 15 and p_type like '%BRASS'
  and s_nationkey = n_nationkey and n_regionkey = r_regionkey and r_name = 'EUROPE'
  and ps_supplycost = (select min(ps_supplycost) from partsupp, supplier, nation, region
                       where p_partkey = ps_partkey and s_suppkey = ps_suppkey and s_nationkey = n_nationkey
                         and n_regionkey = r_regionkey and r_name = 'EUROPE')"""
Q4 = """select o_orderpriority, count(*) as order_count from orders
where o_orderdate >= date '1993-07-01' and o_orderdate < date '1993-07-01' + interval '3' month
  and exists (select * from lineitem where l_orderkey = o_orderkey and l_commitdate < l_receiptdate)
group by o_orderpriority"""
Q13 = """select c_count, count(*) as custdist
from (select c_custkey, count(o_orderkey) from customer left outer join orders
      on c_custkey = o_custkey and o_comment not like '%special%requests%' group by c_custkey)
     as c_orders (c_custkey, c_count)
group by c_count"""
Q16 = """select p_brand, p_type, p_size, count(ps_suppkey) as supplier_cnt
from partsupp, part
where p_partkey = ps_partkey and p_brand <> 'Brand#45' and p_type not like 'MEDIUM POLISHED%'
  and p_size in (49, 14, 23, 45, 19, 3, 36, 9)
  and ps_suppkey not in (select s_suppkey from supplier where s_comment like '%Customer%Complaints%')
group by p_brand, p_type, p_size"""
Q17 = """select sum(l_extendedprice) / 7.0 as avg_yearly from lineitem, part
where p_partkey = l_partkey and p_brand = 'Brand#23' and p_container = 'MED BOX'
  and l_quantity < (select 0.2 * avg(l_quantity) from lineitem where l_partkey = p_partkey)"""
Q18 = """select c_name, c_custkey, o_orderkey, o_orderdate, o_totalprice, sum(l_quantity) as qty
from customer, orders, lineitem
where o_orderkey in (select l_orderkey from lineitem group by l_orderkey having sum(l_quantity) > 300)
  and c_custkey = o_custkey and o_orderkey = l_orderkey
group by c_name, c_custkey, o_orderkey, o_orderdate, o_totalprice"""
Q20 = """select s_name, s_address from supplier, nation
where s_suppkey in (select ps_suppkey from partsupp
                    where ps_partkey in (select p_partkey from part where p_name like 'forest%')
                      and ps_availqty > (select 0.5 * sum(l_quantity) from lineitem
                                         where l_partkey = ps_partkey and l_suppkey = ps_suppkey
                                           and l_shipdate >= date '1994-01-01'
                                           and l_shipdate < date '1994-01-01' + interval '1' year))
  and s_nationkey = n_nationkey and n_name = 'CANADA'"""
Q21 = """select s_name, count(*) as numwait from supplier, lineitem l1, orders, nation
where s_suppkey = l1.l_suppkey and o_orderkey = l1.l_orderkey and o_orderstatus = 'F'
  and l1.l_receiptdate > l1.l_commitdate
  and exists (select * from lineitem l2 where l2.l_orderkey = l1.l_orderkey and l2.l_suppkey <> l1.l_suppkey)
  and not exists (select * from lineitem l3 where l3.l_orderkey = l1.l_orderkey
                  and l3.l_suppkey <> l1.l_suppkey and l3.l_receiptdate > l3.l_commitdate)
  and s_nationkey = n_nationkey and n_name = 'SAUDI ARABIA'
group by s_name"""
Q22 = """select cntrycode, count(*) as numcust, sum(c_acctbal) as totacctbal
from (select substring(c_phone from 1 for 2) as cntrycode, c_acctbal from customer
      where substring(c_phone from 1 for 2) in ('13', '31', '23', '29', '30', '18', '17')
        and c_acctbal > (select avg(c_acctbal) from customer where c_acctbal > 0.00
                         and substring(c_phone from 1 for 2) in ('13', '31', '23', '29', '30', '18', '17'))
        and not exists (select * from orders where o_custkey = c_custkey)) as custsale
group by cntrycode"""
TPCH_QUERIES = {"q2": Q2, "q4": Q4, "q13": Q13, "q16": Q16, "q17": Q17, "q18": Q18, "q20": Q20, "q21": Q21, "q22": Q22}


class Catalog:
    def __init__(self, views=None):
        self.views = views or {}

    def relation_columns(self, name):
        if name in SCHEMAS:
            return tuple((c.name, c.type) for c in SCHEMAS[name].columns), False
        if name in self.views:
            return self.views[name].columns, True
        return None


def plan(sql, views=None):
    return build_plan(sql, Catalog(views))


def nodes(p, kind):
    return [n for n in pn.walk(p) if isinstance(n, kind)]


@pytest.mark.parametrize("name", sorted(TPCH_QUERIES))
def test_tpch_subquery_shapes_build(name):
    p = plan(TPCH_QUERIES[name])
    assert p.columns
    assert nodes(p, pn.Join), render(p)


def _below_projects(n):
    while isinstance(n, pn.Project):
        n = n.input
    return n


def test_left_join_is_inner_join_plus_padded_antijoin():
    p = plan("SELECT a.x, b.z FROM a LEFT JOIN b ON a.x = b.x AND b.z > 1")
    union = nodes(p, pn.UnionAll)[0]
    inner, padded = union.parts
    assert isinstance(_below_projects(inner), pn.Join)
    assert isinstance(padded, pn.Project) and [str(e) for e in padded.exprs[-1:]] == ["NULL"]
    assert len(nodes(padded, pn.Negate)) == 1
    # the ON condition on the null-supplying side filters that side below the join
    assert "Filter >($1(z), 1)" in render(inner)


def test_where_on_the_null_supplied_side_filters_it_only_in_the_matched_branch():
    """WHERE b.z IS NULL over a LEFT JOIN: b's rows are filtered in the matched branch; in the
    NULL-padded branch the conjunct is true (b.z is NULL there), so every unmatched a row stays."""
    p = plan("SELECT a.x FROM a LEFT JOIN b ON a.x = b.x WHERE b.z IS NULL")
    matched, padded = nodes(p, pn.UnionAll)[0].parts
    assert "Filter is_null($1(z))" in render(matched), render(p)
    assert not nodes(padded, pn.Filter), render(p)
    anti = nodes(padded, pn.Negate)[0]
    assert "Scan source b" in render(anti)


def test_where_no_padded_row_passes_makes_the_left_join_inner():
    """Over the padded rows b.z = 1 is NULL: that branch (the anti-join and its state) is dropped."""
    p = plan("SELECT a.x FROM a LEFT JOIN b ON a.x = b.x WHERE b.z = 1")
    assert not nodes(p, pn.UnionAll) and not nodes(p, pn.Negate), render(p)
    assert len(nodes(p, pn.Join)) == 1 and "Filter =($1(z), 1)" in render(p)


def test_on_condition_on_the_preserved_side_is_a_residual_not_a_filter_below():
    p = plan("SELECT a.x, b.z FROM a LEFT JOIN b ON a.x = b.x AND a.y > 1")
    matched, padded = nodes(p, pn.UnionAll)[0].parts
    assert "Filter >($1(y), 1)" in render(matched)  # matched rows must pass a.y > 1 ...
    every_a = padded.input.parts[0]  # ... but every a row is kept in the padded part
    assert not nodes(every_a, pn.Filter), render(p)


def test_right_and_full_joins_keep_the_column_order():
    for kind in ("RIGHT", "FULL"):
        p = plan(f"SELECT a.y, b.z, a.s, b.t FROM a {kind} JOIN b ON a.x = b.x")
        assert [(n, t.kind) for n, t in p.columns] == [("y", "int4"), ("z", "int4"), ("s", "text"), ("t", "text")]


def test_exists_and_in_are_semijoins_on_distinct_keys():
    p = plan("SELECT x FROM a WHERE EXISTS (SELECT 1 FROM b WHERE b.x = a.x) AND y IN (SELECT z FROM b)")
    assert len(nodes(p, pn.Distinct)) == 2 and not nodes(p, pn.Negate), render(p)


def test_not_exists_with_a_residual_joins_back_null_safely():
    p = plan("SELECT x FROM a WHERE NOT EXISTS (SELECT 1 FROM b WHERE b.x = a.x AND b.z <> a.y)")
    text = render(p)
    assert "Negate" in text and "is_null($0(x)) = is_null($0(x))" in text and "<>(" in text, text


def test_not_in_checks_nulls_on_both_sides():
    text = render(plan("SELECT x FROM a WHERE y NOT IN (SELECT z FROM b)"))
    assert text.count("is_null") >= 3 and "Negate" in text, text


def test_correlated_count_pads_with_zero():
    p = plan("SELECT x, (SELECT COUNT(*) FROM b WHERE b.x = a.x) AS n FROM a")
    padded = [n for n in nodes(p, pn.Project) if n.exprs and str(n.exprs[-1]) == "0"]
    assert padded, render(p)


def test_correlated_sum_pads_with_null_and_coalesce_with_its_default():
    p = plan("SELECT x, (SELECT COALESCE(SUM(z), 7) FROM b WHERE b.x = a.x) AS n FROM a")
    assert any("coalesce(NULL, 7)" in str(n.exprs[-1]) for n in nodes(p, pn.Project) if n.exprs), render(p)


def test_uncorrelated_scalar_is_a_cross_join_with_one_row():
    p = plan("SELECT x FROM a WHERE y > (SELECT AVG(z) FROM b)")
    joins = nodes(p, pn.Join)
    assert len(joins) == 1 and not joins[0].left_keys and isinstance(joins[0].right.input, pn.Aggregate) \
        or "Aggregate group by ()" in render(p)


def test_scalar_in_having_joins_after_the_aggregate():
    p = plan("SELECT x, COUNT(*) AS n FROM a GROUP BY x HAVING COUNT(*) > (SELECT COUNT(*) FROM b)")
    f = nodes(p, pn.Filter)[0]
    assert isinstance(f.input, pn.Join) and isinstance(f.input.left, pn.Aggregate), render(p)


@pytest.mark.parametrize("sql, keys", [
    ("SELECT x, (SELECT z FROM b WHERE b.x = a.x) AS v FROM a", 1),
    ("SELECT x FROM a WHERE y = (SELECT DISTINCT z FROM b WHERE t = 'q')", 0),
    ("SELECT x, (SELECT z FROM b ORDER BY z LIMIT 1) AS v FROM a", 0),
    ("SELECT x, COUNT(*) AS n FROM a GROUP BY x HAVING COUNT(*) > (SELECT z FROM b WHERE b.x = a.x)", 1),
    ("SELECT x, (SELECT DISTINCT z FROM b WHERE b.x > a.x AND b.t = a.s) AS v FROM a", 2),  # a magic set
])
def test_a_scalar_subquery_that_is_not_an_aggregate_counts_its_rows_per_key(sql, keys):
    # sql.single_row: its rows counted per correlation key (n, min of the value), the value single_row(n, v)
    p = plan(sql)
    counted = {n for n in nodes(p, pn.Aggregate) if [a.func for a in n.aggs] == ["count_star", "min"]}  # (shared)
    assert len(counted) == 1 and len(next(iter(counted)).group) == keys, render(p)
    assert "single_row:postgres(" in render(p), render(p)


def test_view_over_a_view_with_an_outer_join():
    inner = plan("SELECT a.x, b.z FROM a LEFT JOIN b ON a.x = b.x")

    class V:
        columns = inner.columns

    p = plan("SELECT x, COUNT(z) AS n FROM v GROUP BY x", {"v": V})
    assert nodes(p, pn.Scan)[0].is_view


@pytest.mark.parametrize("sql, error, fragment, column", [
    ("SELECT x FROM a WHERE y > 1 OR EXISTS (SELECT 1 FROM b WHERE b.x = a.x GROUP BY b.x)", UnsupportedSqlError,
     "GROUP BY in a correlated IN/EXISTS subquery", 72),
    ("SELECT x, COUNT(*) AS n FROM a GROUP BY x HAVING x IN (SELECT z FROM b)", UnsupportedSqlError,
     "IN (subquery) in the SELECT list or HAVING of an aggregating query", 46),
    ("SELECT a.x FROM a LEFT JOIN b ON EXISTS (SELECT 1 FROM b)", UnsupportedSqlError,
     "EXISTS (subquery) in JOIN conditions", 34),
    ("SELECT x, COUNT(*) AS n FROM a GROUP BY x HAVING COUNT(*) > (SELECT z FROM b WHERE b.x > a.x)",
     UnsupportedSqlError, "correlated by a non-equality in the SELECT list or HAVING of an aggregating", 61),
    ("SELECT x FROM a WHERE y = (SELECT j FROM (SELECT '{}'::jsonb AS j) AS q)", UnsupportedSqlError,
     "a scalar subquery that is not an aggregate of type jsonb", 27),
    ("SELECT x FROM a WHERE y = (SELECT z FROM b WHERE b.x = a.x ORDER BY z LIMIT 1)", UnsupportedSqlError,
     "LIMIT in a correlated scalar subquery that is not an aggregate", None),
    ("SELECT x FROM a WHERE y = (SELECT MAX(z) FROM b WHERE b.x = a.x GROUP BY t)", UnsupportedSqlError,
     "GROUP BY in a correlated scalar subquery that is not an aggregate", None),
    ("SELECT x FROM a WHERE y = (SELECT z + a.y FROM b WHERE b.x = a.x)", UnsupportedSqlError,
     "scalar subquery that is not an aggregate whose value uses outer columns", 27),
    ("SELECT x FROM a WHERE y = (SELECT * FROM b)", SqlError, "subquery must return only one column", 27),
    ("SELECT x, COUNT(*) AS n FROM a GROUP BY x HAVING COUNT(*) > (SELECT COUNT(*) FROM b WHERE b.x > a.x)",
     UnsupportedSqlError, "correlated by a non-equality in the SELECT list or HAVING of an aggregating", 61),
    ("SELECT x FROM a WHERE EXISTS (SELECT b.x FROM b WHERE b.x = a.x GROUP BY b.x)", UnsupportedSqlError,
     "GROUP BY in a correlated", None),
    ("SELECT x FROM a WHERE EXISTS (SELECT MAX(b.z) FROM b WHERE b.x = a.x)", UnsupportedSqlError,
     "aggregate in a correlated", None),
    ("SELECT x FROM a WHERE EXISTS (SELECT a.y FROM b WHERE b.x = a.x)", UnsupportedSqlError,
     "outside the subquery's WHERE", 38),
    ("SELECT x, COUNT(*) AS n FROM a GROUP BY x HAVING COUNT(*) > (SELECT COUNT(*) FROM b WHERE b.x = a.y)",
     SqlError, "column 'y' must appear in the GROUP BY clause", 97),
    ("SELECT x, (SELECT SUM(a.y) FROM b WHERE b.x = a.x) AS s FROM a", UnsupportedSqlError,
     "an aggregate of outer columns inside a scalar subquery", 19),
    ("SELECT x, (SELECT SUM(z) + b.z FROM b WHERE b.x = a.x) AS s FROM a", SqlError,
     "column 'z' must appear in the GROUP BY clause", 28),
    ("SELECT x, (SELECT SUM(z) + a.y + (SELECT 1) FROM b WHERE b.x = a.x) AS s FROM a", UnsupportedSqlError,
     "a subquery or window function in a scalar subquery's value", None),
    ("SELECT x FROM a WHERE y = (SELECT MAX(z), MIN(z) FROM b)", SqlError, "only one column", 27),
    ("SELECT x FROM a WHERE y IN (SELECT z, t FROM b)", SqlError, "too many columns", None),
    ("SELECT a.x FROM a LEFT JOIN b ON a.x = (SELECT MAX(z) FROM b)", UnsupportedSqlError,
     "scalar subquery in JOIN conditions", None),
    ("SELECT x FROM a LEFT JOIN b USING (x, x)", SqlError, "column name 'x' appears more than once in USING", 39),
    ("SELECT x FROM a JOIN b USING (s)", SqlError, "column 's' specified in USING clause does not exist in "
                                                   "right table", 31),
    ("SELECT * FROM a JOIN b USING (x) JOIN b b2 USING (x)", SqlError, "two columns named", None),
    ("SELECT x FROM a JOIN b USING (x) JOIN b b2 ON b2.z = a.y", UnknownColumnError, "is ambiguous", 8),
    ("SELECT x FROM a JOIN (SELECT t AS x FROM b) AS c USING (x)", SqlError,
     "JOIN/USING types integer and text cannot be matched", 57),
    ("SELECT SUM((SELECT MAX(z) FROM b)) AS s FROM a", UnsupportedSqlError, "scalar subquery in an aggregate's argument", 12),
    ("SELECT x FROM a GROUP BY x HAVING EXISTS (SELECT 1 FROM b)", UnsupportedSqlError,
     "EXISTS (subquery) in the SELECT list or HAVING", 35),
    ("SELECT a.x FROM a, b RIGHT JOIN lineitem ON b.x = l_partkey", UnsupportedSqlError,
     "RIGHT JOIN after a comma-separated FROM list", 22),
    ("SELECT a.x FROM a, b LEFT JOIN lineitem ON a.x = l_partkey", SqlError, "invalid reference", None),
])
def test_refusals_name_the_construct_and_its_position(sql, error, fragment, column):
    with pytest.raises(error) as info:
        plan(sql)
    assert fragment in str(info.value), str(info.value)
    assert info.value.location is not None, str(info.value)
    if column is not None:
        assert info.value.location.column == column, str(info.value)


def test_the_circuit_of_an_outer_join_is_readable():
    from freshview.circuit import incrementalize
    from freshview.circuit.nodes import render as render_circuit

    text = render_circuit(incrementalize("v", plan("SELECT a.x, b.z FROM a LEFT JOIN b ON a.x = b.x")))
    assert "Negate" in text and "UnionAll" in text and text.count("⋈ Join") == 2 and "Σ Aggregate" in text, text


def test_a_scalar_subquery_column_is_named_as_postgresql_names_it():
    p = plan("SELECT x, (SELECT MAX(z) FROM b), (SELECT COUNT(*) AS n FROM b WHERE b.x = a.x) FROM a")
    assert [n for n, _ in p.columns] == ["x", "max", "n"]


# ---------------------------------------------------------------------- JOIN ... USING / NATURAL JOIN
def _names(p):
    return [n for n, _ in p.columns]


def test_using_puts_the_merged_columns_first_then_left_then_right():
    assert _names(plan("SELECT * FROM a JOIN b USING (x)")) == ["x", "y", "s", "z", "t"]
    assert _names(plan("SELECT * FROM b NATURAL LEFT JOIN a")) == ["x", "z", "t", "y", "s"]
    assert _names(plan("SELECT b.*, y FROM a JOIN b USING (x)")) == ["x", "z", "t", "y"]


@pytest.mark.parametrize("kind, merged", [
    ("", "$0(x)"), ("LEFT", "$0(x)"), ("RIGHT", "$1(x)"), ("FULL", "coalesce($0(x), $1(x))")])
def test_the_merged_column_is_the_left_the_right_or_their_coalesce(kind, merged):
    p = plan(f"SELECT x, a.x AS ax, b.x AS bx FROM a {kind} JOIN b USING (x)")
    assert isinstance(p, pn.Project) and str(p.exprs[0]) == merged, render(p)
    assert [str(e) for e in p.exprs[1:]] == ["$0(x)", "$1(x)"], render(p)


def test_using_is_an_equi_join_and_a_where_on_the_merged_column_is_pushed_down():
    p = plan("SELECT z FROM a JOIN b USING (x) WHERE x > 3")
    join = nodes(p, pn.Join)[0]
    assert join.left_keys and join.right_keys, render(p)
    assert "Filter >($0(x), 3)" in render(join.left), render(p)


def test_natural_join_without_common_columns_is_a_cross_join():
    p = plan("SELECT * FROM a NATURAL JOIN region")
    assert _names(p) == ["x", "y", "s", "r_regionkey", "r_name", "r_comment"]
    assert not nodes(p, pn.Join)[0].left_keys


# ---------------------------------------------------------------------- IN / EXISTS as values (mark joins)
def test_an_or_of_in_is_a_mark_join_then_a_filter():
    p = plan("SELECT x FROM a WHERE y = 1 OR x IN (SELECT z FROM b)")
    # The mark join's five parts (TRUE / NULL / FALSE for a non-NULL x, NULL / FALSE for a NULL x) each
    # carry their mark as a constant; pushdown moves the OR into each part with the mark substituted.
    text = render(p)
    assert isinstance(p, pn.UnionAll) and len(p.parts) == 5, text
    for mark in ("True", "NULL", "False"):
        assert f"or(=($1(y), 1), {mark})" in text, text


def test_exists_in_the_select_list_is_a_boolean_column_never_null():
    p = plan("SELECT x, EXISTS (SELECT 1 FROM b WHERE b.x = a.x) AS e FROM a")
    assert p.columns[1][0] == "e" and p.columns[1][1].kind == "bool"
    marks = nodes(p, pn.UnionAll)[0]
    assert [str(part.exprs[-1]) for part in marks.parts] == ["True", "False"], render(p)


def test_a_where_conjunct_is_still_a_semijoin_not_a_mark():
    assert "__mark" not in render(plan("SELECT x FROM a WHERE x IN (SELECT z FROM b) AND y > 1"))


# ---------------------------------------------------------------------- correlated scalars after GROUP BY
def test_correlated_scalar_in_having_is_left_joined_after_the_aggregate_on_the_group_column():
    p = plan("SELECT x, SUM(y) AS s FROM a GROUP BY x HAVING SUM(y) > (SELECT SUM(z) FROM b WHERE b.x = a.x)")
    # A LEFT join on the GROUP BY column; the HAVING comparison rejects its NULL-padded rows, so
    # pushdown leaves only the matched part: an inner join of the two aggregates.
    join = nodes(p, pn.Join)[0]
    assert isinstance(join.left, pn.Aggregate), render(p)
    assert [str(k) for k in join.left_keys] == ["$0(x)"], render(p)


def test_a_value_using_an_outer_column_is_computed_outside_the_subquery():
    p = plan("SELECT x, (SELECT COUNT(*) * a.y FROM b WHERE b.x = a.x) AS m FROM a")
    assert "__a0" in str(p.exprs[1]) and "(y)" in str(p.exprs[1]), render(p)
    assert any(str(n.exprs[-1]) == "0" for n in nodes(p, pn.Project) if n.exprs), render(p)  # COUNT pads 0
