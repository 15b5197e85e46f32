"""What the planner knows about sizes: row counts per relation, and estimates of a plan's rows.

``RelationStats`` is what the state knows of a source or a view: its row
count (the rows of its arrangement) and the column sets no two of its rows
share (a source's primary key).  ``plan.rewrite.join_order`` takes a mapping
relation name -> ``RelationStats`` (``optimize(plan, statistics=...)``);
``IncrementalFlow`` passes the counts of its state when it compiles a view
and keeps the ones the planner asked for with the view (``to_json``), so a
resumed flow plans the view as it was planned.  ``Observed`` reads them on
demand and remembers which were read.

``estimate(node, statistics)`` guesses a plan's rows and the column sets
unique in them, the way PostgreSQL does without column statistics: a
relation missing from ``statistics`` has ``DEFAULT_ROWS`` rows; a column has
``DEFAULT_DISTINCT`` distinct values (at most the relation's rows before its
filters), all those rows if it covers a unique column set; an equality
keeps 1/distinct values of the rows, any other condition a third.  The join
order adds what a key says across a join: a column equal to a one-column key
has at most that key's relation's rows of distinct values (a foreign key's
values).  Only the ratios between plans matter.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from freshview.plan import nodes as pn
from freshview.plan.expr import Call, ColumnRef, Expr, Literal, columns_used, conjuncts

DEFAULT_ROWS = 1000.0  # a relation the statistics do not know (a recursion's working table, an unknown name)
DEFAULT_DISTINCT = 200.0  # PostgreSQL's distinct values of a column it has no statistics of
EQ_SELECTIVITY = 1 / DEFAULT_DISTINCT  # column = constant
OTHER_SELECTIVITY = 1 / 3  # a range or any other condition (PostgreSQL's DEFAULT_INEQ_SEL)


@dataclass(frozen=True)
class RelationStats:
    """A relation's row count and the column sets (by name) that are unique in it."""

    rows: int
    keys: tuple[tuple[str, ...], ...] = ()

    def to_json(self) -> list:
        return [self.rows, [list(k) for k in self.keys]]

    @staticmethod
    def from_json(data: list) -> "RelationStats":
        return RelationStats(int(data[0]), tuple(tuple(k) for k in data[1]))


Statistics = Mapping[str, RelationStats]


def to_json(statistics: Statistics) -> dict[str, list]:
    return {name: s.to_json() for name, s in statistics.items()}


def from_json(data: Mapping[str, Any]) -> dict[str, RelationStats]:
    return {name: RelationStats.from_json(s) for name, s in data.items()}


class Observed(Mapping[str, RelationStats]):
    """Statistics read from ``read`` (None: no such relation) when first asked for; iterating lists the
    relations read so far, so ``dict(observed)`` is what a plan was chosen with."""

    def __init__(self, read: Callable[[str], RelationStats | None]) -> None:
        self._read = read
        self._seen: dict[str, RelationStats | None] = {}

    def __getitem__(self, name: str) -> RelationStats:
        if name not in self._seen:
            self._seen[name] = self._read(name)
        found = self._seen[name]
        if found is None:
            raise KeyError(name)
        return found

    def __iter__(self) -> Iterator[str]:
        return (n for n, s in self._seen.items() if s is not None)

    def __len__(self) -> int:
        return sum(s is not None for s in self._seen.values())


# ---------------------------------------------------------------------- estimates
@dataclass(frozen=True)
class Estimate:
    """A plan's estimated rows (at least 1), its output column sets (by position) known unique, and the
    rows of the relation before its filters (``domain``; None: ``rows``), which bound its columns'
    distinct values (as PostgreSQL bounds them by the table's tuples, not the filtered rows: a filter
    on a key's side of a join keeps the join's rows in proportion)."""

    rows: float
    unique: tuple[frozenset[int], ...] = ()
    domain: float | None = None

    @property
    def before_filters(self) -> float:
        return self.rows if self.domain is None else self.domain

    def distinct(self, exprs: list[Expr], caps: list[float] | None = None) -> float:
        """Estimated distinct values of ``exprs`` together: the relation's rows if their columns cover a
        unique set, else ``DEFAULT_DISTINCT`` per expression (at most its ``caps``: the rows of a key
        it is equal to), at most the relation's rows."""
        cols = {e.index for e in exprs if isinstance(e, ColumnRef)}
        if any(u <= cols for u in self.unique):
            return self.before_filters
        product = 1.0
        for cap in caps or [DEFAULT_DISTINCT] * len(exprs):
            product *= min(DEFAULT_DISTINCT, cap)
        return min(self.before_filters, product)


def estimate(node: pn.Node, statistics: Statistics | None = None) -> Estimate:
    """``node``'s estimated rows and unique column sets (module docstring)."""
    return _Estimator({} if statistics is None else statistics).of(node)


def selectivity(predicate: Expr, rows: Estimate) -> float:
    """The estimated fraction of ``rows`` a conjunct keeps."""
    if isinstance(predicate, Literal):
        return 1.0 if predicate.value is True else 0.0
    if isinstance(predicate, Call) and predicate.op == "=" and len(predicate.args) == 2:
        sides = [a for a in predicate.args if columns_used(a)]
        if len(sides) == 1:  # column = constant
            return 1 / max(rows.distinct(sides), 1.0)
        return EQ_SELECTIVITY
    return OTHER_SELECTIVITY


class _Estimator:
    def __init__(self, statistics: Statistics) -> None:
        self.statistics = statistics

    def of(self, node: pn.Node) -> Estimate:
        visit = getattr(self, f"visit_{type(node).__name__}", None)
        if visit is not None:
            return visit(node)
        inputs = node.inputs()  # Negate, Reweight, TopK, Window, Recursive: about their (first) input
        return Estimate(self.of(inputs[0]).rows) if inputs else Estimate(DEFAULT_ROWS)

    def visit_Scan(self, node: pn.Scan) -> Estimate:
        stats = self.statistics.get(node.relation)
        if stats is None:
            return Estimate(DEFAULT_ROWS)
        names = [n for n, _ in node.columns]
        unique = tuple(frozenset(names.index(c) for c in key) for key in stats.keys
                       if key and all(c in names for c in key))
        return Estimate(max(float(stats.rows), 1.0), unique)

    def visit_Filter(self, node: pn.Filter) -> Estimate:
        below = self.of(node.input)
        rows = below.rows
        for c in conjuncts(node.predicate):
            rows *= selectivity(c, below)
        return Estimate(max(rows, 1.0), below.unique, below.before_filters)

    def visit_Project(self, node: pn.Project) -> Estimate:
        below = self.of(node.input)
        where = {}
        for j, e in enumerate(node.exprs):
            if isinstance(e, ColumnRef):
                where.setdefault(e.index, j)
        unique = tuple(frozenset(where[i] for i in u) for u in below.unique if all(i in where for i in u))
        return Estimate(below.rows, unique, below.domain)

    def visit_Join(self, node: pn.Join) -> Estimate:
        left, right = self.of(node.left), self.of(node.right)
        rows = left.rows * right.rows
        if node.left_keys:
            rows /= max(left.distinct(list(node.left_keys)), right.distinct(list(node.right_keys)), 1.0)
        return Estimate(max(rows, 1.0))

    def visit_LogicalJoin(self, node: pn.LogicalJoin) -> Estimate:
        left, right = self.of(node.left), self.of(node.right)
        if node.kind in ("semi", "anti", "not_in"):
            return Estimate(left.rows, left.unique)
        rows = {"left": left.rows, "right": right.rows, "full": left.rows + right.rows}[node.kind]
        return Estimate(max(rows, 1.0))

    def visit_Aggregate(self, node: pn.Aggregate) -> Estimate:
        below = self.of(node.input)
        groups = len(node.group)
        rows = min(below.rows, below.distinct(list(node.group))) if groups else 1.0
        return Estimate(max(rows, 1.0), (frozenset(range(groups)),))

    def visit_Distinct(self, node: pn.Distinct) -> Estimate:
        return Estimate(self.of(node.input).rows, (frozenset(range(len(node.columns))),))

    def visit_UnionAll(self, node: pn.UnionAll) -> Estimate:
        return Estimate(sum(self.of(p).rows for p in node.parts))


__all__ = ["RelationStats", "Statistics", "Observed", "Estimate", "estimate", "selectivity", "to_json",
           "from_json", "DEFAULT_ROWS", "DEFAULT_DISTINCT"]
