"""WITH RECURSIVE: a CTE that refers to itself becomes a ``Recursive`` plan node.

``WITH RECURSIVE r [(columns)] AS (anchor UNION [ALL] recursive term)``:
the anchor (everything left of the last top-level UNION) is planned as an
ordinary query and gives the columns' names and types; the recursive term
is planned with ``r`` bound to a ``RecursiveRef`` leaf of those columns.  Its
subtrees that do not depend on ``r`` (a join's other side, a grouped
subquery over a source) become the node's ``externals``, maintained
incrementally like any plan and kept integrated by the operator
(``runtime.operators.recursive``), which recomputes the fixpoint of what
remains: Filter, Project, Join and UNION ALL over the working table.

What PostgreSQL refuses is refused the same way (a self-reference in the
anchor; a recursive term of another type than the anchor's; a CTE that
refers to itself without the UNION form), and so is what the operator
cannot evaluate, located: non-linear recursion (``r`` twice in the
recursive term), and recursion through an aggregate, DISTINCT, a set
operation other than UNION ALL, or another recursion.  CTEs of a WITH
RECURSIVE list that do not refer to themselves are ordinary CTEs; a
reference to a later CTE of the list (allowed by PostgreSQL) is refused.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Callable

from sqlglot import exp

from freshview.errors import SqlError
from freshview.plan import nodes as pn
from freshview.plan.expr import ColumnRef
from freshview.plan import typing as ty
from freshview.sql.ctes import CteScope, check_name, cte_name, rename, table_name
from freshview.sql.parse import locate

if TYPE_CHECKING:
    from freshview.sql.context import QueryContext


def recursive_ctes(qb: "QueryContext", with_: exp.With, body: Callable[[], pn.Node]) -> pn.Node:
    """Plan ``body`` with the CTEs of a WITH RECURSIVE list visible."""
    saved = qb.cte_scope
    try:
        seen: set[str] = set()
        names = [cte_name(cte) for cte in with_.expressions]
        for i, cte in enumerate(with_.expressions):
            name = check_name(qb, cte, seen)
            for later in names[i + 1:]:
                refs = _references(cte.this, later)
                if refs:
                    raise qb.unsupported(refs[0], f"a reference to the later WITH query {later!r} "
                                                  "(define it before its first use)")
            if _references(cte.this, name):
                plan = recursive_cte(qb, cte, name)
            else:
                plan = rename(qb, qb.query(cte.this), cte)
            qb.cte_scope = CteScope(name, plan, qb.cte_scope)
        return body()
    finally:
        qb.cte_scope = saved


def _references(node: exp.Expression, name: str) -> list[exp.Table]:
    return [t for t in node.find_all(exp.Table) if not t.db and table_name(t) == name]


def recursive_cte(qb: "QueryContext", cte: exp.CTE, name: str) -> pn.Node:
    query = cte.this
    while isinstance(query, exp.Subquery):
        query = query.this
    if not isinstance(query, exp.Union):
        raise SqlError(f"recursive query {name!r} does not have the form non-recursive-term UNION [ALL] "
                       "recursive-term", locate(cte, qb.sql), qb.sql)
    qb.refuse_modifiers(query)
    anchor_ast, term_ast = query.left, query.right
    in_anchor = _references(anchor_ast, name)
    if in_anchor:
        raise SqlError(f"recursive reference to query {name!r} must not appear within its non-recursive term",
                       locate(in_anchor[0], qb.sql), qb.sql)
    in_term = _references(term_ast, name)
    if len(in_term) > 1:
        raise qb.unsupported(in_term[1], f"non-linear recursion (query {name!r} referenced more than once in its "
                                         "recursive term)")

    anchor = rename(qb, qb.query(anchor_ast), cte)
    if any(t.kind == "null" for _, t in anchor.columns):
        anchor = _cast_to(anchor, tuple(ty.TEXT if t.kind == "null" else t for _, t in anchor.columns))
    ref = pn.RecursiveRef(name, anchor.columns)
    outer = qb.cte_scope
    qb.cte_scope = CteScope(name, ref, outer)
    try:
        term = qb.query(term_ast)
    finally:
        qb.cte_scope = outer
    if len(term.columns) != len(anchor.columns):
        raise SqlError("each UNION query must have the same number of columns", locate(query, qb.sql, "UNION"),
                       qb.sql)
    for i, ((_, at), (_, tt)) in enumerate(zip(anchor.columns, term.columns)):
        common = ty.common_type(at, tt)
        if common is None:
            raise SqlError(f"UNION column {i + 1} has incompatible types {at} and {tt}",
                           locate(query, qb.sql, "UNION"), qb.sql)
        if common != at:
            raise SqlError(f"recursive query {name!r} column {i + 1} has type {at} in non-recursive term but "
                           f"type {common} overall (cast the non-recursive term to the correct type)",
                           locate(anchor_ast, qb.sql), qb.sql)
    term = _cast_to(term, tuple(t for _, t in anchor.columns))
    externals: list[pn.Node] = []
    step = _split(qb, term, name, externals, term_ast)
    return pn.Recursive(name, anchor, tuple(externals), step, bool(query.args.get("distinct")))


def _cast_to(plan: pn.Node, types: tuple) -> pn.Node:

    if tuple(t for _, t in plan.columns) == types:
        return plan
    exprs = tuple(ty.cast_to(ColumnRef(ct, i, n), t) for i, ((n, ct), t) in enumerate(zip(plan.columns, types)))
    return pn.Project(plan, exprs, tuple(n for n, _ in plan.columns))


def _depends(node: pn.Node, name: str) -> bool:
    if isinstance(node, pn.RecursiveRef):
        return node.name == name
    children = node.inputs() + ((node.step,) if isinstance(node, pn.Recursive) else ())
    return any(_depends(c, name) for c in children)


_THROUGH = {
    "Aggregate": "recursion through an aggregate (GROUP BY or an aggregate function in the recursive term)",
    "Distinct": "recursion through DISTINCT or UNION inside the recursive term",
    "Reweight": "recursion through INTERSECT or EXCEPT",
    "Recursive": "recursion through another recursive query",
}


def _split(qb: "QueryContext", node: pn.Node, name: str, externals: list[pn.Node], term_ast) -> pn.Node:
    """``node`` with every subtree that does not depend on ``name`` replaced by an ``ExternalRef``."""
    if not _depends(node, name):
        externals.append(node)
        return pn.ExternalRef(len(externals) - 1, node.columns)
    if isinstance(node, pn.RecursiveRef):
        return node

    def sub(child: pn.Node) -> pn.Node:
        return _split(qb, child, name, externals, term_ast)

    if isinstance(node, (pn.Filter, pn.Project)):
        return replace(node, input=sub(node.input))
    if isinstance(node, pn.Join):
        return replace(node, left=sub(node.left), right=sub(node.right))
    if isinstance(node, pn.UnionAll):
        return replace(node, parts=tuple(sub(p) for p in node.parts))
    what = _THROUGH.get(type(node).__name__, f"recursion through {type(node).__name__}")
    raise qb.unsupported(term_ast, what, "SELECT")
