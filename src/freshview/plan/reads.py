"""Which columns of each relation a plan reads.  Pure.

The service asks it whether a DDL change touches a view: a column no view
reads may be dropped or change type without failing the views (the table is
then followed again from a new snapshot, ``service.following``).  The plan is
walked from the top with the set of each node's output columns needed above
it; each node adds what it needs itself (a filter's predicate, join keys,
group keys and aggregate arguments).  A node whose result depends on every
column of its input (DISTINCT, ORDER BY ... LIMIT and window functions, whose
tie rule orders by all columns) or that this module does not know reads all
its inputs' columns: the answer is never fewer columns than are read.
"""

from __future__ import annotations

from typing import Iterable

from freshview.plan import nodes as pn
from freshview.plan.expr import Expr, columns_used


def columns_read(plan: pn.Node) -> dict[str, set[str]]:
    """Relation name -> the names of its columns that ``plan`` reads."""
    out: dict[str, set[str]] = {}
    _visit(plan, set(range(len(plan.columns))), out)
    return out


def _used(exprs: Iterable[Expr | None]) -> set[int]:
    found: set[int] = set()
    for e in exprs:
        if e is not None:
            found |= columns_used(e)
    return found


def _all(node: pn.Node) -> set[int]:
    return set(range(len(node.columns)))


def _visit(node: pn.Node, needed: set[int], out: dict[str, set[str]]) -> None:
    if isinstance(node, pn.Scan):
        out.setdefault(node.relation, set()).update(node.columns[i][0] for i in needed)
    elif isinstance(node, pn.Filter):
        _visit(node.input, needed | columns_used(node.predicate), out)
    elif isinstance(node, pn.Project):
        _visit(node.input, _used(node.exprs[i] for i in needed), out)
    elif isinstance(node, (pn.Negate,)):
        _visit(node.input, needed, out)
    elif isinstance(node, pn.Reweight):
        _visit(node.input, needed | columns_used(node.weight), out)
    elif isinstance(node, pn.Aggregate):
        _visit(node.input, _used(node.group) | _used(e for a in node.aggs for e in a.exprs()), out)
    elif isinstance(node, pn.UnionAll):
        for part in node.parts:
            _visit(part, needed, out)
    elif isinstance(node, pn.Join):
        width = len(node.left.columns)
        _visit(node.left, {i for i in needed if i < width} | _used(node.left_keys), out)
        _visit(node.right, {i - width for i in needed if i >= width} | _used(node.right_keys), out)
    elif isinstance(node, pn.LogicalJoin) and node.pad is None:
        width = len(node.left.columns)
        residual = _used([node.residual])
        _visit(node.left, {i for i in needed | residual if i < width} | _used(node.left_keys)
               | _used([node.not_in[0] if node.not_in else None]), out)
        _visit(node.right, {i - width for i in needed | residual if i >= width} | _used(node.right_keys)
               | _used([node.not_in[1] if node.not_in else None]), out)
    else:  # DISTINCT, TopK, Window, a padded join, Recursive ...: every input column
        for child in node.inputs():
            _visit(child, _all(child), out)
