"""Scalar subqueries that are not aggregates: the one row's value, NULL for none, PostgreSQL's error for more.

``d_month_seq = (SELECT DISTINCT d_month_seq FROM date_dim WHERE d_year = 2001 AND d_moy = 1)``,
``(SELECT average_sales FROM avg_sales)``, ``(SELECT x FROM t ORDER BY y LIMIT 1)`` or
``(SELECT t2.x FROM t2 WHERE t2.k = t1.k)`` may return any number of rows.  PostgreSQL's value is
the row's value when there is one, NULL when there is none, and the statement fails with "more than
one row returned by a subquery used as an expression" when the value is used over more than one.

``sql.subqueries`` lowers it as it lowers an aggregate scalar subquery (an aggregate without GROUP
BY cross-joined when uncorrelated; grouped by the correlation columns and LEFT-joined on them when
correlated by equalities, a key with no row padded as over no rows; correlated otherwise, per
distinct outer value, ``sql.magic_sets``), the aggregate being this
module's ``counted``: S's rows R (correlation keys k, then the value x) become one row per key

    C = Aggregate_k(R; n = count(*), v = min(x))

and the subquery's value, computed over each joined row where the query uses it, is
``single_row(n, v)`` (``plan.functions``): v when n = 1 (min of one row is its value, a NULL one
included), NULL when n = 0 (a padded key: n = 0, v = NULL), and an error when n > 1 (PostgreSQL's,
or in the MySQL dialect MariaDB's "Subquery returns more than 1 row").

**Delta rule**: none of its own.  ΔC is the aggregate's (count and the min multiset of each key,
``runtime.operators.aggregate``), the join's delta meets it as it meets any aggregate's, and
``single_row`` is a scalar function evaluated on the rows of the delta that use it (both executors:
``runtime.expressions.arrow``, ``runtime.expressions.spark``).  A step after which a key holds two
rows joins its new row (n = 2) to every outer row of that key, so the view's step fails with
PostgreSQL's message, as PostgreSQL's query over the same rows would; the step is rolled back and
the view keeps its rows of before.  A key with two rows and no outer row reading it changes no
joined row and fails nothing, as in PostgreSQL: ``single_row`` is defined only where it is read
(``plan.functions``' ``where_read``), so ``plan.rewrite.pushdown`` never makes ``x = (SELECT ...)``
a join key computed on the subquery's side, nor moves a condition on the value into that side; it
filters the joined rows.  (One difference: a condition on an uncorrelated subquery alone,
``WHERE (SELECT ...) > 5``, filters the joined rows too, so over an empty outer relation it fails
nothing; PostgreSQL evaluates such a one-time filter before it reads the first outer row.)
"""

from __future__ import annotations

from freshview.plan import nodes as pn
from freshview.plan import typing as ty
from freshview.plan.expr import AggCall, Call, ColumnRef, Expr

# Column types the min multiset orders (refused: PostgreSQL has no order for them, the state would not hold).
_UNORDERED = ("json", "jsonb")


def orderable(t: ty.SqlType) -> bool:
    """Whether a subquery's value of type ``t`` can be kept in ``counted``'s min multiset."""
    return t.kind not in _UNORDERED and t.element is None


def counted(plan: pn.Node, n_keys: int) -> pn.Aggregate:
    """``plan``'s rows (``n_keys`` correlation keys, then the subquery's value) counted per key: the keys,
    then n = count(*) and v = min(value) (module docstring)."""
    assert len(plan.columns) == n_keys + 1, plan.columns
    keys = tuple(ColumnRef(t, i, n) for i, (n, t) in enumerate(plan.columns[:n_keys]))
    name, t = plan.columns[n_keys]
    aggs = (AggCall("count_star", None, ty.INT8), AggCall("min", ColumnRef(t, n_keys, name), t))
    return pn.Aggregate(plan, keys, aggs, tuple(n for n, _ in plan.columns[:n_keys]))


def value(n: Expr, v: Expr, dialect: str) -> Expr:
    """The subquery's value over a joined row, from ``counted``'s n and v (``dialect``: whose error)."""
    return Call(v.type, "single_row", (n, v), dialect)


__all__ = ["counted", "value", "orderable"]
