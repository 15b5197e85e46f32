"""Merge adjacent projections and filters, and drop projections that change nothing.

    π_{a}(π_{a, b + 1 AS c}(R))   →   π_{a}(R)
    σ_p(σ_q(R))                   →   σ_{q ∧ p}(R)
    π_{$0 AS a, $1 AS b}(R[a, b]) →   R

A projection over a projection becomes one, its expressions written over the
inner one's input, when that computes nothing twice: the inner expressions
are columns or constants, or the outer ones only pick columns.  A
projection of every input column in order under the same names is dropped.
"""

from __future__ import annotations

from freshview.plan import nodes as pn
from freshview.plan.expr import ColumnRef, Literal, conjoin, conjuncts, substitute
from freshview.plan.rewrite.bottom_up import BottomUp


def merge_projects(plan: pn.Node) -> pn.Node:
    """``plan`` with adjacent projections and adjacent filters merged and identity projections dropped."""
    return _Merge()(plan)


def _is_identity(node: pn.Project) -> bool:
    return (len(node.exprs) == len(node.input.columns)
            and all(isinstance(e, ColumnRef) and e.index == i for i, e in enumerate(node.exprs))
            and node.names == tuple(n for n, _ in node.input.columns))


def _cheap(e) -> bool:
    return isinstance(e, (ColumnRef, Literal))


class _Merge(BottomUp):
    def visit_Project(self, node: pn.Project) -> pn.Node:
        inner = node.input
        if isinstance(inner, pn.Project) and (all(map(_cheap, inner.exprs))
                                              or all(isinstance(e, ColumnRef) for e in node.exprs)):
            exprs = tuple(substitute(e, dict(enumerate(inner.exprs))) for e in node.exprs)
            node = pn.Project(inner.input, exprs, node.names)
        return node.input if _is_identity(node) else node

    def visit_Filter(self, node: pn.Filter) -> pn.Node:
        inner = node.input
        if isinstance(inner, pn.Filter):
            return pn.Filter(inner.input, conjoin(conjuncts(inner.predicate) + conjuncts(node.predicate)))  # type: ignore[arg-type]
        return node


__all__ = ["merge_projects"]
