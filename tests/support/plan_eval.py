"""A brute-force, non-incremental evaluator of logical plans over Python multisets, for rewrite tests.

Relations are ``Counter``s of row tuples to weights (Z-sets); expressions are
evaluated by the in-process Arrow evaluator (PostgreSQL semantics), one
node at a time, from scratch.  Rewrite rules are checked by evaluating a plan
and its rewrite on the same random tables.
"""

from __future__ import annotations

from collections import Counter, defaultdict

import pyarrow as pa

from freshview.plan import nodes as pn
from freshview.plan.expr import Expr
from freshview.plan.rewrite.joins import lower_joins
from freshview.runtime.expressions.arrow import evaluate as eval_arrow
from freshview.runtime.relation import col_name


def _table(columns: pn.Columns, rows: list[tuple]) -> pa.Table:
    arrays = [pa.array([r[i] for r in rows], t.arrow) for i, (_, t) in enumerate(columns)]
    return pa.Table.from_arrays(arrays, names=[col_name(i) for i in range(len(columns))])


def values(e: Expr, columns: pn.Columns, rows: list[tuple]) -> list:
    """``e`` evaluated on each of ``rows``."""
    if not rows:
        return []
    return eval_arrow(e, _table(columns, rows)).to_pylist()


def evaluate(plan: pn.Node, tables: dict[str, Counter]) -> Counter:
    """The rows of ``plan`` (weight ≠ 0) over ``tables`` (relation name -> rows)."""
    return Counter({r: w for r, w in _Eval(tables).run(plan).items() if w})


class _Eval:
    def __init__(self, tables: dict[str, Counter]) -> None:
        self.tables = tables

    def run(self, node: pn.Node) -> Counter:
        return getattr(self, f"visit_{type(node).__name__}")(node)

    def visit_Scan(self, node: pn.Scan) -> Counter:
        return Counter(self.tables[node.relation])

    def visit_Constant(self, node: pn.Constant) -> Counter:
        return Counter(node.rows)

    def visit_Filter(self, node: pn.Filter) -> Counter:
        rel = self.run(node.input)
        rows = list(rel)
        keep = values(node.predicate, node.input.columns, rows)
        return Counter({r: rel[r] for r, k in zip(rows, keep) if k is True})

    def visit_Project(self, node: pn.Project) -> Counter:
        rel = self.run(node.input)
        rows = list(rel)
        cols = [values(e, node.input.columns, rows) for e in node.exprs]
        out: Counter = Counter()
        for i, r in enumerate(rows):
            out[tuple(c[i] for c in cols)] += rel[r]
        return out

    def _keys(self, exprs, columns, rel: Counter) -> list[tuple]:
        rows = list(rel)
        cols = [values(e, columns, rows) for e in exprs]
        return [tuple(c[i] for c in cols) for i in range(len(rows))]

    def visit_Join(self, node: pn.Join) -> Counter:
        left, right = self.run(node.left), self.run(node.right)
        lk = self._keys(node.left_keys, node.left.columns, left)
        rk = self._keys(node.right_keys, node.right.columns, right)
        index: dict[tuple, list[tuple]] = defaultdict(list)
        for r, k in zip(right, rk):
            if None not in k:
                index[k].append(r)
        out: Counter = Counter()
        for l, k in zip(left, lk):
            if None in k:
                continue
            for r in index.get(k, []):
                out[l + r] += left[l] * right[r]
        return out

    def visit_LogicalJoin(self, node: pn.LogicalJoin) -> Counter:
        """Through its lowering (``plan.rewrite.joins``, checked against Python joins in tests/runtime)."""
        return self.run(lower_joins(node))

    def visit_UnionAll(self, node: pn.UnionAll) -> Counter:
        out: Counter = Counter()
        for p in node.parts:
            for r, w in self.run(p).items():
                out[r] += w
        return out

    def visit_Negate(self, node: pn.Negate) -> Counter:
        return Counter({r: -w for r, w in self.run(node.input).items()})

    def visit_Distinct(self, node: pn.Distinct) -> Counter:
        return Counter({r: 1 for r, w in self.run(node.input).items() if w > 0})

    def visit_Reweight(self, node: pn.Reweight) -> Counter:
        rel = self.run(node.input)
        rows = list(rel)
        weights = values(node.weight, node.input.columns, rows)
        return Counter({r: rel[r] * (w or 0) for r, w in zip(rows, weights)})

    def visit_Aggregate(self, node: pn.Aggregate) -> Counter:
        """count_star, count, sum, min, max, spelling (enough for the rewrite fixtures)."""
        rel = Counter({r: w for r, w in self.run(node.input).items() if w})
        rows = list(rel)
        keys = self._keys(node.group, node.input.columns, rel)
        args = [values(a.arg, node.input.columns, rows) if a.arg is not None else [None] * len(rows)
                for a in node.aggs]
        groups: dict[tuple, list[int]] = defaultdict(list)
        for i, k in enumerate(keys):
            groups[k].append(i)
        if not node.group and not groups:
            groups[()] = []
        out: Counter = Counter()
        for k, members in groups.items():
            out[k + tuple(_aggregate(a.func, [(args[j][i], rel[rows[i]]) for i in members])
                          for j, a in enumerate(node.aggs))] += 1
        return out


def _aggregate(func: str, items: list[tuple[object, int]]):
    if func == "count_star":
        return sum(w for _, w in items)
    present = [(v, w) for v, w in items if v is not None]
    if func == "count":
        return sum(w for _, w in present)
    if not present:
        return None
    if func == "sum":
        return sum(v * w for v, w in present)  # type: ignore[operator]
    if func in ("min", "spelling"):
        return min(v for v, _ in present)  # type: ignore[type-var]
    if func == "max":
        return max(v for v, _ in present)  # type: ignore[type-var]
    raise NotImplementedError(func)
