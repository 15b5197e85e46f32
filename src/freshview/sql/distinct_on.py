"""``SELECT DISTINCT ON (k, ...) ... ORDER BY k, ..., o ...``: the first row of each k, as a window.

PostgreSQL keeps, for each distinct value of the DISTINCT ON expressions,
the first row in ORDER BY order.  That is the row numbered 1 by
``ROW_NUMBER() OVER (PARTITION BY k ORDER BY <the ORDER BY>)``, so the query
is planned as its SELECT with that window column added (``sql.window``, the
existing ``Window`` node and its partition-recompute operator), filtered to
row number 1, the column dropped.  No new operator, no second copy of the
top-k rule: a change recomputes the partitions (values of k) it touches.

DISTINCT ON and ORDER BY may name output columns (aliases, positions), as in
PostgreSQL; they are replaced by their expressions first.  The leftmost
ORDER BY expressions must be the DISTINCT ON ones (PostgreSQL's rule).  Rows
equal in every ORDER BY key are ordered by the window's tie rule (all
columns, ``plan.nodes.TopK``), where PostgreSQL picks any of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlglot import exp

from freshview.errors import SqlError
from freshview.plan import nodes as pn
from freshview.plan import typing as ty
from freshview.plan.expr import Call, ColumnRef, Literal
from freshview.sql.parse import locate

if TYPE_CHECKING:
    from freshview.sql.context import QueryContext

RN = "__fv_row_number"


def distinct_on(qb: "QueryContext", node: exp.Select) -> pn.Node:
    """The plan of ``node``, a SELECT DISTINCT ON (module docstring)."""
    for key, what in (("limit", "LIMIT"), ("offset", "OFFSET"), ("fetch", "FETCH")):
        if node.args.get(key) is not None:
            raise qb.unsupported(node.args[key], f"DISTINCT ON with {what}", what)
    selects = node.expressions
    aliases = {s.alias: s.this for s in selects if isinstance(s, exp.Alias)}

    def resolve(e: exp.Expression) -> exp.Expression:
        if isinstance(e, exp.Literal) and not e.is_string:
            pos = int(e.this)
            if not 1 <= pos <= len(selects) or isinstance(selects[pos - 1], exp.Star):
                raise SqlError(f"position {pos} is not in select list", locate(e, qb.sql), qb.sql)
            target = selects[pos - 1]
            return (target.this if isinstance(target, exp.Alias) else target).copy()
        if isinstance(e, exp.Column) and not e.table and e.name in aliases:
            return aliases[e.name].copy()
        return e.copy()

    on = [resolve(e) for e in node.args["distinct"].args["on"].expressions]
    order_node = node.args.get("order")
    ordered = []
    for o in (order_node.expressions if order_node is not None else []):
        copy = o.copy()
        copy.set("this", resolve(o.this))
        ordered.append(copy)
    lead = {e.sql(dialect="postgres") for e in on}
    if ordered and {o.this.sql(dialect="postgres") for o in ordered[:len(on)]} != lead:
        raise SqlError("SELECT DISTINCT ON expressions must match initial ORDER BY expressions",
                       locate(order_node, qb.sql, "ORDER"), qb.sql)
    window = exp.Window(this=exp.RowNumber(), partition_by=on,
                        order=exp.Order(expressions=ordered) if ordered else None)
    inner = node.copy()
    inner.set("distinct", None)
    inner.set("order", None)
    inner.set("expressions", [s.copy() for s in selects] + [exp.alias_(window, RN)])
    if qb.view_select is node:
        qb.view_select = inner
    plan = qb.select(inner)
    rn = len(plan.columns) - 1
    first = pn.Filter(plan, Call(ty.BOOL, "=", (ColumnRef(plan.columns[rn][1], rn, RN),
                                                Literal(plan.columns[rn][1], 1))))
    return pn.Project(first, tuple(ColumnRef(t, i, n) for i, (n, t) in enumerate(plan.columns[:rn])),
                      tuple(n for n, _ in plan.columns[:rn]))


__all__ = ["distinct_on"]
