"""Fold constant date/time ± interval, compare a date with a midnight constant as dates, and fold NULL tests.

    d >= DATE '1994-01-01' + INTERVAL '1' YEAR
      bound:  CAST(d AS timestamp) >= add_interval(TIMESTAMP '1994-01-01 00:00', 12, 0, 0)
      folded: d >= DATE '1995-01-01'

``add_interval`` of constants is computed as PostgreSQL does (months first,
the day clamped to the month's end, then days and microseconds); a
comparison of a date, widened to a timestamp, with a midnight timestamp
constant becomes a comparison of dates, so no row is cast and the conjunct
stays a plain column comparison (a join key, a pushed-down filter).
``IS [NOT] NULL`` of a constant and a comparison with a NULL constant are
folded too: ``pushdown`` uses ``fold`` on a WHERE conjunct it rewrites over
the NULL-padded branch of an outer join (``r.x IS NULL`` is true there).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

from freshview.plan import nodes as pn
from freshview.plan.expr import AggCall, Call, Cast, Expr, Literal
from freshview.plan.functions import COMPARISONS
from freshview.plan.rewrite.bottom_up import BottomUp
from freshview.schema import SqlType

DATE = SqlType("date")


def fold_constants(plan: pn.Node) -> pn.Node:
    """``plan`` with every expression's constant date arithmetic folded."""
    return _Fold()(plan)


def fold(e: Expr) -> Expr:
    """One expression, folded bottom-up."""
    e = e.map_children(fold)
    if isinstance(e, Call) and e.op == "add_interval":
        return _add_interval(e)
    if isinstance(e, Call) and e.op == "is_null" and isinstance(e.args[0], Literal):
        return Literal(e.type, e.args[0].value is None)
    if isinstance(e, Call) and e.op in COMPARISONS and any(_null(a) for a in e.args):
        return Literal(e.type, None)  # strict: NULL compared with anything is NULL
    if isinstance(e, Call) and e.op in COMPARISONS and len(e.args) == 2:
        a, b = e.args
        if _widened_date(a) and _midnight(b):
            return Call(e.type, e.op, (a.arg, Literal(DATE, b.value.date())))  # type: ignore[attr-defined]
        if _widened_date(b) and _midnight(a):
            return Call(e.type, e.op, (Literal(DATE, a.value.date()), b.arg))  # type: ignore[attr-defined]
    return e


def _null(e: Expr) -> bool:
    return isinstance(e, Literal) and e.value is None


def _widened_date(e: Expr) -> bool:
    return isinstance(e, Cast) and e.type.kind == "timestamp" and e.arg.type.kind == "date"


def _midnight(e: Expr) -> bool:
    return (isinstance(e, Literal) and e.type.kind == "timestamp" and isinstance(e.value, dt.datetime)
            and e.value.time() == dt.time(0))


def _add_interval(e: Call) -> Expr:
    if not all(isinstance(a, Literal) for a in e.args):
        return e
    start, months, days, micros = (a.value for a in e.args)  # type: ignore[attr-defined]
    if None in (start, months, days, micros):
        return Literal(e.type, None)
    if not isinstance(start, dt.datetime):
        start = dt.datetime(start.year, start.month, start.day)
    total = start.month - 1 + months
    year, month = start.year + total // 12, total % 12 + 1
    if not 1 <= year <= 9999:
        return e  # out of Python's range: left to the evaluator, which reports it
    day = min(start.day, _days_in_month(year, month))  # PostgreSQL clamps to the month's end
    try:
        moved = start.replace(year=year, month=month, day=day) + dt.timedelta(days=days, microseconds=micros)
    except OverflowError:
        return e
    return Literal(e.type, moved)


def _days_in_month(year: int, month: int) -> int:
    nxt = dt.date(year + month // 12, month % 12 + 1, 1)
    return (nxt - dt.timedelta(days=1)).day


def _fold_agg(a: AggCall) -> AggCall:
    return a.map_exprs(fold)


class _Fold(BottomUp):
    def visit_Filter(self, node: pn.Filter) -> pn.Node:
        return pn.Filter(node.input, fold(node.predicate))

    def visit_Project(self, node: pn.Project) -> pn.Node:
        return pn.Project(node.input, tuple(map(fold, node.exprs)), node.names)

    def visit_Join(self, node: pn.Join) -> pn.Node:
        return pn.Join(node.left, node.right, tuple(map(fold, node.left_keys)), tuple(map(fold, node.right_keys)))

    def visit_LogicalJoin(self, node: pn.LogicalJoin) -> pn.Node:
        return replace(node, left_keys=tuple(map(fold, node.left_keys)), right_keys=tuple(map(fold, node.right_keys)),
                       residual=fold(node.residual) if node.residual is not None else None)

    def visit_Aggregate(self, node: pn.Aggregate) -> pn.Node:
        return pn.Aggregate(node.input, tuple(map(fold, node.group)), tuple(map(_fold_agg, node.aggs)),
                            node.group_names)

    def visit_Reweight(self, node: pn.Reweight) -> pn.Node:
        return pn.Reweight(node.input, fold(node.weight))


__all__ = ["fold_constants", "fold"]
