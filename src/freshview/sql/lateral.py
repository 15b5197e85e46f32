"""``LATERAL (SELECT ...)`` in FROM: a subquery over the FROM items before it, decorrelated by a magic set.

``FROM L, LATERAL (S) AS s`` (or ``CROSS JOIN LATERAL``, ``LEFT JOIN LATERAL
... ON ...``) runs S once per row of L.  As for scalar subqueries correlated
by non-equalities (``sql.magic_sets``), S is computed once per distinct value
of the outer columns it reads, over a placeholder for those values:

    D  = Distinct(π_o(L))          o: the columns of L that S reads (anywhere in S)
    S' = S with o read from D, D × S's FROM, D's columns output first
         (and added to S's GROUP BY when S aggregates)
    L ⋈_{o ≐ D.o} S'               ≐: null-safe; LEFT JOIN LATERAL: the left join, NULL-padded

An aggregate without GROUP BY gives one row per outer row even over no rows:
its join is a left join padded with the value over no rows (COUNT 0, the
others NULL), whatever the join's keyword, and its ON must be TRUE.  The
columns of D stay out of the scope (``SELECT *`` does not show them).
Refused: LIMIT/OFFSET, set operations and WITH inside the LATERAL
subquery, RIGHT/FULL JOIN LATERAL (PostgreSQL refuses them too), and
outer references in its nested subqueries.  **Delta rule**: none of its own
(Distinct, the keyless join of D with S's rows, Aggregate, the join back).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlglot import exp

from freshview.errors import UnsupportedSqlError
from freshview.plan import nodes as pn
from freshview.plan.expr import Expr
from freshview.plan.rewrite.joins import empty_row, refs
from freshview.sql.magic_sets import plan_over, to_holder
from freshview.sql.bind_expr import ExprBinder, FromItem, Scope, ScopeColumn
from freshview.sql.parse import locate

if TYPE_CHECKING:
    from freshview.sql.context import QueryContext


def lateral_item(qb: "QueryContext", r: exp.Lateral, before: list[FromItem], join: exp.Join | None) -> FromItem:
    """The FROM item of ``r`` (offset 0; the caller places it), given the items ``before`` it (wide offsets)."""
    sub = r.this
    query = sub.this if isinstance(sub, exp.Subquery) else sub
    alias_node = r.args.get("alias") or (sub.args.get("alias") if isinstance(sub, exp.Subquery) else None)
    if not isinstance(query, exp.Select):
        raise qb.unsupported(r, "LATERAL over anything but a SELECT (a set operation, a function)", "LATERAL")
    if alias_node is None or not alias_node.name:
        raise UnsupportedSqlError("a LATERAL subquery must have an alias", locate(r, qb.sql, "LATERAL"), qb.sql)
    for key, what in (("limit", "LIMIT"), ("offset", "OFFSET"), ("fetch", "FETCH"), ("with_", "WITH")):
        if query.args.get(key) is not None:
            raise qb.unsupported(query.args[key], f"{what} in a LATERAL subquery", what)
    side = ((join.args.get("side") or "") if join is not None else "").lower()
    if side in ("right", "full"):
        raise qb.unsupported(join, f"{side.upper()} JOIN LATERAL (the subquery reads the left side)", side.upper())
    outer_scope = Scope([ScopeColumn(it.relation(i), n, t, it.offset + i) for it in before
                         for i, (n, t) in enumerate(it.node.columns) if i >= it.hidden])
    inner_items = qb.from_items(query)
    inner = Scope([ScopeColumn(it.relation(i), n, t, i) for it in inner_items
                   for i, (n, t) in enumerate(it.node.columns)])
    holder_name = f"__lateral_{alias_node.name.lower()}"
    binder = ExprBinder(outer_scope, qb.sql, None, "a LATERAL subquery", qb.dialect)
    rewritten = query.copy()
    texts: list[str] = []
    outer_exprs: list[Expr] = []
    to_holder(qb, rewritten, lambda col: not inner.resolve(col.name, col.table or None) and bool(
        outer_scope.resolve(col.name, col.table or None)), binder, holder_name, texts, outer_exprs)
    if not texts:  # reads nothing of the items before it: an ordinary subquery in FROM
        plan = qb.query(query)
        if alias_node.columns:
            plan = qb.rename_columns(plan, alias_node, r)
        return FromItem(alias_node.name, plan, 0)
    keys = [exp.column(f"__o{j}", table=holder_name) for j in range(len(texts))]
    aggregated = query.args.get("group") is not None or any(
        isinstance(n, exp.AggFunc) for e in query.expressions for n in e.walk())
    one_row = aggregated and query.args.get("group") is None
    if one_row and query.args.get("having") is not None:
        raise qb.unsupported(query.args["having"], "HAVING in a LATERAL aggregate without GROUP BY", "HAVING")
    on = join.args.get("on") if join is not None else None
    if one_row and on is not None and not (isinstance(on, exp.Boolean) and on.this is True):
        raise qb.unsupported(on, "an ON condition other than TRUE for a LATERAL aggregate without GROUP BY")
    holder_table = exp.Table(this=exp.to_identifier(holder_name))
    if rewritten.args.get("from_") is None:  # LATERAL (SELECT a.x + 1): one row per outer value
        rewritten.set("from_", exp.From(this=holder_table))
    else:
        rewritten = rewritten.join(holder_table, join_type="cross")
    rewritten.set("expressions", [exp.alias_(k.copy(), f"__k{j}") for j, k in enumerate(keys)]
                  + list(rewritten.expressions))
    if aggregated:
        group = rewritten.args.get("group")
        rewritten.set("group", exp.Group(expressions=[k.copy() for k in keys]
                                         + (list(group.expressions) if group is not None else [])))
    holder = pn.OuterRows(len(before), tuple((f"__o{j}", e.type) for j, e in enumerate(outer_exprs)))
    plan = plan_over(qb, holder_name, holder, rewritten)
    n = len(keys)
    if alias_node.columns:
        names = [c.name for c in alias_node.columns]
        if len(names) > len(plan.columns) - n:
            raise qb.unsupported(r, "more column names than the LATERAL subquery has")
        names = [nm for nm, _ in plan.columns[:n]] + names + [nm for nm, _ in plan.columns[n + len(names):]]
        plan = pn.Project(plan, refs(plan.columns), tuple(names))
    pad = _empty_row(qb, plan, n, r) if one_row else None
    return FromItem(alias_node.name, plan, 0, hidden=n, lateral=(holder, tuple(outer_exprs), pad))


def _empty_row(qb: "QueryContext", plan: pn.Node, n_keys: int, where: exp.Expression) -> tuple[Expr, ...]:
    row = empty_row(plan, n_keys)
    if row is None:
        raise qb.unsupported(where, "a LATERAL aggregate whose value uses an outer column outside an aggregate",
                             "LATERAL")
    return row


__all__ = ["lateral_item"]
