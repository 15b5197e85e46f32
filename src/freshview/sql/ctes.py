"""Common table expressions: ``WITH name [(columns)] AS (query) ...`` in front of a query.

A WITH list opens a scope for the query it is attached to (and everything
nested in it: subqueries in FROM, set operation operands).  Each CTE is
built once, where it is defined, seeing the CTEs before it in its list and
those of enclosing queries, but not itself or later ones; a FROM item that
names a CTE (unqualified; names compared as PostgreSQL does, unquoted ones folded to
lower case) gets that CTE's plan, before any source or view of
the same name (a CTE shadows the catalog, an inner CTE an outer one).  A CTE
referenced twice contributes its plan twice: the circuit computes it once
per reference.  Every CTE is planned, used or not, so an error in an unused
one is reported as PostgreSQL reports it.  ``MATERIALIZED`` hints are
accepted and have no effect.

``WITH RECURSIVE`` is handed to ``sql.recursive``.
"""

from __future__ import annotations

from typing import Callable

from sqlglot import exp

from freshview.errors import SqlError
from freshview.plan import nodes as pn
from freshview.sql.parse import locate

from freshview.sql.context import CteScope, QueryContext

__all__ = ["CteScope", "check_name", "cte_name", "rename", "resolve", "table_name", "with_scope"]


def with_scope(qb: "QueryContext", with_: exp.With, body: Callable[[], pn.Node]) -> pn.Node:
    """Plan ``body`` with the (non-recursive) CTEs of ``with_`` visible; ``WITH RECURSIVE`` is
    ``recursive.recursive_ctes`` (the builder picks)."""
    saved = qb.cte_scope
    try:
        seen: set[str] = set()
        for cte in with_.expressions:
            name = check_name(qb, cte, seen)
            plan = qb.query(cte.this)
            plan = rename(qb, plan, cte)
            qb.cte_scope = CteScope(name, plan, qb.cte_scope)
        return body()
    finally:
        qb.cte_scope = saved


def folded(identifier: exp.Expression | None, fallback: str = "") -> str:
    """A name as PostgreSQL compares it: unquoted identifiers fold to lower case."""
    if isinstance(identifier, exp.Identifier):
        return identifier.this if identifier.quoted else identifier.this.lower()
    return fallback.lower()


def cte_name(cte: exp.CTE) -> str:
    alias = cte.args.get("alias")
    return folded(alias.this if alias is not None else None, cte.alias)


def table_name(table: exp.Table) -> str:
    return folded(table.this, table.name)


def check_name(qb: "QueryContext", cte: exp.CTE, seen: set[str]) -> str:
    name = cte_name(cte)
    if name in seen:
        raise SqlError(f"WITH query name {name!r} specified more than once", locate(cte, qb.sql), qb.sql)
    seen.add(name)
    if not isinstance(cte.this, (exp.Select, exp.SetOperation, exp.Subquery)):
        keyword = cte.this.key.upper()
        raise qb.unsupported(cte.this, f"{keyword} in WITH (data-modifying statement)", keyword)
    return name


def rename(qb: "QueryContext", plan: pn.Node, cte: exp.CTE) -> pn.Node:
    alias = cte.args.get("alias")
    if alias is not None and alias.columns:
        if len(alias.columns) > len(plan.columns):
            raise SqlError(f"WITH query {cte.alias!r} has {len(plan.columns)} columns available but "
                           f"{len(alias.columns)} columns specified", locate(cte, qb.sql), qb.sql)
        return qb.rename_columns(plan, alias, cte)
    return plan


def resolve(qb: "QueryContext", table: exp.Table) -> tuple[str, pn.Node] | None:
    """A FROM item naming a visible CTE: its alias and plan (renamed by the alias's column list)."""
    if qb.cte_scope is None or table.db:
        return None
    plan = qb.cte_scope.find(table_name(table))
    if plan is None:
        return None
    alias_node = table.args.get("alias")
    if alias_node is not None and alias_node.columns:
        plan = qb.rename_columns(plan, alias_node, table)
    return (alias_node.name if alias_node is not None and alias_node.name else table.name), plan
