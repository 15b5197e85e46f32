"""Parenthesised joins in FROM: ``(a JOIN b ON ...) FULL JOIN (c JOIN d ON ...) ON ...``, ``(t1 CROSS JOIN t2)``.

The parenthesised part is one FROM item of the query around it: its own
items joined by its own ON conditions (``sql.join_tree``, the same steps as a
FROM clause), columns in FROM order, each column still named by the alias of
the item it comes from (``a.x`` reaches it from outside), or, when the
parentheses carry an alias (``(a JOIN b ON ...) AS j``), by that alias only,
as PostgreSQL hides the inner names then.  Nesting is recursion.  It adds
no operator: the join kinds it uses are those of a FROM clause.
``JOIN ... USING`` / ``NATURAL JOIN`` inside parentheses are refused (the
merged columns would need names of their own).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlglot import exp

from freshview.errors import SqlError, UnsupportedSqlError
from freshview.plan import nodes as pn
from freshview.plan.expr import ColumnRef, conjuncts
from freshview.plan.rewrite.factor_or import factor_common_conjuncts
from freshview.sql.bind_expr import ExprBinder, FromItem, Scope, ScopeColumn
from freshview.sql.join_tree import Step, build_join_tree, join_kinds
from freshview.sql.parse import locate

if TYPE_CHECKING:
    from freshview.sql.context import QueryContext


def is_parenthesised_join(r: exp.Expression) -> bool:
    """``(a JOIN b ...)`` (or a table in parentheses, ``(a)``) as a FROM item."""
    return isinstance(r, exp.Subquery) and (
        isinstance(r.this, exp.Table) or (isinstance(r.this, exp.Subquery) and bool(r.this.args.get("joins"))))


def parenthesised_join(qb: "QueryContext", r: exp.Subquery) -> tuple[list[str], FromItem]:
    """The aliases the item brings into scope and the item (offset 0; the caller places it)."""
    inner = r.this
    joins = list(inner.args.get("joins") or [])
    first = inner.copy()
    first.set("joins", None)
    select = exp.Select(expressions=[exp.Star()])
    select.set("from_", exp.From(this=first))
    select.set("joins", [j.copy() for j in joins])
    for j in joins:
        if j.args.get("using") or (j.args.get("method") or "").upper() == "NATURAL":
            raise UnsupportedSqlError("JOIN ... USING / NATURAL JOIN inside a parenthesised join is not supported; "
                                      "write its condition with ON", locate(j, qb.sql), qb.sql)
    items = qb.from_items(select)
    scope = Scope([ScopeColumn(it.relation(i), n, t, it.offset + i)
                   for it in items for i, (n, t) in enumerate(it.node.columns)])
    kinds = join_kinds(select)
    steps = [Step(k) for k in kinds]
    outer = any(k != "inner" for k in kinds)
    binder = ExprBinder(scope, qb.sql, None, "JOIN conditions", qb.dialect)
    conds = []
    for k, j in enumerate(joins, start=1):
        on = j.args.get("on")
        if on is None:
            continue
        e = binder.bind(on)
        if e.type.kind not in ("bool", "null"):
            raise SqlError(f"argument of JOIN/ON must be boolean, not {e.type}", locate(on, qb.sql), qb.sql)
        if outer:
            steps[k].on = conjuncts(factor_common_conjuncts(e))
        else:
            conds += conjuncts(e)
    plan, mapping = build_join_tree(items, steps, conds)
    wide = scope.columns
    plan = pn.Project(plan, tuple(ColumnRef(c.type, mapping[c.index], c.name) for c in wide),
                      tuple(c.name for c in wide))
    aliases = [a for it in items for a in (dict.fromkeys(it.relations) if it.relations else [it.alias])]
    alias_node = r.args.get("alias")
    if alias_node is not None and alias_node.name:
        if alias_node.columns:
            plan = qb.rename_columns(plan, alias_node, r)
        return [alias_node.name], FromItem(alias_node.name, plan, 0)
    return aliases, FromItem(aliases[0], plan, 0, tuple(c.relation for c in wide))


__all__ = ["is_parenthesised_join", "parenthesised_join"]
