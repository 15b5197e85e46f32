"""Can a view be computed shard by shard?  Where its rows' partition key is, or which column breaks it.

A partitioned flow routes every source row to the shard ``hash(partition key) mod partitions``; each
shard computes every view over its rows alone, and the view is the union of the shards' results.
That is exact when every operator that combines rows only ever combines rows of one shard:

* a filter, projection, union or negation works row by row: always exact;
* an inner or left equi-join must match the two sides' partition keys (``o_customer = c_id`` when
  ``orders`` is partitioned by ``o_customer`` and ``customers`` by ``c_id``), so matching rows meet;
* GROUP BY, DISTINCT, window partitions and re-weighting must include the partition key, so a group's
  rows are all in one shard;
* a global ORDER BY … LIMIT, a global aggregate, right/full outer joins feeding such an operator, and
  recursive queries cannot: ``register_view`` refuses them naming the construct and the column.

``key_positions(plan, keys)`` follows the partition key's columns through the plan (``visit_<Node>``)
and returns where the key is in the output (None: no longer carried, fine for row-by-row operators),
or raises ``PartitionError``.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from freshview.errors import CatalogError
from freshview.plan import expr as px
from freshview.plan import nodes as pn

Positions = tuple[int, ...] | None


class PartitionError(CatalogError):
    """A view that cannot be computed shard by shard (the message names the construct and column)."""


def key_positions(plan: pn.Node, keys: Mapping[str, Sequence[str]],
                  view_keys: Mapping[str, Positions] | None = None) -> Positions:
    """Output positions of the partition key in ``plan``'s rows (source ``keys`` by column name;
    ``view_keys``: those of views it reads), or None; ``PartitionError`` when it cannot be sharded."""
    return _Follow(keys, view_keys or {}).visit(plan)


def _ref(e: px.Expr) -> int | None:
    """The input column an expression merely passes on (a column, or a cast of one)."""
    while isinstance(e, px.Cast):
        e = e.arg
    return e.index if isinstance(e, px.ColumnRef) else None


class _Follow:
    def __init__(self, keys: Mapping[str, Sequence[str]], view_keys: Mapping[str, Positions]) -> None:
        self.keys, self.view_keys = keys, view_keys

    def visit(self, node: pn.Node) -> Positions:
        method = getattr(self, f"visit_{type(node).__name__}", None)
        if method is None:
            raise PartitionError(f"{_what(node)} cannot be computed shard by shard")
        try:
            return method(node)
        except PartitionError as exc:
            if "which this input no longer carries" in str(exc):
                keys = "; ".join(f"{s}: {', '.join(self.keys.get(s, ()))}" for s in _sources(node))
                raise PartitionError(str(exc).replace("(which this input no longer carries)",
                                                      f"({keys})")) from None
            raise

    # ---------------------------------------------------------------- leaves
    def visit_Scan(self, node: pn.Scan) -> Positions:
        if node.is_view:
            return self.view_keys.get(node.relation)
        names = [n for n, _ in node.columns]
        key = self.keys.get(node.relation)
        if not key:
            raise PartitionError(f"source {node.relation!r} has no partition key")
        missing = [k for k in key if k not in names]
        if missing:  # (pruned away: the view does not read it, so nothing of the view depends on it)
            return None
        return tuple(names.index(k) for k in key)

    # ---------------------------------------------------------------- row by row
    def visit_Filter(self, node: pn.Filter) -> Positions:
        return self.visit(node.input)

    def visit_FlatMap(self, node: pn.Node) -> Positions:
        """Set-returning functions (``plan.flatmap``): each row's rows keep its columns, first."""
        return self.visit(node.inputs()[0])

    def visit_Negate(self, node: pn.Negate) -> Positions:
        return self.visit(node.input)

    def visit_Project(self, node: pn.Project) -> Positions:
        inner = self.visit(node.input)
        if inner is None:
            return None
        refs = [_ref(e) for e in node.exprs]
        out = []
        for p in inner:
            if p not in refs:
                return None
            out.append(refs.index(p))
        return tuple(out)

    def visit_UnionAll(self, node: pn.UnionAll) -> Positions:
        parts = [self.visit(p) for p in node.parts]
        return parts[0] if all(p == parts[0] for p in parts) else None

    # ---------------------------------------------------------------- rows meet
    def _join(self, node, kind: str) -> Positions:
        left, right = self.visit(node.left), self.visit(node.right)
        pairs = {(_ref(a), _ref(b)) for a, b in zip(node.left_keys, node.right_keys)}
        lnames, rnames = [n for n, _ in node.left.columns], [n for n, _ in node.right.columns]
        if left is None or right is None or len(left) != len(right) or any(
                (lp, rp) not in pairs for lp, rp in zip(left, right)):
            on = ", ".join(f"{_name(lnames, _ref(a))} = {_name(rnames, _ref(b))}"
                           for a, b in zip(node.left_keys, node.right_keys)) or "no equality"
            need = f"{_names(lnames, left)} = {_names(rnames, right)}"
            raise PartitionError(f"a join on {on} does not match the partition keys ({need}): matching rows "
                                 "would be in different shards")
        if kind in ("right", "full"):
            return None  # padded rows of the right side have no left key
        return left

    def visit_Join(self, node: pn.Join) -> Positions:
        return self._join(node, "inner")

    def visit_LogicalJoin(self, node: pn.LogicalJoin) -> Positions:
        return self._join(node, node.kind)

    def visit_Aggregate(self, node: pn.Aggregate) -> Positions:
        inner = self.visit(node.input)
        names = [n for n, _ in node.input.columns]
        refs = [_ref(e) for e in node.group]
        if not node.group:
            raise PartitionError("an aggregate without GROUP BY combines every shard's rows: group by the "
                                 f"partition key ({_names(names, inner)}) or use a flow without partitions")
        if inner is None or any(p not in refs for p in inner):
            raise PartitionError(f"GROUP BY {', '.join(_name(names, r) for r in refs)} does not include the "
                                 f"partition key {_names(names, inner)}: a group's rows would be in several shards")
        return tuple(refs.index(p) for p in inner)

    def visit_Distinct(self, node: pn.Distinct) -> Positions:
        inner = self.visit(node.input)
        if inner is None:
            raise PartitionError("DISTINCT over rows without the partition key: equal rows could be in "
                                 "several shards (select the partition key column too)")
        return inner

    def visit_Reweight(self, node: pn.Reweight) -> Positions:
        inner = self.visit(node.input)
        if inner is None:
            raise PartitionError("INTERSECT/EXCEPT over rows without the partition key: equal rows could be "
                                 "in several shards (select the partition key column too)")
        return inner

    def visit_Window(self, node: pn.Window) -> Positions:
        inner = self.visit(node.input)
        names = [n for n, _ in node.input.columns]
        if inner is None or any(p not in node.partition for p in inner):
            raise PartitionError(f"a window function's PARTITION BY does not include the partition key "
                                 f"{_names(names, inner)}")
        return inner

    def visit_TopK(self, node: pn.TopK) -> Positions:
        raise PartitionError("ORDER BY … LIMIT/OFFSET over the whole view combines every shard's rows")

    def visit_Recursive(self, node: pn.Recursive) -> Positions:
        raise PartitionError("a recursive query cannot be computed shard by shard")


def _what(node: pn.Node) -> str:
    return type(node).__name__


def _name(names: Sequence[str], p: int | None) -> str:
    return names[p] if p is not None and 0 <= p < len(names) else "an expression"


def _names(names: Sequence[str], ps: Positions) -> str:
    return "(" + ", ".join(_name(names, p) for p in ps) + ")" if ps else "(which this input no longer carries)"


def _sources(node: pn.Node) -> list[str]:
    out: list[str] = []
    for child in node.inputs():
        out.extend(s for s in _sources(child) if s not in out)
    if isinstance(node, pn.Scan) and not node.is_view:
        out.append(node.relation)
    return out
