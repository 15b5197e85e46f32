"""Drop the columns no one uses, so operator state holds only those.

    π_{a}(Scan t [a, b, c]) ⋈_{a = x} …   keeps   π_{a}(Scan t) — b and c never enter the join's state

Walking down from the root (which keeps every column), each node learns
which of its output columns are used above it and asks its inputs only for
the columns it needs for those: a Filter adds its predicate's columns, a Join
its keys' columns, an Aggregate its group and argument columns, a Project
only the expressions that are used.  Where rows are kept in state (each
input of a Join and of an Aggregate) and where layouts must agree (each
input of a UnionAll), a projection narrows the input to exactly the columns
asked for.  Distinct, TopK and Window compare whole rows (their tie rule
orders by every column), so they need all their input's columns, as a
recursion needs all of its inputs'.  An input of which no column is used
keeps one: it still multiplies rows.  An outer, semi- or anti-join
(``LogicalJoin``, not lowered yet) keeps on each side what its condition
uses, so its lowering copies only those columns.  A FlatMap (set-returning
functions) asks its input for what is used above and what its functions read.
"""

from __future__ import annotations

from dataclasses import replace

from freshview.plan import nodes as pn
from freshview.plan.flatmap import FlatMap
from freshview.plan.expr import ColumnRef, columns_used, remap_columns

Mapping = dict[int, int]  # an output column of the original node -> its index in the pruned node


def prune(plan: pn.Node) -> pn.Node:
    """``plan`` with the same output columns, each node holding only the columns used above it."""
    every = set(range(len(plan.columns)))
    node, mapping = _Prune().prune(plan, every)
    return narrow(node, mapping, every)[0]


def narrow(node: pn.Node, mapping: Mapping, keep: set[int]) -> tuple[pn.Node, Mapping]:
    """``node`` (an original node's columns at ``mapping``) with exactly the original columns ``keep``
    (at least one), in order: a projection unless it has those already."""
    wanted = sorted(keep) or [min(mapping)]
    picks = [mapping[i] for i in wanted]
    if picks == list(range(len(node.columns))):
        return node, {i: j for j, i in enumerate(wanted)}
    cols = node.columns
    project = pn.Project(node, tuple(ColumnRef(cols[p][1], p, cols[p][0]) for p in picks),
                         tuple(cols[p][0] for p in picks))
    return project, {i: j for j, i in enumerate(wanted)}


def _used(exprs) -> set[int]:
    out: set[int] = set()
    for e in exprs:
        out |= columns_used(e)
    return out


class _Prune:
    def prune(self, node: pn.Node, needed: set[int]) -> tuple[pn.Node, Mapping]:
        """``node`` rebuilt to provide at least the columns ``needed``, and where each of its columns went."""
        visit = getattr(self, f"visit_{type(node).__name__}", self.whole)
        return visit(node, needed)

    def whole(self, node: pn.Node, needed: set[int]) -> tuple[pn.Node, Mapping]:
        """A node that needs all its inputs' columns (or a leaf): inputs pruned inside, columns kept."""
        inputs = [self.exact(c, set(range(len(c.columns)))) for c in node.inputs()]
        return pn.with_inputs(node, inputs), {i: i for i in range(len(node.columns))}

    def exact(self, node: pn.Node, keep: set[int]) -> pn.Node:
        """``node`` pruned, then with exactly the columns ``keep`` (original numbering, renumbered in order)."""
        pruned, mapping = self.prune(node, keep)
        return narrow(pruned, mapping, keep)[0]

    def visit_Recursive(self, node: pn.Recursive, needed: set[int]) -> tuple[pn.Node, Mapping]:
        rebuilt, mapping = self.whole(node, needed)
        assert isinstance(rebuilt, pn.Recursive)
        return pn.Recursive(rebuilt.name, rebuilt.anchor, rebuilt.externals, prune(rebuilt.step),
                            rebuilt.distinct), mapping

    def visit_Filter(self, node: pn.Filter, needed: set[int]) -> tuple[pn.Node, Mapping]:
        child, mapping = self.prune(node.input, needed | columns_used(node.predicate))
        return pn.Filter(child, remap_columns(node.predicate, mapping)), mapping

    def _through(self, node: pn.Node, needed: set[int]) -> tuple[pn.Node, Mapping]:
        child, mapping = self.prune(node.inputs()[0], needed)
        return pn.with_inputs(node, [child]), mapping

    visit_Negate = _through

    def visit_Reweight(self, node: pn.Reweight, needed: set[int]) -> tuple[pn.Node, Mapping]:
        child, mapping = self.prune(node.input, needed | columns_used(node.weight))
        return pn.Reweight(child, remap_columns(node.weight, mapping)), mapping

    def visit_Project(self, node: pn.Project, needed: set[int]) -> tuple[pn.Node, Mapping]:
        keep = sorted(needed) or [0]
        child, mapping = self.prune(node.input, _used(node.exprs[i] for i in keep))
        exprs = tuple(remap_columns(node.exprs[i], mapping) for i in keep)
        return pn.Project(child, exprs, tuple(node.names[i] for i in keep)), {i: j for j, i in enumerate(keep)}

    def visit_FlatMap(self, node: FlatMap, needed: set[int]) -> tuple[pn.Node, Mapping]:
        """The input keeps the columns needed above and those the functions read; every function stays
        (each decides how many rows an input row makes)."""
        width = len(node.input.columns)
        child, mapping = self.prune(node.input, {i for i in needed if i < width}
                                    | _used(a for c in node.calls for a in c.args))
        calls = tuple(replace(c, args=tuple(remap_columns(a, mapping) for a in c.args)) for c in node.calls)
        out = FlatMap(child, calls, node.ordinality, node.outer)
        new_width = len(child.columns)
        return out, {**mapping, **{width + j: new_width + j for j in range(len(node.added))}}

    def visit_Join(self, node: pn.Join, needed: set[int]) -> tuple[pn.Node, Mapping]:
        nl = len(node.left.columns)
        left_need = {i for i in needed if i < nl} | _used(node.left_keys)
        right_need = {i - nl for i in needed if i >= nl} | _used(node.right_keys)
        left, lmap = narrow(*self.prune(node.left, left_need), left_need)
        right, rmap = narrow(*self.prune(node.right, right_need), right_need)
        join = pn.Join(left, right, tuple(remap_columns(k, lmap) for k in node.left_keys),
                       tuple(remap_columns(k, rmap) for k in node.right_keys))
        width = len(left.columns)
        return join, {**lmap, **{nl + i: width + j for i, j in rmap.items()}}

    def visit_LogicalJoin(self, node: pn.LogicalJoin, needed: set[int]) -> tuple[pn.Node, Mapping]:
        """Each side keeps the columns used above, its keys', the residual's and NOT IN's operands'."""
        nl = len(node.left.columns)
        cond = columns_used(node.residual) if node.residual is not None else set()
        left_need = {i for i in needed | cond if i < nl} | _used(node.left_keys)
        right_need = {i - nl for i in needed | cond if i >= nl} | _used(node.right_keys)
        if node.not_in is not None:
            left_need |= columns_used(node.not_in[0])
            right_need |= columns_used(node.not_in[1])
        left, lmap = narrow(*self.prune(node.left, left_need), left_need)
        right, rmap = narrow(*self.prune(node.right, right_need), right_need)
        width = len(left.columns)
        both = {**lmap, **{nl + i: width + j for i, j in rmap.items()}}
        kept_right = sorted(rmap, key=rmap.__getitem__)
        join = pn.LogicalJoin(
            node.kind, left, right,
            tuple(remap_columns(k, lmap) for k in node.left_keys), tuple(remap_columns(k, rmap) for k in node.right_keys),
            remap_columns(node.residual, both) if node.residual is not None else None,
            tuple(node.pad[i] for i in kept_right) if node.pad is not None else None,
            (remap_columns(node.not_in[0], lmap), remap_columns(node.not_in[1], rmap)) if node.not_in else None)
        return join, (lmap if node.kind in ("semi", "anti", "not_in") else both)

    def visit_Aggregate(self, node: pn.Aggregate, needed: set[int]) -> tuple[pn.Node, Mapping]:
        need = _used(node.group) | _used(e for a in node.aggs for e in a.exprs())
        child, mapping = narrow(*self.prune(node.input, need), need)
        agg = pn.Aggregate(child, tuple(remap_columns(g, mapping) for g in node.group),
                           tuple(a.map_exprs(lambda e: remap_columns(e, mapping)) for a in node.aggs),
                           node.group_names)
        return agg, {i: i for i in range(len(node.columns))}

    def visit_UnionAll(self, node: pn.UnionAll, needed: set[int]) -> tuple[pn.Node, Mapping]:
        keep = needed or {0}
        parts = tuple(self.exact(p, keep) for p in node.parts)
        return pn.UnionAll(parts), {i: j for j, i in enumerate(sorted(keep))}


def columns_read(plan: pn.Node) -> dict[str, frozenset[str]]:
    """The columns of each relation (``Scan.relation``) that ``plan``'s result depends on: what
    pruning asks each Scan for.  A relation of which no column is used maps to the empty set (its
    rows still count); one read more than once maps to the union.  Used to check that a view's
    requester may read what the view reads (``service.access``)."""
    reads = _Reads()
    reads.prune(plan, set(range(len(plan.columns))))
    found = {name: frozenset(columns) for name, columns in reads.found.items()}
    for scan in _scans(plan):  # a Scan pruning did not reach (none today): every column counts
        if scan.relation not in reads.found:
            found[scan.relation] = frozenset(name for name, _ in scan.schema_columns)
    return found


def _scans(node: pn.Node):
    if isinstance(node, pn.Scan):
        yield node
    for child in node.inputs() + ((node.step,) if isinstance(node, pn.Recursive) else ()):
        yield from _scans(child)


class _Reads(_Prune):
    """Pruning that records, per Scan, the columns asked of it (the plan it builds is discarded)."""

    def __init__(self) -> None:
        self.found: dict[str, set[str]] = {}
        self.silent = 0  # inside the column a node keeps only to carry its rows: not a read

    def visit_Scan(self, node: pn.Scan, needed: set[int]) -> tuple[pn.Node, Mapping]:
        if not self.silent:
            self.found.setdefault(node.relation, set()).update(node.schema_columns[i][0] for i in needed)
        return self.whole(node, needed)

    def _rows_only(self, visit, node: pn.Node, needed: set[int]) -> tuple[pn.Node, Mapping]:
        """No column of ``node`` is used, yet pruning keeps one: record the input's rows (no column),
        then let pruning keep its column unrecorded."""
        if needed:
            return visit(node, needed)
        for child in node.inputs():
            self.prune(child, set())
        self.silent += 1
        try:
            return visit(node, needed)
        finally:
            self.silent -= 1

    def visit_Project(self, node: pn.Project, needed: set[int]) -> tuple[pn.Node, Mapping]:
        return self._rows_only(super().visit_Project, node, needed)

    def visit_UnionAll(self, node: pn.UnionAll, needed: set[int]) -> tuple[pn.Node, Mapping]:
        return self._rows_only(super().visit_UnionAll, node, needed)


__all__ = ["columns_read", "narrow", "prune"]
