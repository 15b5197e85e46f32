"""What a view's result looks like to whoever stores it: its key, whether rows repeat, which columns can be NULL.

A sink (a PostgreSQL or MySQL result table, a Debezium stream) needs a key
per row so that each step is a set of keyed upserts and deletes:

* an aggregate view is keyed by its GROUP BY columns (one row per group), when
  every one of them is an output column;
* a DISTINCT view (also UNION without ALL) by all its columns;
* any other view (joins, outer joins, top-k, window functions, set operations
  with ALL, ...) can hold equal rows more than once: it is keyed by all its
  columns and *counted* (the sink keeps each row's multiplicity).

Connectors see only ``ResultKey``; the plan analysis stays here.
"""

from __future__ import annotations

from dataclasses import dataclass

from freshview.plan import nodes as pn
from freshview.plan.expr import AggCall, Call, ColumnRef, Expr, Literal
from freshview.plan.temporal import TemporalFilter
from freshview.plan.vector import VectorSearch


@dataclass(frozen=True)
class ResultKey:
    key: tuple[int, ...]  # output positions; empty: the single row of an aggregate without GROUP BY
    counted: bool  # rows may repeat: the sink keeps a multiplicity per row
    nullable: bool  # some key column can be NULL (a NULL group is a group)


def result_key(plan: pn.Node) -> ResultKey:
    """The key of ``plan``'s result rows (see the module docstring)."""
    width = len(plan.columns)
    group = group_columns(plan)
    if isinstance(plan, VectorSearch):  # one row per (query, rank)
        return ResultKey(plan.key, False, False)
    if group is not None:
        key, counted = group, False
    elif isinstance(plan, pn.Distinct):
        key, counted = tuple(range(width)), False
    else:
        key, counted = tuple(range(width)), True
    nullable = nullable_columns(plan)
    return ResultKey(key, counted, any(nullable[i] for i in key))


def group_columns(plan: pn.Node) -> tuple[int, ...] | None:
    """Output positions of the GROUP BY columns, if every one of them is an output column."""
    node, mapping = plan, None  # mapping: aggregate output index -> view output index
    while True:
        if isinstance(node, (pn.Filter, TemporalFilter)):
            node = node.input
        elif isinstance(node, pn.Project):
            inner = {e.index: i for i, e in enumerate(node.exprs) if isinstance(e, ColumnRef)}
            mapping = inner if mapping is None else {k: mapping[v] for k, v in inner.items() if v in mapping}
            node = node.input
        else:
            break
    if not isinstance(node, pn.Aggregate):
        return None
    positions = []
    for g in range(len(node.group)):
        pos = g if mapping is None else mapping.get(g)
        if pos is None:
            return None
        positions.append(pos)
    return tuple(positions)


class _Nullable:
    """Which output columns can hold NULL, one ``visit_<Node>`` per node kind (conservative: True when unsure)."""

    def __call__(self, node: pn.Node) -> list[bool]:
        visit = getattr(self, f"visit_{type(node).__name__}", None)
        return visit(node) if visit is not None else [True] * len(node.columns)

    def visit_Filter(self, node: pn.Filter) -> list[bool]:
        return self(node.input)

    visit_Distinct = visit_Filter
    visit_TemporalFilter = visit_Filter
    visit_Negate = visit_Filter
    visit_Reweight = visit_Filter
    visit_TopK = visit_Filter

    def visit_Project(self, node: pn.Project) -> list[bool]:
        inner = self(node.input)
        return [_nullable(e, inner) for e in node.exprs]

    def visit_Join(self, node: pn.Join) -> list[bool]:
        return self(node.left) + self(node.right)

    def visit_Aggregate(self, node: pn.Aggregate) -> list[bool]:
        inner = self(node.input)
        return [_nullable(g, inner) for g in node.group] + [_agg_nullable(a) for a in node.aggs]

    def visit_VectorSearch(self, node: VectorSearch) -> list[bool]:
        return [False] * (len(node.query_key) + 1) + [True] * len(node.payload) + [False]

    def visit_UnionAll(self, node: pn.UnionAll) -> list[bool]:
        parts = [self(p) for p in node.parts]
        return [any(col) for col in zip(*parts)]


def nullable_columns(node: pn.Node) -> list[bool]:
    """Which output columns of ``node`` can hold NULL (conservative: True when unsure; sources declare
    nullability loosely, so every scanned column can)."""
    return _Nullable()(node)


def _nullable(e: Expr, inputs: list[bool]) -> bool:
    if isinstance(e, ColumnRef):
        return inputs[e.index]
    if isinstance(e, Literal):
        return e.value is None
    if isinstance(e, Call) and e.op == "coalesce":
        return all(_nullable(a, inputs) for a in e.args)
    if isinstance(e, Call) and e.op in ("is_null", "concat"):
        return False
    return True


def _agg_nullable(a: AggCall) -> bool:
    return a.definition.empty == "null"


__all__ = ["ResultKey", "result_key", "group_columns", "nullable_columns"]
