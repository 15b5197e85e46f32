"""Typed scalar expressions of the logical plan.

Columns are referenced by position in the input relation, so rewrites never
depend on names.  Every node carries its PostgreSQL result type.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar

from freshview.plan.aggregates import AGGREGATES, AggregateDef, aggregate
from freshview.plan.functions import FUNCTIONS, FunctionDef, function
from freshview.schema import SqlType


@dataclass(frozen=True)
class Expr:
    type: SqlType
    is_literal: ClassVar[bool] = False  # (true of ``Literal`` only: for plan.functions, below this module)

    def children(self) -> tuple["Expr", ...]:
        return ()

    def map_children(self, fn: Callable[["Expr"], "Expr"]) -> "Expr":
        return self


@dataclass(frozen=True)
class ColumnRef(Expr):
    index: int
    name: str = ""

    def __str__(self) -> str:
        return f"${self.index}" + (f"({self.name})" if self.name else "")


@dataclass(frozen=True)
class Literal(Expr):
    value: Any
    is_literal: ClassVar[bool] = True

    def __str__(self) -> str:
        return "NULL" if self.value is None else repr(self.value)


@dataclass(frozen=True)
class Call(Expr):
    """An operator or function: ``op`` names its ``FunctionDef`` in ``plan.functions`` (``+``, ``and``,
    ``lower``, ``extract``); ``param`` is a parameterised function's parameter (EXTRACT's field
    ``year``, date_trunc's unit, a collation), "" for the others.  A name not registered, a wrong
    number of arguments or a missing parameter is refused here (a binder bug, never a user's error)."""

    op: str
    args: tuple[Expr, ...]
    param: str = ""

    def __post_init__(self) -> None:
        function(self.op).check(self)

    @property
    def definition(self) -> FunctionDef:
        return FUNCTIONS[self.op]

    def children(self) -> tuple[Expr, ...]:
        return self.args

    def map_children(self, fn: Callable[[Expr], Expr]) -> Expr:
        return Call(self.type, self.op, tuple(fn(a) for a in self.args), self.param)

    def __str__(self) -> str:  # (explain text: ``extract:year($0)``, as before the registry)
        name = f"{self.op}:{self.param}" if self.param else self.op
        return f"{name}({', '.join(map(str, self.args))})"


@dataclass(frozen=True)
class Case(Expr):
    whens: tuple[tuple[Expr, Expr], ...]
    default: Expr | None

    def children(self) -> tuple[Expr, ...]:
        out: list[Expr] = []
        for cond, value in self.whens:
            out += [cond, value]
        if self.default is not None:
            out.append(self.default)
        return tuple(out)

    def map_children(self, fn: Callable[[Expr], Expr]) -> Expr:
        return Case(
            self.type,
            tuple((fn(c), fn(v)) for c, v in self.whens),
            fn(self.default) if self.default is not None else None,
        )

    def __str__(self) -> str:
        parts = " ".join(f"WHEN {c} THEN {v}" for c, v in self.whens)
        tail = f" ELSE {self.default}" if self.default is not None else ""
        return f"CASE {parts}{tail} END"


@dataclass(frozen=True)
class Cast(Expr):
    arg: Expr

    def children(self) -> tuple[Expr, ...]:
        return (self.arg,)

    def map_children(self, fn: Callable[[Expr], Expr]) -> Expr:
        return Cast(self.type, fn(self.arg))

    def __str__(self) -> str:
        return f"CAST({self.arg} AS {self.type})"


@dataclass(frozen=True)
class AggOrder:
    """One ``ORDER BY`` key inside an aggregate call (``string_agg(x, ',' ORDER BY y DESC)``)."""

    expr: Expr
    desc: bool = False
    nulls_first: bool = False

    def __str__(self) -> str:
        return f"{self.expr}{' DESC' if self.desc else ''}{' NULLS FIRST' if self.nulls_first else ''}"


@dataclass(frozen=True)
class AggCall:
    """An aggregate: ``func`` names its ``AggregateDef`` in ``plan.aggregates`` (count_star, count, sum,
    avg, min, max, bool_and, bool_or, var_samp, var_pop, stddev_samp, stddev_pop, string_agg, array_agg or
    spelling: MIN of text whose group is a collation key, the spelling a MySQL collation group shows,
    ``sql.collate_groups``).

    ``distinct``: over the distinct non-NULL values of ``arg`` (count, sum, avg, var/stddev, string_agg;
    array_agg: over the distinct values, NULL one of them).
    ``order``: string_agg's and array_agg's ORDER BY keys; ``separator``: string_agg's (constant) delimiter.
    FILTER (WHERE p) is bound away: ``arg`` becomes ``CASE WHEN p THEN arg END`` (not for array_agg).
    """

    func: str
    arg: Expr | None
    type: SqlType
    distinct: bool = False
    order: tuple[AggOrder, ...] = ()
    separator: str | None = None

    def __post_init__(self) -> None:
        aggregate(self.func).check(self)

    @property
    def definition(self) -> AggregateDef:
        return AGGREGATES[self.func]

    @property
    def recomputed(self) -> bool:
        """Whether the operator recomputes it per touched group from the group's stored values
        (string_agg, array_agg: their result depends on every value and its order)."""
        return AGGREGATES[self.func].state == "values"

    def exprs(self) -> tuple[Expr, ...]:
        """Every expression over the input row: the argument, then the ORDER BY keys."""
        return ((self.arg,) if self.arg is not None else ()) + tuple(o.expr for o in self.order)

    def map_exprs(self, fn: Callable[[Expr], Expr]) -> "AggCall":
        return AggCall(self.func, fn(self.arg) if self.arg is not None else None, self.type, self.distinct,
                       tuple(AggOrder(fn(o.expr), o.desc, o.nulls_first) for o in self.order), self.separator)

    def __str__(self) -> str:
        inner = ("DISTINCT " if self.distinct else "") + ("" if self.arg is None else str(self.arg))
        if self.separator is not None:
            inner += f", {self.separator!r}"
        if self.order:
            inner += " ORDER BY " + ", ".join(map(str, self.order))
        return f"{self.func}({inner})"


def columns_used(expr: Expr) -> set[int]:
    if isinstance(expr, ColumnRef):
        return {expr.index}
    out: set[int] = set()
    for child in expr.children():
        out |= columns_used(child)
    return out


def remap_columns(expr: Expr, mapping: dict[int, int]) -> Expr:
    """Renumber column references (used when columns are pruned or sides reordered)."""
    if isinstance(expr, ColumnRef):
        return ColumnRef(expr.type, mapping[expr.index], expr.name)
    return expr.map_children(lambda e: remap_columns(e, mapping))


def substitute(expr: Expr, mapping: dict[int, Expr]) -> Expr:
    """``expr`` with column ``i`` replaced by ``mapping[i]`` (columns not in ``mapping`` stay)."""
    if isinstance(expr, ColumnRef):
        return mapping.get(expr.index, expr)
    return expr.map_children(lambda e: substitute(e, mapping))


def conjuncts(expr: Expr) -> list[Expr]:
    if isinstance(expr, Call) and expr.op == "and":
        out: list[Expr] = []
        for a in expr.args:
            out += conjuncts(a)
        return out
    return [expr]


def conjoin(parts: list[Expr]) -> Expr | None:
    if not parts:
        return None
    out = parts[0]
    for p in parts[1:]:
        out = Call(SqlType("bool"), "and", (out, p))
    return out
