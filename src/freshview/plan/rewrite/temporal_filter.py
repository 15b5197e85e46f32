"""Schedule ``now()``: each filter that reads the step's time becomes a ``TemporalFilter``; elsewhere it is refused.

    σ_{ts > now() - interval '30 days'}(R)
      → TemporalFilter_{NOT(now >= ts + 30 days)}(R)        bounds: (ts + 30 days)
    σ_{d >= current_date AND qty > 0}(R)
      → TemporalFilter_{NOT(now >= date_trunc(day, d) + 1 day)}(σ_{qty > 0}(R))

Each comparison ``x op g(now)`` of a row's value ``x`` with a time expression ``g`` that is
non-decreasing in ``now`` (``plan.temporal``) is rewritten over atoms ``now >= B(y)``, where ``y`` is
``x`` as a timestamp and ``B(y)`` the first instant at which ``g(now) > y``:

    y <  g  ⇔  now >= B(y)              y >= g  ⇔  NOT(now >= B(y))
    y <= g  ⇔  now >= B(y − 1µs)        y >  g  ⇔  NOT(now >= B(y − 1µs))
    y =  g  ⇔  y >= g AND y <= g        y <> g  ⇔  NOT(y = g)

(µs-exact, as timestamps are).  ``B`` follows ``g``'s shape, innermost last:

    g = now                      B(z) = z + 1µs
    g = h + c  (c: days, µs)     B(z) = B_h(z − c)
    g = date_trunc(u, h)         B(z) = B_h(date_trunc(u, z) + 1u − 1µs)     (current_date, now()::date: u = day)
    g = a cast between date, timestamp, timestamptz (UTC): B_h

Every atom is NULL exactly when ``x`` is, so AND/OR/NOT/CASE around the comparisons keep SQL's
three-valued logic; the predicate's conjuncts that do not read ``now`` stay a plain ``Filter`` below.
An interval with months (``now() - interval '1 month'``: months are not a fixed span), a comparison of
two time expressions, and ``now()`` anywhere but such a comparison inside a filter (the SELECT list, a
GROUP BY key, an aggregate's argument, a join key, ``extract(hour from now())``) are refused at the
``now()`` written.  This rule runs last (after ``prune`` and ``merge_projects``), so the other rules move
the time conjuncts like any other (down to the relation whose columns they read).
"""

from __future__ import annotations

from dataclasses import fields, replace

from freshview.errors import UnsupportedSqlError
from freshview.plan import nodes as pn
from freshview.plan.expr import AggCall, Call, Cast, ColumnRef, Expr, Literal, conjoin, conjuncts
from freshview.plan.temporal import TIME, Now, TemporalFilter, reads_now
from freshview.schema import SqlType

BOOL = SqlType("bool")
INT8 = SqlType("int8")
_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "=", "<>": "<>"}
_TIMES = ("timestamp", "timestamptz")
_DAY = 86_400_000_000
# date_trunc units: a fixed span in µs, or a number of months
_SPANS = {"microseconds": (0, 1), "milliseconds": (0, 1000), "second": (0, 1_000_000), "minute": (0, 60_000_000),
          "hour": (0, 3_600_000_000), "day": (0, _DAY), "week": (0, 7 * _DAY), "month": (1, 0),
          "quarter": (3, 0), "year": (12, 0), "decade": (120, 0), "century": (1200, 0), "millennium": (12000, 0)}

WHERE_NOW_WORKS = ("a time-based view reads now() (current_timestamp, current_date, localtimestamp ...) only in "
                   "WHERE, HAVING or ON comparisons with a row's values that move monotonically with time, "
                   "such as ts > now() - interval '30 days' or d >= current_date")


def temporal_filter(plan: pn.Node) -> pn.Node:
    """``plan`` with its filters on ``now()`` scheduled (module docstring); ``now()`` elsewhere refused."""
    node = pn.with_inputs(plan, [temporal_filter(c) for c in plan.inputs()])
    if isinstance(node, pn.Recursive):
        _refuse_in(node.step, "in a recursive term (WITH RECURSIVE)")
    if isinstance(node, pn.Filter) and reads_now(node.predicate) is not None:
        return _schedule(node)
    for e in _exprs(node):
        now = reads_now(e)
        if now is not None:
            raise _refusal(now, _context(node, e))
    return node


def _refuse_in(node: pn.Node, context: str) -> None:
    for n in pn.walk(node):
        for e in _exprs(n):
            now = reads_now(e)
            if now is not None:
                raise _refusal(now, context)


def _exprs(node: pn.Node):
    """Every scalar expression a node holds (its fields, generically)."""
    def flat(v):
        if isinstance(v, Expr):
            yield v
        elif isinstance(v, AggCall):
            yield from v.exprs()
        elif isinstance(v, tuple):
            for x in v:
                yield from flat(x)
    for f in fields(node):
        yield from flat(getattr(node, f.name))


def _context(node: pn.Node, e: Expr) -> str:
    if isinstance(node, pn.Project):
        return "in the SELECT list"
    if isinstance(node, pn.Aggregate):
        return "in a GROUP BY key" if any(e is g for g in node.group) else "in an aggregate's argument"
    if isinstance(node, pn.Join):
        return "in a join key"
    return f"in a {type(node).__name__}"


def _refusal(now: Now, context: str, why: str = "its value there changes at every instant") -> UnsupportedSqlError:
    return UnsupportedSqlError(f"{now.spelling} {context} cannot be scheduled: {why}; {WHERE_NOW_WORKS}", now.where)


# ---------------------------------------------------------------------------------------------- the filter
def _schedule(node: pn.Filter) -> pn.Node:
    parts = conjuncts(node.predicate)
    plain = [c for c in parts if reads_now(c) is None]
    width = len(node.input.columns)
    bounds: list[Expr] = []
    timed = [_Atoms(width, bounds).rewrite(c) for c in parts if reads_now(c) is not None]
    inner = pn.Filter(node.input, conjoin(plain)) if plain else node.input  # type: ignore[arg-type]
    return TemporalFilter(inner, conjoin(timed), tuple(bounds))  # type: ignore[arg-type]


class _Atoms:
    def __init__(self, width: int, bounds: list[Expr]) -> None:
        self.now = ColumnRef(TIME, width, "now")
        self.bounds = bounds

    def rewrite(self, e: Expr) -> Expr:
        if isinstance(e, Call) and e.op in _FLIP and len(e.args) == 2:
            a, b = e.args
            if (reads_now(a) is None) != (reads_now(b) is None):
                x, g, op = (a, b, e.op) if reads_now(a) is None else (b, a, _FLIP[e.op])
                y = _as_time(x)
                if g.type.is_temporal:
                    if y is None:
                        raise _refusal(reads_now(g), f"compared in {e}",  # type: ignore[arg-type]
                                       "the comparison is not between a row's date or time and a time")
                    return self.compare(op, y, g)
                # (not a time: CASE WHEN ts > now() THEN 1 END = 1 holds its comparisons further in)
        if isinstance(e, Now):
            raise _refusal(e, "outside a comparison with a row's value")
        return e.map_children(self.rewrite)

    def compare(self, op: str, y: Expr, g: Expr) -> Expr:
        """``y op g(now)`` over atoms (module docstring)."""
        if op == "=":
            return Call(BOOL, "and", (self.compare(">=", y, g), self.compare("<=", y, g)))
        if op == "<>":
            return _not(self.compare("=", y, g))
        z = _plus(y, 0, 0, -1) if op in (">", "<=") else y
        atom = self.atom(threshold(g, z))
        return atom if op in ("<", "<=") else _not(atom)

    def atom(self, bound: Expr) -> Expr:
        if bound not in self.bounds:
            self.bounds.append(bound)
        return Call(BOOL, ">=", (self.now, bound))


def threshold(g: Expr, z: Expr) -> Expr:
    """B(z): the first instant at which ``g(now) > z``, over ``z`` (a timestamp); ``g`` a time expression of
    ``now``.  Raises the refusal when ``g`` is not of a shape this rule inverts."""
    if isinstance(g, Now):
        return _plus(z, 0, 0, 1)
    if isinstance(g, Cast) and g.arg.type.kind in _TIMES + ("date",) and g.type.kind in _TIMES + ("date",):
        if g.type.kind == "date" and g.arg.type.kind != "date":
            return threshold(g.arg, _next_unit(z, "day"))
        return threshold(g.arg, z)
    if isinstance(g, Call) and g.op == "add_interval" and len(g.args) == 4:
        months, days, micros = (a.value if isinstance(a, Literal) else None for a in g.args[1:])  # type: ignore[attr-defined]
        if months == 0 and isinstance(days, int) and isinstance(micros, int):
            return threshold(g.args[0], _plus(z, 0, -days, -micros))
        raise _refusal(reads_now(g), "moved by an interval of months or a non-constant interval",  # type: ignore[arg-type]
                       "a month is not a fixed span (write the interval in days)")
    if isinstance(g, Call) and g.op in ("+", "-") and g.type.kind == "date" and len(g.args) == 2:
        days = g.args[1]
        if isinstance(days, Literal) and isinstance(days.value, int) and not isinstance(days.value, bool):
            return threshold(g.args[0], _plus(z, 0, -days.value if g.op == "+" else days.value, 0))
    if isinstance(g, Call) and g.op == "date_trunc" and g.param in _SPANS:
        return threshold(g.args[0], _next_unit(z, g.param))
    raise _refusal(reads_now(g), f"in {g}", "that does not move monotonically with time")  # type: ignore[arg-type]


def _next_unit(z: Expr, unit: str) -> Expr:
    """The last instant of ``z``'s ``unit``: date_trunc(unit, z) + 1 unit − 1µs."""
    months, micros = _SPANS[unit]
    floor = z if unit == "microseconds" else Call(TIME, "date_trunc", (z,), unit)
    return _plus(floor, months, 0, micros - 1)


def _plus(z: Expr, months: int, days: int, micros: int) -> Expr:
    """z + (months, days, µs), one ``add_interval`` (consecutive ones without months summed)."""
    if isinstance(z, Call) and z.op == "add_interval" and not months:  # days and µs commute (UTC)
        months = z.args[1].value  # type: ignore[attr-defined]
        z, days, micros = z.args[0], days + z.args[2].value, micros + z.args[3].value  # type: ignore[attr-defined]
    if months == days == micros == 0:
        return z
    return Call(TIME, "add_interval", (z, Literal(INT8, months), Literal(INT8, days), Literal(INT8, micros)))


def _not(e: Expr) -> Expr:
    return Call(BOOL, "not", (e,))


def _as_time(x: Expr) -> Expr | None:
    """A row's value compared with a time, as a ``timestamp`` (UTC): dates at midnight."""
    while isinstance(x, Cast) and x.type.kind in _TIMES and x.arg.type.kind in _TIMES + ("date",):
        x = x.arg
    if x.type.kind == "timestamp":
        return x
    if x.type.kind in ("timestamptz", "date"):
        return Cast(TIME, x)
    return None


__all__ = ["temporal_filter", "threshold"]
