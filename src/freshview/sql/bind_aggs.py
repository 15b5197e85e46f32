"""Binding aggregate calls: DISTINCT, FILTER (WHERE ...), ORDER BY inside the call, and their result types.

``ExprBinder`` (an ``AggregateBinder`` here) hands every aggregate call here (``AggregateVisits`` adds the
``visit_<Node>`` methods of the aggregates beyond COUNT/SUM/AVG/MIN/MAX).
What comes out is one ``AggCall`` per call, with PostgreSQL's result type:

* ``agg(x) FILTER (WHERE p)`` is ``agg(CASE WHEN p THEN x END)``: every
  aggregate here ignores NULL inputs, so the rows where ``p`` is not true
  drop out; ``count(*) FILTER (WHERE p)`` is ``count(CASE WHEN p THEN 1
  END)``; with DISTINCT the CASE goes inside (``count(DISTINCT CASE ...)``).
* DISTINCT: kept for count, sum, avg, var/stddev and string_agg (the
  operator keeps a multiset per such aggregate; string_agg's ORDER BY may
  then only name the argument, as in PostgreSQL); dropped where it cannot
  change the result (min, max, bool_and, bool_or).
* ORDER BY inside the call: kept for string_agg and array_agg, where the
  order is the result's; ignored by the aggregates whose result does not
  depend on it.
* array_agg(x) is ``x``'s type as a one-dimensional array (``integer[]``),
  NULL elements kept; x must be a scalar type (no intervals, no arrays of
  arrays).  FILTER on array_agg is refused: rewriting it as a CASE would add
  NULL elements instead of dropping rows.
* ``every`` is ``bool_and``; ``stddev`` is ``stddev_samp``; ``variance`` is
  ``var_samp``.  var/stddev of integers and numerics are numeric, of floats
  double precision (as in PostgreSQL).

Refused, with the construct's position: ordered-set aggregates
(``... WITHIN GROUP (ORDER BY ...)``), array_agg (freshview has no array
type), string_agg with a non-constant delimiter, and aggregates of several
arguments (``COUNT(DISTINCT a, b)``).
"""

from __future__ import annotations

from typing import Protocol

from sqlglot import exp

from freshview.errors import SqlError, SqlTypeError, UnsupportedSqlError
from freshview.plan.aggregates import aggregate
from freshview.plan.expr import AggCall, AggOrder, Case, Cast, Expr, Literal
from freshview.schema import AVG_MIN_SCALE, SqlType
from freshview.plan import typing as ty
from freshview.sql.dialect import Dialect
from freshview.sql.parse import locate
from freshview.sql.scope import AggCollector



class AggregateBinder(Protocol):
    """What binding an aggregate uses of the expression binder (``bind_expr.ExprBinder`` implements it; this
    module does not import it: the binder imports this one)."""

    sql: str
    context: str  # where the expression is ("SELECT", "WHERE or JOIN conditions", ...)
    dialect: Dialect
    aggs: AggCollector | None  # the aggregates collected, None where none are allowed

    def bind(self, node: exp.Expression) -> Expr: ...

    def bool_operand(self, node: exp.Expression) -> Expr: ...

    def nested(self, context: str) -> "AggregateBinder": ...

    def unsupported(self, node: exp.Expression, what: str, keyword: str | None = None) -> UnsupportedSqlError: ...

    def type_error(self, node: exp.Expression, message: str) -> SqlTypeError: ...

    def collated(self, node: exp.Expression, *args: Expr) -> tuple[Expr, ...]: ...

    def collation_of(self, e: Expr) -> str | None: ...

    def ci_collation_of(self, e: Expr) -> str | None: ...

_VARIANCE = ("var_samp", "var_pop", "stddev_samp", "stddev_pop")
_ORDER_FREE = ("count", "sum", "avg", "min", "max", "bool_and", "bool_or") + _VARIANCE

# sqlglot node -> aggregate (the ones FILTER may wrap; ``every`` is an Anonymous call)
AGG_FUNCS: dict[type, str] = {
    exp.Count: "count", exp.Sum: "sum", exp.Avg: "avg", exp.Min: "min", exp.Max: "max",
    exp.LogicalAnd: "bool_and", exp.LogicalOr: "bool_or",
    exp.Stddev: "stddev_samp", exp.StddevSamp: "stddev_samp", exp.StddevPop: "stddev_pop",
    exp.Variance: "var_samp", exp.VariancePop: "var_pop",
    exp.GroupConcat: "string_agg", exp.ArrayAgg: "array_agg",
}


def variance_type(arg: SqlType) -> SqlType | None:
    """var_*/stddev_* result: numeric for integers and numerics, double precision for floats."""
    if arg.is_float:
        return ty.FLOAT8
    if arg.is_integer or arg.kind == "numeric" or arg.kind == "null":
        return SqlType.numeric(None, max(AVG_MIN_SCALE, 2 * ty.numeric_scale(arg)))
    return None


def agg_func_of(node: exp.Expression) -> str | None:
    """The aggregate a sqlglot call is, or None."""
    if isinstance(node, exp.Anonymous) and str(node.this).lower() == "every":
        return "bool_and"
    return AGG_FUNCS.get(type(node))


def bind_aggregate(b: "AggregateBinder", node: exp.Expression, func: str,
                   where: exp.Expression | None = None) -> Expr:
    """Bind the aggregate call ``node`` (``func`` as in ``AGG_FUNCS``), FILTER (WHERE ``where``) if given."""
    name = "every" if isinstance(node, exp.Anonymous) else func
    if b.aggs is None:
        raise UnsupportedSqlError(f"aggregate function {name.upper()} is not allowed in {b.context}",
                                  locate(node, b.sql), b.sql)
    if func == "array_agg" and where is not None:
        raise b.unsupported(node, "array_agg(...) FILTER (WHERE ...) (write the condition in WHERE or a CASE)",
                            "array_agg")
    if isinstance(node, exp.Anonymous):
        if len(node.expressions) != 1:
            raise b.unsupported(node, f"{name}() with {len(node.expressions)} arguments")
        arg_node: exp.Expression | None = node.expressions[0]
    else:
        arg_node = node.this
    order_nodes: list[exp.Ordered] = []
    if isinstance(arg_node, exp.Order):
        order_nodes = list(arg_node.expressions)
        arg_node = arg_node.this
    distinct = False
    if isinstance(arg_node, exp.Distinct):
        if len(arg_node.expressions) != 1:
            raise b.unsupported(node, f"{name.upper()}(DISTINCT ...) of several arguments", "DISTINCT")
        distinct, arg_node = True, arg_node.expressions[0]
    if order_nodes and func not in _ORDER_FREE + ("string_agg", "array_agg"):
        raise b.unsupported(node, f"ORDER BY inside {name}()", "ORDER")

    inner = b.nested("an aggregate's argument")
    cond = None
    if where is not None:
        cond = b.nested("FILTER").bool_operand(where)

    def filtered(e: Expr) -> Expr:
        return e if cond is None else Case(e.type, ((cond, e),), None)

    if func == "count" and (arg_node is None or isinstance(arg_node, exp.Star)):
        if distinct:
            raise b.unsupported(node, "COUNT(DISTINCT *)", "DISTINCT")
        if cond is None:
            return b.aggs.add(AggCall("count_star", None, ty.INT8))
        return b.aggs.add(AggCall("count", filtered(Literal(ty.INT4, 1)), ty.INT8))
    if arg_node is None:
        raise b.type_error(node, f"function {name}() needs an argument")
    arg = inner.bind(arg_node)
    if arg.type.kind == "interval":  # (interval sums would need interval accumulators)
        raise b.unsupported(arg_node, f"{name}() of an interval")
    if arg.type.is_array and func not in ("count",):
        raise b.unsupported(arg_node, f"{name}() of an array")

    if func == "count":
        if distinct and b.collation_of(arg) is not None:  # distinct under the collation: count distinct keys
            arg = b.collated(node, arg)[0]
        return b.aggs.add(AggCall("count", filtered(arg), ty.INT8, distinct))
    collation = b.ci_collation_of(arg)
    if collation is not None and func in ("min", "max"):
        raise b.unsupported(node, f"{name.upper()} of text under the case-insensitive collation {collation} "
                                  "(use COLLATE utf8mb4_bin for the smallest/largest by code point)")
    if aggregate(func).distinct == "dropped":
        distinct = False
    order: tuple[AggOrder, ...] = ()
    separator = None
    if func == "sum":
        result = b.dialect.sum_type(arg.type)
    elif func == "avg":
        result = b.dialect.avg_type(arg.type)
    elif func in ("bool_and", "bool_or"):
        if arg.type.kind == "null":
            arg = Literal(ty.BOOL, None)
        result = ty.BOOL if arg.type.kind == "bool" else None
    elif func in _VARIANCE:
        result = variance_type(arg.type)
    elif func in ("string_agg", "array_agg"):
        if arg.type.kind == "null":
            arg = Literal(ty.TEXT, None)
        if func == "string_agg":
            result = ty.TEXT if arg.type.kind == "text" else None
            separator = _separator(b, node)
        else:
            result = SqlType.array(arg.type)  # (the element kinds were checked above)
        order = tuple(_order_key(inner, o, func) for o in order_nodes)
        if distinct and any(o.expr != arg for o in order):
            raise SqlError("in an aggregate with DISTINCT, ORDER BY expressions must appear in argument list",
                           locate(order_nodes[0], b.sql), b.sql)
    else:  # min / max
        result = arg.type if arg.type.kind != "null" else ty.TEXT
        if arg.type.kind in ("bool", "json", "jsonb", "inet", "uuid"):  # (as PostgreSQL; jsonb, inet: order not kept)
            result = None
        if arg.type.kind == "enum":  # by declared order: the extreme rank, mapped back to its label
            from freshview.sql.bind_types import enum_label, enum_rank

            rank = b.aggs.add(AggCall(func, filtered(enum_rank(arg)), ty.INT4, distinct))
            return enum_label(rank, arg.type)
    if result is None:
        raise b.type_error(node, f"function {name}({arg.type}) does not exist")
    if func in ("sum", "avg") + _VARIANCE and arg.type.kind == "null":
        arg = Cast(SqlType.numeric(None, 0), arg)
    return b.aggs.add(AggCall(func, filtered(arg), result, distinct, order, separator))


def _separator(b: "AggregateBinder", node: exp.Expression) -> str:
    sep_node = node.args.get("separator")
    if sep_node is None:
        raise b.type_error(node, "function string_agg() needs a delimiter: string_agg(value, delimiter)")
    sep = b.bind(sep_node) if not isinstance(sep_node, exp.Column) else None
    if not isinstance(sep, Literal):
        raise UnsupportedSqlError("string_agg with a non-constant delimiter is not supported",
                                  locate(sep_node, b.sql), b.sql)
    if sep.value is None:
        return ""  # PostgreSQL: a NULL delimiter joins with nothing
    if sep.type.kind not in ("text", "null"):
        raise b.type_error(node, f"function string_agg(text, {sep.type}) does not exist")
    return str(sep.value)


def _order_key(inner: "AggregateBinder", o: exp.Expression, func: str) -> AggOrder:
    if not isinstance(o, exp.Ordered):
        return AggOrder(inner.bind(o))
    desc = bool(o.args.get("desc"))
    nulls_first = o.args.get("nulls_first")
    if nulls_first is None:
        nulls_first = desc  # PostgreSQL: NULLs sort as the largest value
    e = inner.bind(o.this)
    if e.type.kind == "enum":  # by declared order
        from freshview.sql.bind_types import enum_rank

        e = enum_rank(e)
    if e.type.kind == "uuid":
        e = Call(ty.TEXT, "as_text", (e,))  # uuid order is its canonical text's
    if not (e.type.is_numeric or e.type.is_temporal or e.type.kind in ("text", "bool", "null")):
        raise inner.unsupported(o, f"ORDER BY a {e.type} inside {func}()")
    return AggOrder(e, desc, bool(nulls_first))


class AggregateVisits:
    """The ``visit_<Node>`` methods of aggregates and FILTER, mixed into ``ExprBinder``."""

    def _agg_visit(self, node: exp.Expression) -> Expr:
        return bind_aggregate(self, node, AGG_FUNCS[type(node)])  # type: ignore[arg-type]

    visit_LogicalAnd = visit_LogicalOr = _agg_visit
    visit_Stddev = visit_StddevSamp = visit_StddevPop = visit_Variance = visit_VariancePop = _agg_visit
    visit_GroupConcat = visit_ArrayAgg = _agg_visit

    def visit_Filter(self, node: exp.Filter) -> Expr:
        inner = node.this
        func = agg_func_of(inner)
        if func is None:
            raise self.unsupported(node, "FILTER on something other than an aggregate call", "FILTER")  # type: ignore[attr-defined]
        where = node.expression
        return bind_aggregate(self, inner, func, where.this if isinstance(where, exp.Where) else where)  # type: ignore[arg-type]

    def visit_WithinGroup(self, node: exp.WithinGroup) -> Expr:
        raise self.unsupported(node, "ordered-set aggregate (... WITHIN GROUP (ORDER BY ...))", "WITHIN")  # type: ignore[attr-defined]
