"""What an expression is bound against: the FROM items of the query being built, the columns in scope,
and the aggregate calls collected on the way (``bind_expr.ExprBinder``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from freshview.plan import nodes as pn
from freshview.plan.expr import AggCall, ColumnRef, Expr
from freshview.schema import SqlType

AGG_BASE = 1_000_000  # placeholder column indices for aggregate results


@dataclass
class FromItem:
    """A FROM item of the query being built: its alias, plan, and first column's index in the wide row."""

    alias: str
    node: pn.Node
    offset: int
    relations: tuple[str, ...] | None = None  # a parenthesised join: each column's own alias (sql.paren_joins)
    hidden: int = 0  # LATERAL: its first columns, the outer values it was computed for, out of scope (sql.lateral)
    lateral: tuple | None = None  # LATERAL: (placeholder, outer expressions over the wide row, pad or None)
    srf: tuple | None = None  # set-returning functions over the items before: (SrfCall args over the wide row, ordinality) (sql.srf)

    def relation(self, i: int) -> str:
        return self.relations[i] if self.relations is not None else self.alias


@dataclass
class ScopeColumn:
    relation: str  # alias of the FROM item
    name: str
    type: SqlType
    index: int  # position in the wide (all FROM items) row


@dataclass
class Scope:
    columns: list[ScopeColumn] = field(default_factory=list)
    aliases: dict[str, SqlType] = field(default_factory=dict)  # SELECT aliases usable in GROUP BY
    merged: dict[str, Expr] = field(default_factory=dict)  # JOIN USING: unqualified name -> merged column
    hidden: set[int] = field(default_factory=set)  # JOIN USING: columns an unqualified name no longer reaches

    def resolve(self, name: str, qualifier: str | None) -> list[ScopeColumn]:
        return [
            c for c in self.columns
            if c.name == name and (qualifier is None or c.relation == qualifier)
        ]

    def relation_names(self) -> set[str]:
        return {c.relation for c in self.columns}


class AggCollector:
    """Collects aggregate calls; returns placeholder references to their results."""

    def __init__(self) -> None:
        self.aggs: list[AggCall] = []

    def add(self, agg: AggCall) -> Expr:
        if agg not in self.aggs:
            self.aggs.append(agg)
        return ColumnRef(agg.type, AGG_BASE + self.aggs.index(agg), str(agg))
