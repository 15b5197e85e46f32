"""The 99 TPC-DS queries as freshview views (texts in ``queries.sql``, provenance in its header).

``QUERIES`` maps ``"q1"`` .. ``"q99"`` to the query text as committed (the
specification's text in PostgreSQL syntax, with the marked fixes).  ``VIEWS``
is what freshview registers: the same text with the changes a result table
needs, listed in ``VIEW_FIXES`` (a result table's columns need unique names,
so the queries that return two columns of the same name alias them; q36, q70
and q86 name an output column inside an ORDER BY expression, which
PostgreSQL rejects).

Shared by the differential tests (small shaped data, checked against
PostgreSQL) and the benchmark suite (``tpcgen-cli`` data at a scale factor).
"""

from __future__ import annotations

import re
from pathlib import Path

_TEXT = (Path(__file__).with_name("queries.sql")).read_text()


def _split(text: str) -> dict[str, str]:
    parts = re.split(r"^-- (q\d+)\n", text, flags=re.M)
    return {name: body.strip().rstrip(";").strip() for name, body in zip(parts[1::2], parts[2::2])}


QUERIES: dict[str, str] = _split(_TEXT)

# Textual replacements (old, new) per query: aliases for duplicate output column names (PostgreSQL's
# CREATE VIEW refuses them too: "column ... specified more than once").
_I = "\n       "
VIEW_FIXES: dict[str, list[tuple[str, str]]] = {
    "q13": [("Avg(ss_quantity),", "Avg(ss_quantity) AS avg_quantity,"),
            ("Avg(ss_ext_sales_price),", "Avg(ss_ext_sales_price) AS avg_sales_price,"),
            ("Avg(ss_ext_wholesale_cost),", "Avg(ss_ext_wholesale_cost) AS avg_wholesale_cost,"),
            ("Sum(ss_ext_wholesale_cost)\n", "Sum(ss_ext_wholesale_cost) AS sum_wholesale_cost\n")],
    "q39": [(_I.join(f"inv2.{c}," for c in ("w_warehouse_sk", "i_item_sk", "d_moy", "mean")) + _I + "inv2.cov\n",
             _I.join(f"inv2.{c} AS {c}_2," for c in ("w_warehouse_sk", "i_item_sk", "d_moy", "mean"))
             + _I + "inv2.cov AS cov_2\n")],
    "q64": [(_I.join(f"cs2.{c}," for c in ("s1", "s2", "s3", "syear")) + _I + "cs2.cnt\n",
             _I.join(f"cs2.{c} AS {c}_2," for c in ("s1", "s2", "s3", "syear")) + _I + "cs2.cnt AS cnt_2\n")],
    "q14": [("Sum(sales),", "Sum(sales) AS sum_sales,"),
            ("Sum(number_sales)\n", "Sum(number_sales) AS sum_number_sales\n")],
    # An output column's name is not in scope inside an ORDER BY expression (PostgreSQL: 'column
    # "lochierarchy" does not exist'): the CASE spells the expression it names.
    **{q: [("WHEN lochierarchy = 0 THEN", f"WHEN Grouping({a}) + Grouping({b}) = 0 THEN")]
       for q, a, b in (("q36", "i_category", "i_class"), ("q70", "s_state", "s_county"),
                       ("q86", "i_category", "i_class"))},
}


def view_sql(name: str) -> str:
    sql = QUERIES[name]
    for old, new in VIEW_FIXES.get(name, []):
        assert old in sql, (name, old)
        sql = sql.replace(old, new, 1)
    return sql


VIEWS: dict[str, str] = {name: view_sql(name) for name in QUERIES}

# PostgreSQL before 16 wants an alias on every subquery in FROM (freshview, like 16+, does not).
POSTGRES_15_FIXES: dict[str, list[tuple[str, str]]] = {
    "q2": [("FROM   web_sales)\n", "FROM   web_sales) x\n")],
    "q14": [("d3.d_year BETWEEN 1999 AND 1999 + 2)\n         WHERE", "d3.d_year BETWEEN 1999 AND 1999 + 2) z\n         WHERE")],
    "q23": [("GROUP  BY c_customer_sk)),", "GROUP  BY c_customer_sk) x),"),
            ("FROM   best_ss_customer)) LIMIT 100", "FROM   best_ss_customer)) y LIMIT 100")]}


def postgres_15_sql(sql: str, name: str) -> str:
    """``sql`` (view ``name``'s text) with the aliases PostgreSQL 15 wants."""
    for old, new in POSTGRES_15_FIXES.get(name, []):
        assert old in sql, (name, old)
        sql = sql.replace(old, new)
    return sql
