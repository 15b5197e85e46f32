"""Front end of top-k (ORDER BY … LIMIT/OFFSET, FETCH FIRST) and window functions (… OVER (…)).

Window calls are bound like aggregate calls: the SELECT binder hands each
``exp.Window`` to a ``WindowCollector``, which binds the function, its
PARTITION BY, ORDER BY and frame, and returns a placeholder column
(``WIN_BASE + i``).  After FROM/WHERE/GROUP BY/HAVING are built,
``finish_select`` projects every expression the windows read as a column,
appends one ``Window`` node per distinct (PARTITION BY, ORDER BY), rewrites
the placeholders to the window columns, then applies DISTINCT and, with
LIMIT or OFFSET, a ``TopK`` (ORDER BY expressions not in the SELECT list
ride along as hidden columns, projected away above it), as PostgreSQL
orders these steps.

ORDER BY without LIMIT/OFFSET is ignored here (a view's rows have no order).
Refused with their position: named windows (``OVER w``, WINDOW clause),
GROUPS frames, EXCLUDE, RANGE offsets over date/time keys (interval
offsets), FILTER, IGNORE NULLS,
NTH_VALUE/PERCENT_RANK/CUME_DIST, non-constant LIMIT/OFFSET/NTILE/LAG
offsets, FETCH … WITH TIES or PERCENT, and window functions outside the
SELECT list and ORDER BY (PostgreSQL refuses those in WHERE itself).
"""

from __future__ import annotations

import decimal
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sqlglot import exp

from freshview.errors import SqlError, UnsupportedSqlError
from freshview.plan import nodes as pn
from freshview.plan.expr import Cast, ColumnRef, Expr, columns_used
from freshview.schema import SqlType
from freshview.plan import typing as ty
from freshview.sql.parse import locate

if TYPE_CHECKING:
    from freshview.sql.context import QueryContext

WIN_BASE = 3_000_000  # placeholder column indices for window results (above AGG_BASE and subqueries' POST_AGG_BASE)

_RANKING = {exp.RowNumber: "row_number", exp.Rank: "rank", exp.DenseRank: "dense_rank"}
_VALUE = {exp.FirstValue: "first_value", exp.LastValue: "last_value"}
_AGGREGATE = {exp.Count: "count", exp.Sum: "sum", exp.Avg: "avg", exp.Min: "min", exp.Max: "max"}
_REFUSED = {exp.NthValue: "NTH_VALUE", exp.PercentRank: "PERCENT_RANK", exp.CumeDist: "CUME_DIST",
            exp.IgnoreNulls: "IGNORE NULLS", exp.RespectNulls: "RESPECT NULLS", exp.Filter: "FILTER (WHERE ...)"}


def _unsupported(node: exp.Expression | None, sql: str, what: str, keyword: str | None = None) -> UnsupportedSqlError:
    return UnsupportedSqlError(f"{what} is not supported", locate(node, sql, keyword), sql)


@dataclass
class WindowCall:
    """One bound window call, its expressions over the SELECT's wide row (until ``localize``d)."""

    func: str
    type: SqlType
    arg: Expr | None
    partition: tuple[Expr, ...]
    order: tuple[tuple[Expr, bool, bool], ...]  # (expr, descending, nulls first)
    frame: pn.Frame
    n: int = 1
    default: Expr | None = None

    def exprs(self) -> list[Expr]:
        out = list(self.partition) + [e for e, _, _ in self.order]
        return out + [e for e in (self.arg, self.default) if e is not None]

    def mapped(self, fn) -> "WindowCall":
        return WindowCall(self.func, self.type, fn(self.arg) if self.arg is not None else None,
                          tuple(fn(e) for e in self.partition), tuple((fn(e), d, nf) for e, d, nf in self.order),
                          self.frame, self.n, fn(self.default) if self.default is not None else None)


@dataclass
class WindowCollector:
    """Collects the window calls of one SELECT; returns placeholder references to their results."""

    sql: str
    calls: list[WindowCall] = field(default_factory=list)

    def add(self, binder, node: exp.Window) -> Expr:
        call = self._bind(binder, node)
        self.calls.append(call)
        return ColumnRef(call.type, WIN_BASE + len(self.calls) - 1, call.func)

    def exprs(self) -> list[Expr]:
        return [e for c in self.calls for e in c.exprs()]

    # ------------------------------------------------------------------ binding
    def _bind(self, binder, node: exp.Window) -> WindowCall:
        from freshview.sql.bind_expr import ExprBinder

        sql = self.sql
        if node.args.get("alias") is not None or isinstance(node.this, exp.Identifier):
            raise _unsupported(node, sql, "a named window (OVER name, WINDOW clause)", "OVER")
        inner = ExprBinder(binder.scope, sql, binder.aggs, "a window function's argument", binder.dialect)  # no nested windows
        # a partition is a group: text partitions by its collation key (MySQL; sql.collate_groups)
        partition = tuple(inner.collated(p, inner.bind(p))[0] for p in node.args.get("partition_by") or [])
        order = tuple(self._ordered(inner, o) for o in (node.args["order"].expressions if node.args.get("order") else []))
        frame = self._frame(node, order)
        fn = node.this
        for cls, what in _REFUSED.items():
            if isinstance(fn, cls):
                raise _unsupported(fn, sql, f"{what} in a window function")
        for cls, name in _RANKING.items():
            if isinstance(fn, cls):
                if fn.expressions or fn.args.get("this") is not None:
                    raise SqlError(f"function {name} takes no arguments", locate(fn, sql), sql)
                return WindowCall(name, ty.INT8, None, partition, order, frame)
        if isinstance(fn, exp.Ntile):
            n = self._constant_int(fn.this, "NTILE's argument")
            if n is None:
                raise _unsupported(fn, sql, "NTILE(NULL)")
            if n <= 0:
                raise SqlError("argument of ntile must be greater than zero", locate(fn, sql), sql)
            return WindowCall("ntile", ty.INT4, None, partition, order, frame, n=n)
        if isinstance(fn, (exp.Lag, exp.Lead)):
            name = "lag" if isinstance(fn, exp.Lag) else "lead"
            arg = inner.bind(fn.this)
            offset = fn.args.get("offset")
            n = 1 if offset is None else self._constant_int(offset, f"{name.upper()}'s offset")
            if n is None:
                raise _unsupported(offset, sql, f"a NULL {name.upper()} offset")
            default = fn.args.get("default")
            if default is None:
                return WindowCall(name, arg.type if arg.type.kind != "null" else ty.TEXT, arg, partition, order,
                                  frame, n=n)
            dflt = inner.bind(default)
            t = ty.common_type(arg.type, dflt.type)
            if t is None:
                raise SqlError(f"{name} types {arg.type} and {dflt.type} cannot be matched",
                               locate(default, sql), sql)
            t = ty.TEXT if t.kind == "null" else t
            return WindowCall(name, t, ty.cast_to(arg, t), partition, order, frame, n=n, default=ty.cast_to(dflt, t))
        for cls, name in _VALUE.items():
            if isinstance(fn, cls):
                arg = inner.bind(fn.this)
                return WindowCall(name, arg.type if arg.type.kind != "null" else ty.TEXT, arg, partition, order, frame)
        for cls, name in _AGGREGATE.items():
            if isinstance(fn, cls):
                return self._aggregate(inner, fn, name, partition, order, frame)
        what = fn.sql(dialect="postgres").split("(")[0].upper() if isinstance(fn, exp.Func) else fn.key.upper()
        raise _unsupported(fn, sql, f"window function {what}")

    def _aggregate(self, inner, fn: exp.Expression, name: str, partition, order, frame) -> WindowCall:
        sql = self.sql
        arg_node = fn.this
        if isinstance(arg_node, exp.Distinct):
            raise _unsupported(fn, sql, f"{name.upper()}(DISTINCT ...) OVER", "DISTINCT")
        if name == "count" and fn.expressions and fn.args.get("big_int") is None:
            raise _unsupported(fn, sql, "COUNT with several arguments")
        if name == "count" and (arg_node is None or isinstance(arg_node, exp.Star)):
            return WindowCall("count_star", ty.INT8, None, partition, order, frame)
        arg = inner.bind(arg_node)
        if name == "count":
            return WindowCall("count", ty.INT8, arg, partition, order, frame)
        if arg.type.kind == "null" and name in ("sum", "avg"):
            arg = Cast(SqlType.numeric(None, 0), arg)
        if name in ("sum", "avg") and arg.type.kind == "interval":
            raise _unsupported(fn, sql, f"{name.upper()}(interval) OVER")
        if name == "sum":
            result = ty.sum_type(arg.type)
        elif name == "avg":
            result = ty.avg_type(arg.type)
        else:
            result = None if arg.type.kind == "bool" else arg.type
            if arg.type.kind == "null":
                arg, result = ty.cast_to(arg, ty.TEXT), ty.TEXT
        if result is None:
            raise SqlError(f"function {name}({arg.type}) does not exist", locate(fn, sql), sql)
        return WindowCall(name, result, arg, partition, order, frame)

    def _ordered(self, binder, o: exp.Expression) -> tuple[Expr, bool, bool]:
        if not isinstance(o, exp.Ordered):
            return binder.bind(o), False, False
        e = binder.bind(o.this)
        _refuse_collated_order(binder, e, o)
        return ordering_key(binder, e, o), bool(o.args.get("desc")), bool(o.args.get("nulls_first"))

    def _constant_int(self, node: exp.Expression | None, what: str) -> int | None:
        return constant_int(node, self.sql, what)

    def _frame(self, node: exp.Window, order) -> pn.Frame:
        spec = node.args.get("spec")
        if spec is None:
            return pn.DEFAULT_FRAME
        sql = self.sql
        kind = (spec.args.get("kind") or "").upper()
        if kind == "GROUPS":
            raise _unsupported(spec, sql, "a GROUPS frame", "GROUPS")
        if spec.args.get("exclude") is not None:
            raise _unsupported(spec, sql, "EXCLUDE in a window frame", "EXCLUDE")
        mode = "rows" if kind == "ROWS" else "range"
        start = self._bound(spec, spec.args.get("start"), spec.args.get("start_side"), mode, order)
        end_node = spec.args.get("end")
        end = pn.FrameBound("current_row") if end_node is None else \
            self._bound(spec, end_node, spec.args.get("end_side"), mode, order)
        if start.kind == "unbounded_following":
            raise SqlError("frame start cannot be UNBOUNDED FOLLOWING", locate(spec, sql, "FOLLOWING"), sql)
        if end.kind == "unbounded_preceding":
            raise SqlError("frame end cannot be UNBOUNDED PRECEDING", locate(spec, sql, "PRECEDING"), sql)
        order = ["unbounded_preceding", "preceding", "current_row", "following", "unbounded_following"]
        if order.index(start.kind) > order.index(end.kind) and not (start.kind == end.kind):
            what = "frame starting from following row cannot have preceding rows" if start.kind == "following" \
                else "frame starting from current row cannot have preceding rows"
            raise SqlError(what, locate(spec, sql), sql)
        return pn.Frame(mode, start, end)

    def _bound(self, spec: exp.Expression, value, side, mode: str, order) -> pn.FrameBound:
        sql = self.sql
        text = value.upper() if isinstance(value, str) else None
        side = (side or "").upper()
        if text == "UNBOUNDED":
            return pn.FrameBound("unbounded_preceding" if side == "PRECEDING" else "unbounded_following")
        if text == "CURRENT ROW":
            return pn.FrameBound("current_row")
        kind = "preceding" if side == "PRECEDING" else "following"
        if mode == "range":
            return pn.FrameBound(kind, self._range_offset(spec, value, order))
        n = constant_int(value if isinstance(value, exp.Expression) else None, sql, "a frame offset")
        if n is None or n < 0:
            raise SqlError("frame starting or ending offset must not be null or negative", locate(spec, sql), sql)
        return pn.FrameBound(kind, n)

    def _range_offset(self, spec: exp.Expression, value, order) -> int | decimal.Decimal:
        """A RANGE frame's offset: a constant of the one ORDER BY key's kind (integer for integer keys,
        numeric for numeric and float keys); date/time keys with interval offsets are refused."""
        sql = self.sql
        if len(order) != 1:
            raise SqlError("RANGE with offset PRECEDING/FOLLOWING requires exactly one ORDER BY column",
                           locate(spec, sql, "RANGE"), sql)
        t = order[0][0].type
        if not (t.is_integer or t.is_float or t.kind == "numeric"):
            raise _unsupported(spec, sql, f"a RANGE frame with an offset over a {t} ORDER BY key", "RANGE")
        inner = value
        while isinstance(inner, exp.Paren):
            inner = inner.this
        if not (isinstance(inner, exp.Literal) and not inner.is_string):
            raise _unsupported(spec, sql, "a RANGE frame offset other than a number constant", "RANGE")
        offset = decimal.Decimal(inner.this)
        if offset < 0 or not offset.is_finite():
            raise SqlError("invalid preceding or following size in window function", locate(spec, sql), sql)
        if t.is_integer:
            if offset != offset.to_integral_value() or "." in inner.this or "e" in inner.this.lower():
                raise SqlError(f"RANGE with offset PRECEDING/FOLLOWING is not supported for column type {t} "
                               "and offset type numeric", locate(spec, sql, "RANGE"), sql)
            return int(offset)
        return offset


class NotHere:
    """Stands for the collector where window functions are not allowed (HAVING): a located refusal."""

    def __init__(self, sql: str, clause: str) -> None:
        self.sql, self.clause = sql, clause

    def add(self, binder, node: exp.Window) -> Expr:
        raise _unsupported(node, self.sql, f"window function (OVER ...) in {self.clause}", "OVER")


def constant_int(node: exp.Expression | None, sql: str, what: str) -> int | None:
    """An integer constant (possibly negative; None for NULL), else a located refusal."""
    inner = node
    while isinstance(inner, exp.Paren):
        inner = inner.this
    if isinstance(inner, exp.Null):
        return None
    negative = isinstance(inner, exp.Neg)
    if negative:
        inner = inner.this
    if isinstance(inner, exp.Literal) and not inner.is_string and inner.this.isdigit():
        return -int(inner.this) if negative else int(inner.this)
    raise _unsupported(node, sql, f"{what} other than an integer constant")



# ---------------------------------------------------------------------- top-k clauses


@dataclass
class TopKSpec:
    """A SELECT's ORDER BY with LIMIT/OFFSET: keys are output positions (int) or bound expressions."""

    keys: list[tuple[int | Expr, bool, bool, exp.Expression]]  # (target, descending, nulls first, origin)
    limit: int | None
    offset: int


def limit_offset(node: exp.Expression, sql: str) -> tuple[bool, int | None, int]:
    """(present, limit or None for ALL, offset) of a query's LIMIT/FETCH/OFFSET clauses."""
    lim, off = node.args.get("limit"), node.args.get("offset")
    fetch = node.args.get("fetch")
    if fetch is not None and lim is None:
        lim = fetch
    if lim is None and off is None:
        return False, None, 0
    limit: int | None = None
    if isinstance(lim, exp.Fetch):
        opts = lim.args.get("limit_options")
        if opts is not None and (opts.args.get("percent") or opts.args.get("with_ties")):
            raise _unsupported(lim, sql, "FETCH ... PERCENT / WITH TIES", "FETCH")
        if (lim.args.get("direction") or "FIRST").upper() not in ("FIRST", "NEXT"):
            raise _unsupported(lim, sql, f"FETCH {lim.args.get('direction')}", "FETCH")
        count = lim.args.get("count")
        limit = 1 if count is None else constant_int(count, sql, "FETCH FIRST's count")
    elif lim is not None:
        value = lim.args.get("expression")
        if isinstance(value, exp.Var) and value.name.upper() == "ALL":
            limit = None
        else:
            limit = constant_int(value, sql, "LIMIT")
    if limit is not None and limit < 0:
        raise SqlError("LIMIT must not be negative", locate(lim, sql, "LIMIT"), sql)
    offset = 0
    if off is not None:
        value = constant_int(off.args.get("expression"), sql, "OFFSET")
        if value is not None and value < 0:
            raise SqlError("OFFSET must not be negative", locate(off, sql, "OFFSET"), sql)
        offset = value or 0
    return True, limit, offset


def bind_top_k(node: exp.Select, sql: str, binder, scope, out_names: list[str],
               out_exprs: list[Expr]) -> TopKSpec | None:
    """The SELECT's top-k clauses, ORDER BY bound against its output (aliases, ordinals) and input."""
    present, limit, offset = limit_offset(node, sql)
    if not present:
        return None
    keys = []
    order = node.args.get("order")
    for o in (order.expressions if order is not None else []):
        target = o.this
        desc, nulls_first = bool(o.args.get("desc")), bool(o.args.get("nulls_first"))
        if isinstance(target, exp.Literal) and not target.is_string:
            pos = int(target.this)
            if not 1 <= pos <= len(out_exprs):
                raise SqlError(f"ORDER BY position {pos} is not in select list", locate(target, sql), sql)
            keys.append((pos - 1, desc, nulls_first, o))
            continue
        if isinstance(target, exp.Column) and not target.table and target.name in out_names:
            keys.append((out_names.index(target.name), desc, nulls_first, o))
            continue
        e = binder.bind(target)
        keys.append((out_exprs.index(e) if e in out_exprs else e, desc, nulls_first, o))
    for target, _, _, o in keys:
        _refuse_collated_order(binder, out_exprs[target] if isinstance(target, int) else target, o)
    keys = [(k if ordering_key(binder, e, o) is e else ordering_key(binder, e, o), desc, nf, o)
            for k, desc, nf, o in keys for e in [out_exprs[k] if isinstance(k, int) else k]]
    return TopKSpec(keys, limit, offset)


def ordering_key(binder, e: Expr, origin: exp.Expression) -> Expr:
    """What ``e`` orders by: an enum by its declared order (its label's rank); json, jsonb and inet are refused."""
    from freshview.sql.bind_types import enum_rank

    if e.type.kind == "enum":
        return enum_rank(e)
    if e.type.kind in ("json", "jsonb", "inet"):
        raise binder.unsupported(origin, f"ORDER BY a {e.type} value (PostgreSQL's {e.type} order is not kept)")
    return e


def _refuse_collated_order(binder, e: Expr, origin: exp.Expression) -> None:
    collation = binder.ci_collation_of(e)
    if collation is not None:
        raise binder.unsupported(origin, f"ORDER BY text under the case-insensitive collation {collation} "
                                         "(add COLLATE utf8mb4_bin to order by code point)")


# ---------------------------------------------------------------------- plan assembly


def finish_select(plan: pn.Node, exprs: list[Expr], names: list[str], windows: WindowCollector,
                  topk: TopKSpec | None, distinct: bool, localize, sql: str) -> pn.Node:
    """The plan above FROM/WHERE/GROUP BY/HAVING: windows, the SELECT list, DISTINCT, then top-k.

    ``exprs`` are the SELECT list over ``plan`` (window placeholders still in); ``localize`` maps an
    expression over the wide row (window and ORDER BY expressions) onto ``plan``'s columns."""
    hidden: list[Expr] = []
    hidden_at: dict[int, int] = {}
    if topk is not None:
        for i, (target, _, _, origin) in enumerate(topk.keys):
            if not isinstance(target, int):
                if distinct:
                    raise SqlError("for SELECT DISTINCT, ORDER BY expressions must appear in select list",
                                   locate(origin, sql), sql)
                hidden_at[i] = len(exprs) + len(hidden)
                hidden.append(localize(target))
    all_exprs = list(exprs) + hidden
    if windows.calls:
        plan, all_exprs = _place_windows(plan, all_exprs, [c.mapped(localize) for c in windows.calls])
    all_names = list(names) + [f"_order{i}" for i in range(len(hidden))]
    plan = _project(plan, all_exprs, all_names)
    if distinct:
        plan = pn.Distinct(plan)
    if topk is None:
        return plan
    order = tuple(pn.SortKey(hidden_at.get(i, t if isinstance(t, int) else -1), d, nf)
                  for i, (t, d, nf, _) in enumerate(topk.keys))
    plan = pn.TopK(plan, order, topk.limit, topk.offset)
    if hidden:
        plan = pn.Project(plan, tuple(ColumnRef(t, i, n) for i, (n, t) in enumerate(plan.columns[:len(names)])),
                          tuple(names))
    return plan


def _place_windows(plan: pn.Node, exprs: list[Expr], calls: list[WindowCall]) -> tuple[pn.Node, list[Expr]]:
    """A projection of every window input as a column, one Window node per (PARTITION BY, ORDER BY),
    and ``exprs`` with their placeholders rewritten to the window columns."""
    width = len(plan.columns)
    extra: list[Expr] = []

    def column(e: Expr) -> int:
        if isinstance(e, ColumnRef) and e.index < width:
            return e.index
        if e not in extra:
            extra.append(e)
        return width + extra.index(e)

    specs: dict[tuple, list[tuple[int, pn.WindowFunc]]] = {}
    for i, c in enumerate(calls):
        part = tuple(column(e) for e in c.partition)
        order = tuple(pn.SortKey(column(e), d, nf) for e, d, nf in c.order)
        fn = pn.WindowFunc(c.func, column(c.arg) if c.arg is not None else None, c.type, c.n,
                           column(c.default) if c.default is not None else None, c.frame)
        specs.setdefault((part, order), []).append((i, fn))
    if extra:
        cols = tuple(ColumnRef(t, i, n) for i, (n, t) in enumerate(plan.columns))
        plan = pn.Project(plan, cols + tuple(extra), tuple(n for n, _ in plan.columns)
                          + tuple(f"_win_in{j}" for j in range(len(extra))))
    where: dict[int, int] = {}
    for (part, order), fns in specs.items():
        base = len(plan.columns)
        plan = pn.Window(plan, part, order, tuple(f for _, f in fns))
        for j, (i, _) in enumerate(fns):
            where[WIN_BASE + i] = base + j
    return plan, [_replace(e, where) for e in exprs]


def _replace(e: Expr, where: dict[int, int]) -> Expr:
    if isinstance(e, ColumnRef):
        return ColumnRef(e.type, where[e.index], e.name) if e.index in where else e
    return e.map_children(lambda c: _replace(c, where))


def _project(plan: pn.Node, exprs: list[Expr], names: list[str]) -> pn.Node:
    identity = (len(exprs) == len(plan.columns)
                and all(isinstance(e, ColumnRef) and e.index == i for i, e in enumerate(exprs))
                and tuple(names) == tuple(n for n, _ in plan.columns))
    return plan if identity else pn.Project(plan, tuple(exprs), tuple(names))


def union_top_k(builder: "QueryContext", node: exp.SetOperation) -> pn.Node:
    """``… UNION/INTERSECT/EXCEPT … ORDER BY … LIMIT/OFFSET``: the set operation, then a TopK over its
    output columns."""
    sql = builder.sql
    present, limit, offset = limit_offset(node, sql)
    bare = node.copy()
    for key in ("limit", "offset", "fetch", "order"):
        bare.set(key, None)
    plan = builder.query_body(bare)
    if not present:
        return plan
    names = [n for n, _ in plan.columns]
    keys = []
    order = node.args.get("order")
    for o in (order.expressions if order is not None else []):
        target = o.this
        if isinstance(target, exp.Literal) and not target.is_string:
            pos = int(target.this)
            if not 1 <= pos <= len(names):
                raise SqlError(f"ORDER BY position {pos} is not in select list", locate(target, sql), sql)
            col = pos - 1
        elif isinstance(target, exp.Column) and not target.table and target.name in names:
            col = names.index(target.name)
        else:
            raise SqlError("invalid UNION/INTERSECT/EXCEPT ORDER BY clause (only result column names or "
                           "positions)", locate(target, sql), sql)
        keys.append(pn.SortKey(col, bool(o.args.get("desc")), bool(o.args.get("nulls_first"))))
    return pn.TopK(plan, tuple(keys), limit, offset)


def window_free(e: Expr) -> bool:
    return not any(i >= WIN_BASE for i in columns_used(e))
