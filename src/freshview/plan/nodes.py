"""Relational nodes of the logical plan: frozen, typed, each checking its shape.

Every node exposes ``columns`` (name, type) of its output.  Join is an inner
equi-join on key expressions; residual conditions sit in a Filter above it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from decimal import Decimal

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
class Constant(Node):
    """A relation written in the query (VALUES, SELECT without FROM, generate_series of constants): ``rows``,
    Python values of ``schema_columns``' types, each once.  As a stream it is its rows at the view's first
    computation and nothing after (Δ = rows at t = 0, then 0), so its integral is the constant."""

    rows: tuple[tuple, ...]
    schema_columns: Columns

    def __post_init__(self) -> None:
        if any(len(r) != len(self.schema_columns) for r in self.rows):
            raise FreshviewError("internal: a constant row differs in width from its columns")

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


JOIN_KINDS = ("left", "right", "full", "semi", "anti", "not_in")


@dataclass(frozen=True)
class LogicalJoin(Node):
    """An outer (``left``, ``right``, ``full``), semi-, anti- or NOT IN join, as SQL wrote it.

    Keys as ``Join``'s; ``residual`` is the rest of the ON condition over the
    left columns, then the right ones; ``pad`` the right columns' values on a
    LEFT JOIN's unmatched row (None: NULLs); ``not_in`` the (x over the left,
    y over the right) of ``x NOT IN (SELECT y ...)``.  Output: both sides'
    columns, only the left's for semi, anti and not_in.  No executor runs
    it: the rewrites move filters and prune columns around it, then
    ``plan.rewrite.joins.lower_joins`` lowers it into core nodes.
    """

    kind: str
    left: Node
    right: Node
    left_keys: tuple[Expr, ...]
    right_keys: tuple[Expr, ...]
    residual: Expr | None = None
    pad: tuple[Expr, ...] | None = None
    not_in: tuple[Expr, Expr] | None = None

    def __post_init__(self) -> None:
        if self.kind not in JOIN_KINDS:
            raise FreshviewError(f"internal: join kind {self.kind!r}")
        if len(self.left_keys) != len(self.right_keys):
            raise FreshviewError("internal: join key lists differ in length")
        _check_refs(self.left_keys, len(self.left.columns), "left join key")
        _check_refs(self.right_keys, len(self.right.columns), "right join key")
        if self.residual is not None:
            _check_refs([self.residual], len(self.left.columns) + len(self.right.columns), "join residual")
        if self.not_in is not None:
            _check_refs([self.not_in[0]], len(self.left.columns), "NOT IN operand")
            _check_refs([self.not_in[1]], len(self.right.columns), "NOT IN subquery column")

    def inputs(self) -> tuple[Node, ...]:
        return (self.left, self.right)

    @property
    def columns(self) -> Columns:
        if self.kind in ("semi", "anti", "not_in"):
            return self.left.columns
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
class Negate(_Unary):
    """Every row's weight times −1 (linear: Δ(−R) = −ΔR); outer, semi- and anti-joins are built with it."""


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


@dataclass(frozen=True)
class SortKey:
    """One ORDER BY key: an input column, its direction, and where NULLs go (``nulls_first`` None:
    PostgreSQL's default, NULLS LAST for ASC and NULLS FIRST for DESC)."""

    column: int
    descending: bool = False
    nulls_first: bool | None = None

    @property
    def nulls_go_first(self) -> bool:
        return self.descending if self.nulls_first is None else self.nulls_first


@dataclass(frozen=True)
class TopK(_Unary):
    """ORDER BY ``order`` OFFSET ``offset`` LIMIT ``limit`` (None: no limit), over the whole input.

    Tie rule (ORDER BY not a total order): rows equal in every key are ordered by all their
    columns, left to right, ascending with NULLs last, so the chosen rows are deterministic.
    """

    order: tuple[SortKey, ...]
    limit: int | None
    offset: int = 0

    def __post_init__(self) -> None:
        width = len(self.input.columns)
        if any(not 0 <= k.column < width for k in self.order):
            raise FreshviewError("internal: ORDER BY refers to a column outside its input")


@dataclass(frozen=True)
class FrameBound:
    """``kind``: unbounded_preceding, preceding, current_row, following, unbounded_following; ``offset``
    the distance of ``preceding``/``following``: rows (ROWS) or a value difference (RANGE)."""

    kind: str
    offset: int | Decimal = 0  # RANGE frames: in the ORDER BY key's units (numeric keys: a Decimal)


@dataclass(frozen=True)
class Frame:
    """A window frame: ``mode`` rows or range, between ``start`` and ``end``."""

    mode: str
    start: FrameBound
    end: FrameBound


DEFAULT_FRAME = Frame("range", FrameBound("unbounded_preceding"), FrameBound("current_row"))


@dataclass(frozen=True)
class WindowFunc:
    """One window function: ``func`` (row_number, rank, dense_rank, ntile, lag, lead, first_value,
    last_value, count_star, count, sum, avg, min, max) over input column ``arg``; ``n`` is NTILE's
    bucket count or LAG/LEAD's offset, ``default`` LAG/LEAD's default column (None: NULL)."""

    func: str
    arg: int | None
    type: SqlType
    n: int = 1
    default: int | None = None
    frame: Frame = DEFAULT_FRAME


@dataclass(frozen=True)
class Window(_Unary):
    """The input's columns, then one column per function, computed over PARTITION BY ``partition``
    (input columns; none: one partition) in ORDER BY ``order`` (ties as ``TopK``'s rule)."""

    partition: tuple[int, ...]
    order: tuple[SortKey, ...]
    functions: tuple[WindowFunc, ...]

    def __post_init__(self) -> None:
        width = len(self.input.columns)
        cols = list(self.partition) + [k.column for k in self.order]
        cols += [c for f in self.functions for c in (f.arg, f.default) if c is not None]
        if any(not 0 <= c < width for c in cols):
            raise FreshviewError("internal: window refers to a column outside its input")

    @property
    def columns(self) -> Columns:
        return self.input.columns + tuple((f"w{i}", f.type) for i, f in enumerate(self.functions))


@dataclass(frozen=True)
class Reweight(_Unary):
    """Each row's weight multiplied by ``weight``, an integer expression over the row (≥ 0 for the set
    operations that use it: INTERSECT/EXCEPT [ALL] over per-side counts); rows of weight 0 vanish."""

    weight: Expr

    def __post_init__(self) -> None:
        _check_refs([self.weight], len(self.input.columns), "reweight")


@dataclass(frozen=True)
class RecursiveRef(Node):
    """Inside a ``Recursive`` node's step: the working table (the rows the last iteration added)."""

    name: str
    schema_columns: Columns

    @property
    def columns(self) -> Columns:
        return self.schema_columns


@dataclass(frozen=True)
class ExternalRef(Node):
    """Inside a ``Recursive`` node's step: its ``externals[index]``, integrated."""

    index: int
    schema_columns: Columns

    @property
    def columns(self) -> Columns:
        return self.schema_columns


@dataclass(frozen=True)
class Recursive(Node):
    """WITH RECURSIVE ``name`` AS (anchor UNION [ALL] recursive term): the fixpoint of ``step``.

    ``step`` is the recursive term over two kinds of leaves: ``RecursiveRef``
    (the working table) and ``ExternalRef(i)`` (the parts of the recursive
    term that do not depend on the recursion, planned as ``externals[i]``).
    Its inputs are the anchor and the externals; ``step`` is evaluated, not
    incrementalized (``runtime.operators.recursive``).
    """

    name: str
    anchor: Node
    externals: tuple[Node, ...]
    step: Node
    distinct: bool  # UNION (True) or UNION ALL

    def __post_init__(self) -> None:
        if len(self.step.columns) != len(self.anchor.columns):
            raise FreshviewError("internal: recursive term and anchor differ in width")

    def inputs(self) -> tuple[Node, ...]:
        return (self.anchor, *self.externals)

    @property
    def columns(self) -> Columns:
        return self.anchor.columns


@dataclass(frozen=True)
class OuterRows(Node):
    """Inside a subquery correlated by non-equalities, while the query builder decorrelates it: the
    distinct values of its outer correlation expressions (one column each).  The builder replaces it with
    those rows (``sql.join_tree``) before any rewrite runs, so no rule or executor meets it."""

    index: int
    schema_columns: Columns

    @property
    def columns(self) -> Columns:
        return self.schema_columns


def with_inputs(node: Node, inputs: tuple[Node, ...] | list[Node]) -> Node:
    """``node`` over new ``inputs`` (in ``node.inputs()`` order); its shape checks run again."""
    inputs = tuple(inputs)
    if inputs == node.inputs():
        return node
    if isinstance(node, _Unary):
        return replace(node, input=inputs[0])
    if isinstance(node, (Join, LogicalJoin)):
        return replace(node, left=inputs[0], right=inputs[1])
    if isinstance(node, UnionAll):
        return replace(node, parts=inputs)
    if isinstance(node, Recursive):
        return replace(node, anchor=inputs[0], externals=inputs[1:])
    raise FreshviewError(f"internal: {type(node).__name__} has no inputs to replace")


def walk(node: Node):
    yield node
    for child in node.inputs():
        yield from walk(child)


def relations(node: Node) -> set[str]:
    return {n.relation for n in walk(node) if isinstance(n, Scan)}
