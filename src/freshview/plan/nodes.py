"""Relational nodes of the logical plan: frozen, typed, each checking its shape.

Every node exposes ``columns`` (name, type) of its output.  Join is an inner
equi-join on key expressions; residual conditions sit in a Filter above it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from freshview.errors import FreshviewError
from freshview.plan.expr import AggCall, Expr, columns_used
from freshview.schema import SqlType

Columns = tuple[tuple[str, SqlType], ...]


@dataclass(frozen=True)
class Node:
    def inputs(self) -> tuple["Node", ...]:
        return ()

    @property
    def columns(self) -> Columns:  # pragma: no cover - abstract
        raise NotImplementedError


def _check_refs(exprs, width: int, what: str) -> None:
    for e in exprs:
        bad = [i for i in columns_used(e) if i >= width]
        if bad:
            raise FreshviewError(f"internal: {what} refers to column ${bad[0]} of a {width}-column input")


@dataclass(frozen=True)
class Scan(Node):
    """Read a source table or another view's output stream."""

    relation: str
    schema_columns: Columns
    is_view: bool = False

    @property
    def columns(self) -> Columns:
        return self.schema_columns


@dataclass(frozen=True)
class _Unary(Node):
    input: Node

    def inputs(self) -> tuple[Node, ...]:
        return (self.input,)

    @property
    def columns(self) -> Columns:
        return self.input.columns


@dataclass(frozen=True)
class Filter(_Unary):
    predicate: Expr

    def __post_init__(self) -> None:
        _check_refs([self.predicate], len(self.input.columns), "filter")


@dataclass(frozen=True)
class Project(_Unary):
    exprs: tuple[Expr, ...]
    names: tuple[str, ...]

    def __post_init__(self) -> None:
        if len(self.exprs) != len(self.names):
            raise FreshviewError("internal: projection names and expressions differ in number")
        _check_refs(self.exprs, len(self.input.columns), "projection")

    @property
    def columns(self) -> Columns:
        return tuple((n, e.type) for n, e in zip(self.names, self.exprs))


@dataclass(frozen=True)
class Join(Node):
    """Inner equi-join: left_keys[i] = right_keys[i]; no keys means a cross product."""

    left: Node
    right: Node
    left_keys: tuple[Expr, ...]
    right_keys: tuple[Expr, ...]

    def __post_init__(self) -> None:
        if len(self.left_keys) != len(self.right_keys):
            raise FreshviewError("internal: join key lists differ in length")
        _check_refs(self.left_keys, len(self.left.columns), "left join key")
        _check_refs(self.right_keys, len(self.right.columns), "right join key")

    def inputs(self) -> tuple[Node, ...]:
        return (self.left, self.right)

    @property
    def columns(self) -> Columns:
        return self.left.columns + self.right.columns


@dataclass(frozen=True)
class Aggregate(_Unary):
    """GROUP BY ``group`` computing ``aggs``; output is the group columns, then the aggregates."""

    group: tuple[Expr, ...]
    aggs: tuple[AggCall, ...]
    group_names: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        _check_refs(self.group, len(self.input.columns), "group key")
        _check_refs([e for a in self.aggs for e in a.exprs()], len(self.input.columns), "aggregate")

    @property
    def columns(self) -> Columns:
        names = self.group_names or tuple(f"g{i}" for i in range(len(self.group)))
        return tuple((n, g.type) for n, g in zip(names, self.group)) + tuple(
            (f"agg{i}", a.type) for i, a in enumerate(self.aggs)
        )


@dataclass(frozen=True)
class Distinct(_Unary):
    pass


@dataclass(frozen=True)
class UnionAll(Node):
    parts: tuple[Node, ...]

    def __post_init__(self) -> None:
        widths = {len(p.columns) for p in self.parts}
        if len(widths) != 1:
            raise FreshviewError("internal: UNION ALL inputs differ in width")

    def inputs(self) -> tuple[Node, ...]:
        return self.parts

    @property
    def columns(self) -> Columns:
        return self.parts[0].columns


def walk(node: Node):
    yield node
    for child in node.inputs():
        yield from walk(child)


def relations(node: Node) -> set[str]:
    return {n.relation for n in walk(node) if isinstance(n, Scan)}
