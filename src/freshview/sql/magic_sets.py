"""Scalar subqueries correlated by a non-equality, decorrelated over the outer query's correlation values.

``(SELECT count(*) FROM t1 AS x WHERE x.c > t1.c)`` has no equality to group
the subquery by, so the equality rule of ``sql.subqueries`` (group S by its
correlation columns, LEFT-join on them) does not apply.  Instead S is
computed for each distinct value of its outer correlation columns (a *magic
set*, Seshadri et al., "Cost-based optimization for magic", SIGMOD 1996):

    D  = Distinct(π_o(L))                   o: the outer columns S's WHERE reads
    S' = Aggregate_{D.o}(σ_θ(D × rows of S))  θ: S's correlated conjuncts, over D and S
    result = L ⟕_{o ≐ D.o} S'                ≐: null-safe equality; an unmatched row padded with
                                             the value over no rows (COUNT 0, the others NULL)

Each outer row gets S's value over exactly the rows θ accepts for its
values (a NULL outer value included: it is its own group of D, and θ, not
the join, decides what it matches), and a value no row of S accepts is
padded as over no rows, so the count bug cannot happen.  The equalities of
S's WHERE, if any, go into θ too, where ``plan.rewrite.pushdown`` makes
them the keys of D × S.

The query builder writes S' as SQL over a placeholder FROM item
(``plan.nodes.OuterRows``) and the join tree (``sql.join_tree``) puts D in
its place once it has built L.  **Delta rule**: none of its own; D × S is a
join without keys (each change of D or S meets the other side whole, as
``circuit.render`` says), then Filter, Aggregate, Distinct and the left join
of ``plan.rewrite.joins``, each maintained by its own rule.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlglot import exp

from freshview.plan import nodes as pn
from freshview.plan.expr import Expr
from freshview.plan.rewrite.joins import has_null_safe_key
from freshview.sql import ctes, single_row
from freshview.sql.ast_walk import conjuncts_ast, own_columns
from freshview.sql.bind_expr import ExprBinder

if TYPE_CHECKING:
    from freshview.sql.context import QueryContext
    from freshview.sql.subqueries import Subqueries


def is_theta(subs: "Subqueries", corr: list[exp.Expression]) -> bool:
    """Whether a correlated conjunct of ``corr`` is not an ``inner = outer`` equality."""
    for c in corr:
        node = c
        while isinstance(node, exp.Paren):
            node = node.this
        if not isinstance(node, exp.EQ) or subs._equality(node, subs._inner_scope) is None:
            return True
    return False


def theta_scalar(subs: "Subqueries", query: exp.Select, corr: list[exp.Expression], node: exp.Expression,
                 aggregated: bool, outer_in_value: bool, single: bool = False):
    """Scalar subquery ``query`` (``node``) correlated by ``corr``, as above: its alias, the plan of S' (its
    correlation values, then its value or its aggregates), its row over no rows, its placeholder with the
    outer expressions it stands for, and the value's expression around the aggregates (None: the last
    column is the value).  ``single``: S is not an aggregate (``sql.single_row``): S' is its rows
    (correlation values, value; DISTINCT as written) counted per correlation value."""
    if aggregated:
        raise subs.unsupported(node, "a scalar subquery correlated by a non-equality in the SELECT list or "
                                     "HAVING of an aggregating query", "(")
    inner = subs._inner_scope
    alias = subs._new_alias()
    holder_name = f"__outer{alias}"
    binder = ExprBinder(subs.scope, subs.sql, None, "subquery conditions", subs.b.dialect)
    texts: list[str] = []
    outer_exprs: list[Expr] = []
    conds: list[exp.Expression] = []
    for c in corr:
        if any(isinstance(n, (exp.Subquery, exp.Exists, exp.Select)) for n in c.walk()):
            raise subs.unsupported(c, "a subquery inside a correlated condition")
        rewritten = c.copy()
        to_holder(subs.b, rewritten, lambda col: subs._is_outer(col, inner), binder, holder_name, texts, outer_exprs)
        conds.append(rewritten)
    value = query.expressions[0].this if isinstance(query.expressions[0], exp.Alias) else query.expressions[0]
    outside = None
    inside: list[tuple[str, exp.Expression]] = [("__v", value.copy())]
    if outer_in_value:  # S's aggregates per outer value, its value around them over the outer row
        outside, inside = subs._split_value(value, alias)
    out = query.copy()
    where = query.args.get("where")
    local = [c.copy() for c in conjuncts_ast(where.this if where is not None else None) if c not in corr]
    cond: exp.Expression | None = None
    for c in local + conds:
        cond = c if cond is None else exp.And(this=cond, expression=c)
    out.set("where", exp.Where(this=cond))
    out = out.join(exp.Table(this=exp.to_identifier(holder_name)), join_type="cross")
    keys = [exp.column(f"__o{j}", table=holder_name) for j in range(len(texts))]
    out.set("expressions", [exp.alias_(k.copy(), f"__k{j}") for j, k in enumerate(keys)]
            + [exp.alias_(e.copy(), n) for n, e in inside])
    if not single:
        out.set("group", exp.Group(expressions=keys))
        out.set("distinct", None)
    holder = pn.OuterRows(subs.b.subquery_count,
                          tuple((f"__o{j}", e.type) for j, e in enumerate(outer_exprs)))
    plan = plan_over(subs.b, holder_name, holder, out)
    if single:
        subs._orderable(plan, node, "scalar subquery that is not an aggregate")
        plan = single_row.counted(plan, len(keys))
    pad = subs._empty_row(plan, node, len(keys))
    return alias, plan, pad, (holder, tuple(outer_exprs)), outside


def to_holder(qb: "QueryContext", node: exp.Expression, is_outer, binder: ExprBinder, holder_name: str,
              texts: list[str], outer_exprs: list[Expr]) -> None:
    """Each outer column of ``node`` (``is_outer``) replaced, in place, by the placeholder's column for it
    (``holder_name.__oJ``); a column met first is bound (``binder``) and added to ``texts``/``outer_exprs``."""
    for col in list(own_columns(node)):
        if not is_outer(col):
            continue
        text = col.sql(dialect="postgres")
        if text not in texts:
            bound = binder.bind(col)
            if not has_null_safe_key(bound.type):
                raise qb.unsupported(col, f"a correlation on a {bound.type} column (no NULL-safe key)")
            texts.append(text)
            outer_exprs.append(bound)
        col.replace(exp.column(f"__o{texts.index(text)}", table=holder_name))


def plan_over(qb: "QueryContext", holder_name: str, holder: pn.OuterRows, query: exp.Expression) -> pn.Node:
    """The plan of ``query``, in which the FROM item ``holder_name`` is the placeholder ``holder``."""
    saved = qb.cte_scope
    qb.cte_scope = ctes.CteScope(holder_name, holder, saved)
    try:
        return qb.query(query)
    finally:
        qb.cte_scope = saved


__all__ = ["is_theta", "theta_scalar", "to_holder", "plan_over"]
