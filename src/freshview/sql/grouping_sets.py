"""``GROUP BY GROUPING SETS / ROLLUP / CUBE``, MySQL's ``WITH ROLLUP``, and ``GROUPING(...)``.

A GROUP BY with grouping sets is the UNION ALL of one aggregation per set
(PostgreSQL's definition):

    ⋃_j  π_{g ∈ S_j ? g : NULL, aggs, GROUPING consts_j}(Aggregate_{S_j}(R))

over the list of every grouping expression (in order of first appearance),
each branch giving NULL for the expressions its set does not group by and
the value of each ``GROUPING(e1, ..., en)`` call in that set (bit n-1-i set
when ei is not grouped).  GROUP BY elements combine as PostgreSQL's do:
``a, ROLLUP(b, c)`` is the product {a} × {(b, c), (b), ()}; ``CUBE`` is every
subset, ``GROUPING SETS`` the union of its elements' sets; duplicates stay
(they give duplicate rows, as in PostgreSQL); the empty set gives one row
even over no rows.  HAVING filters the union's rows.  **Delta rule**: none
of its own: Δ of a union is the union of the Δs, each Aggregate maintained by
its rule (``runtime.operators.aggregate``).
"""

from __future__ import annotations

from itertools import combinations

from sqlglot import exp

from freshview.errors import SqlError
from freshview.plan import nodes as pn
from freshview.plan import typing as ty
from freshview.plan.expr import Call, ColumnRef, Expr, Literal
from freshview.sql.parse import locate

MAX_SETS = 64


def expand(group: exp.Group, sql: str) -> tuple[list[exp.Expression], list[tuple[int, ...]]] | None:
    """The grouping expressions and the sets (indices into them) of ``group``, or None for a plain GROUP BY."""
    rollup_all = bool(group.args.get("rollup")) and not any(
        isinstance(e, (exp.Rollup, exp.Cube, exp.GroupingSets)) for e in group.expressions)
    if not rollup_all and not any(isinstance(e, (exp.Rollup, exp.Cube, exp.GroupingSets))
                                  for e in group.expressions) and not group.args.get("cube") \
            and not group.args.get("grouping_sets"):
        return None
    exprs: list[exp.Expression] = []
    texts: list[str] = []

    def index(e: exp.Expression) -> int:
        text = e.sql(dialect="postgres")
        if text not in texts:
            texts.append(text)
            exprs.append(e)
        return texts.index(text)

    def unit(e: exp.Expression) -> tuple[int, ...]:  # one ROLLUP/CUBE element: an expression or (e1, e2)
        if isinstance(e, exp.Tuple):
            return tuple(index(x) for x in e.expressions)
        if isinstance(e, exp.Paren) and isinstance(e.this, exp.Tuple):
            return unit(e.this)
        return (index(e.this if isinstance(e, exp.Paren) else e),)

    def sets_of(e: exp.Expression) -> list[tuple[int, ...]]:
        if isinstance(e, exp.Rollup):
            units = [unit(x) for x in e.expressions]
            return [tuple(i for u in units[:n] for i in u) for n in range(len(units), -1, -1)]
        if isinstance(e, exp.Cube):
            units = [unit(x) for x in e.expressions]
            return [tuple(i for k in chosen for i in units[k])
                    for n in range(len(units), -1, -1) for chosen in combinations(range(len(units)), n)]
        if isinstance(e, exp.GroupingSets):
            return [s for x in e.expressions for s in sets_of(x)]
        return [unit(e)]

    if rollup_all:  # MySQL: GROUP BY a, b WITH ROLLUP
        elements = [exp.Rollup(expressions=list(group.expressions))]
    else:
        elements = list(group.expressions)
        for key, kind in (("grouping_sets", exp.GroupingSets), ("cube", exp.Cube), ("rollup", exp.Rollup)):
            for e in group.args.get(key) or []:
                elements.append(e if isinstance(e, kind) else kind(expressions=list(e.expressions)))
    sets: list[tuple[int, ...]] = [()]
    for e in elements:
        sets = [a + b for a in sets for b in sets_of(e)]
        if len(sets) > MAX_SETS:
            raise SqlError(f"more than {MAX_SETS} grouping sets", locate(group, sql), sql)
    return exprs, [tuple(dict.fromkeys(s)) for s in sets]


def grouping_calls(exprs: list[Expr | None]) -> list[Call]:
    """The distinct ``GROUPING(...)`` calls in ``exprs`` (bound as ``Call(op="grouping")``), in order."""
    found: list[Call] = []

    def visit(e: Expr) -> None:
        if isinstance(e, Call) and e.op == "grouping":
            if e not in found:
                found.append(e)
            return
        for c in e.children():
            visit(c)

    for e in exprs:
        if e is not None:
            visit(e)
    return found


def grouping_value(call: Call, group_exprs: list[Expr], grouped: tuple[int, ...], origin, sql: str) -> int:
    value = 0
    for arg in call.args:
        if arg not in group_exprs:
            raise SqlError("arguments to GROUPING must be grouping expressions of the associated query level",
                           locate(origin, sql), sql)
        value = value * 2 + (0 if group_exprs.index(arg) in grouped else 1)
    return value


def aggregate(plan: pn.Node, group: list[Expr], aggs, names: list[str], sets: list[tuple[int, ...]],
              calls: list[Call], group_exprs: list[Expr], spelled: dict[int, int], origin, sql: str) -> pn.Node:
    """The union of one Aggregate per set: columns the grouping expressions, the aggregates, then one per
    GROUPING call (``group`` over ``plan``; ``group_exprs`` the same as bound, for GROUPING's arguments;
    ``spelled``: aggregate j is the spelling of grouping expression i under a MySQL collation
    (``sql.collate_groups``), NULL where i is not grouped)."""
    parts = []
    for s in sets:
        agg = pn.Aggregate(plan, tuple(group[i] for i in s), tuple(aggs), tuple(names[i] for i in s))
        cols: list[Expr] = [ColumnRef(g.type, s.index(i), names[i]) if i in s else Literal(g.type, None)
                            for i, g in enumerate(group)]
        cols += [Literal(a.type, None) if j in spelled and spelled[j] not in s else
                 ColumnRef(a.type, len(s) + j, f"agg{j}") for j, a in enumerate(aggs)]
        cols += [Literal(ty.INT4, grouping_value(c, group_exprs, s, origin, sql)) for c in calls]
        parts.append(pn.Project(agg, tuple(cols), tuple(names) + tuple(f"agg{j}" for j in range(len(aggs)))
                                + tuple(f"grouping{k}" for k in range(len(calls)))))
    return parts[0] if len(parts) == 1 else pn.UnionAll(tuple(parts))


__all__ = ["expand", "grouping_calls", "grouping_value", "aggregate"]
