"""Binding scalar SQL expressions to typed plan expressions.

``ExprBinder`` resolves column names against a ``Scope``, applies the
PostgreSQL typing rules of ``typing`` and refuses, with a position, any
construct freshview cannot maintain (subqueries in expressions, window
functions, unknown functions ...).  Aggregate calls are handed to an
``AggCollector`` so the query builder can place them in an Aggregate node.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import re
from typing import Callable

from sqlglot import exp

from freshview.errors import SqlTypeError, UnknownColumnError, UnsupportedSqlError
from freshview.plan import nodes as pn
from freshview.plan.expr import Call, Case, Cast, ColumnRef, Expr, Literal
from freshview.schema import SqlType, parse_type
from freshview.plan import typing as ty
from freshview.collation import kind as collation_kind
from freshview.jsontext import equality_key
from freshview.sql.dialect import JSONB_EQUALITY, POSTGRES, Dialect, collation_key, unsupported_collation
from freshview.sql.bind_aggs import AggregateVisits, bind_aggregate
from freshview.sql.bind_types import TypeBinding, convert_textual
from freshview.sql.functions import FunctionBinding, is_date_part
from freshview.sql.parse import locate
from freshview.sql.temporal import TemporalBinding
from freshview.sql.scope import AGG_BASE, AggCollector, FromItem, Scope, ScopeColumn  # noqa: F401 (re-exported)

_COMPARISONS = {exp.EQ: "=", exp.NEQ: "<>", exp.GT: ">", exp.GTE: ">=", exp.LT: "<", exp.LTE: "<="}
_ARITH = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/", exp.Mod: "%"}
_EXTRACT_FIELDS = {
    "year", "month", "day", "hour", "minute", "second", "quarter", "dow", "isodow",
    "doy", "week", "epoch", "decade", "century", "millennium", "milliseconds", "microseconds",
}
_TRUNC_UNITS = {"microseconds", "milliseconds", "second", "minute", "hour", "day", "week",
                "month", "quarter", "year", "decade", "century", "millennium"}


class ExprBinder(AggregateVisits, TemporalBinding, FunctionBinding, TypeBinding):
    def __init__(self, scope: Scope, sql: str, aggs: AggCollector | None = None,
                 context: str = "expression", dialect: Dialect = POSTGRES) -> None:
        self.scope = scope
        self.dialect = dialect
        self.sql = sql
        self.aggs = aggs
        self.context = context
        self.subquery: Callable[[exp.Subquery], Expr] | None = None  # set by the query builder
        self.mark: Callable[[exp.Expression], Expr] | None = None  # IN/EXISTS (subquery) as a value, too

    def nested(self, context: str) -> "ExprBinder":
        """A binder of the same scope, SQL and dialect for an inner expression (an aggregate's argument,
        its FILTER) that may not hold aggregates itself."""
        return ExprBinder(self.scope, self.sql, None, context, self.dialect)

    # ------------------------------------------------------------------ helpers
    def unsupported(self, node: exp.Expression, what: str, keyword: str | None = None) -> UnsupportedSqlError:
        return UnsupportedSqlError(f"{what} is not supported", locate(node, self.sql, keyword), self.sql)

    def type_error(self, node: exp.Expression, message: str) -> SqlTypeError:
        return SqlTypeError(message, locate(node, self.sql), self.sql)

    def coerce(self, e: Expr, target: SqlType) -> Expr:
        if e.type == target:
            return e
        if isinstance(e, Literal):
            return Literal(target, _convert_literal(e.value, target))
        return Cast(target, e)

    def bool_operand(self, node: exp.Expression) -> Expr:
        e = self.bind(node)
        if e.type.kind == "null":
            return Literal(ty.BOOL, None)
        if e.type.kind != "bool" and (truth := self.dialect.truth(e)) is not None:
            return truth  # MySQL: a number is a condition (non-zero is true)
        if e.type.kind != "bool":
            raise self.type_error(node, f"argument must be boolean, not {e.type}")
        return e

    # ------------------------------------------------------------------ dispatch
    def bind(self, node: exp.Expression) -> Expr:
        out = self._bind(node)
        if node.args.get("negate"):  # sqlglot spells IS NOT NULL, NOT LIKE ... as a flag
            return Call(ty.BOOL, "not", (out,))
        return out

    def _bind(self, node: exp.Expression) -> Expr:
        handler: Callable[[exp.Expression], Expr] | None = getattr(
            self, f"visit_{type(node).__name__}", None
        )
        if handler is None:
            for cls, op in _COMPARISONS.items():
                if isinstance(node, cls):
                    return self.comparison(node, op)
            for cls, op in _ARITH.items():
                if isinstance(node, cls):
                    return self.arithmetic(node, op)
            raise self.unsupported(node, _describe(node))
        return handler(node)

    # ------------------------------------------------------------------ leaves
    def visit_Column(self, node: exp.Column) -> Expr:
        name = node.name
        qualifier = node.table or None
        if isinstance(node.this, exp.Star):
            raise self.unsupported(node, "'*' inside an expression")
        found = self.scope.resolve(name, qualifier)
        if qualifier is None and (self.scope.merged or self.scope.hidden):  # JOIN ... USING (sql.join_tree)
            found = [c for c in found if c.index not in self.scope.hidden]
            if name in self.scope.merged:
                if not found:
                    return self.scope.merged[name]
                found = [ScopeColumn("USING", name, self.scope.merged[name].type, -1)] + found
        if not found:
            known = ", ".join(sorted({c.name for c in self.scope.columns})) or "none"
            target = f"{qualifier}.{name}" if qualifier else name
            if qualifier and qualifier not in self.scope.relation_names():
                raise UnknownColumnError(
                    f"unknown table or alias {qualifier!r} in column reference {target!r}",
                    locate(node, self.sql), self.sql)
            raise UnknownColumnError(f"unknown column {target!r} (columns in scope: {known})",
                                     locate(node, self.sql), self.sql)
        if len(found) > 1:
            rels = ", ".join(sorted(c.relation for c in found))
            raise UnknownColumnError(f"column reference {name!r} is ambiguous (it is in {rels})",
                                     locate(node, self.sql), self.sql)
        col = found[0]
        collation = self.dialect.collation(col.type)
        if collation is not None and collation_kind(collation) is None:  # no key: refuse, never compare wrongly
            raise self.unsupported(node, f"column {col.name!r} under " + unsupported_collation(collation))
        return ColumnRef(col.type, col.index, col.name)

    def visit_Literal(self, node: exp.Literal) -> Expr:
        text = node.this
        if node.is_string:
            return Literal(ty.TEXT, text)
        if "e" in text.lower():
            return Literal(ty.FLOAT8, float(text))
        if "." in text:
            d = decimal.Decimal(text)
            scale = max(-d.as_tuple().exponent, 0)
            return Literal(SqlType.numeric(None, scale), d)
        value = int(text)
        if -(2**31) <= value < 2**31:
            return Literal(ty.INT4, value)
        if -(2**63) <= value < 2**63:
            return Literal(ty.INT8, value)
        return Literal(SqlType.numeric(None, 0), decimal.Decimal(value))

    def visit_Boolean(self, node: exp.Boolean) -> Expr:
        return Literal(ty.BOOL, bool(node.this))

    def visit_Null(self, node: exp.Null) -> Expr:
        return Literal(ty.NULL, None)

    def visit_Paren(self, node: exp.Paren) -> Expr:
        return self.bind(node.this)

    def visit_Alias(self, node: exp.Alias) -> Expr:
        return self.bind(node.this)

    # ------------------------------------------------------------------ operators
    def comparison(self, node: exp.Expression, op: str) -> Expr:
        listed = _array_list(node.right, "any" if op == "=" else "all" if op == "<>" else None)
        if listed is not None:  # x = ANY (ARRAY[...]) is x IN (...), <> ALL NOT IN: how PostgreSQL prints IN lists
            found = exp.In(this=node.left, expressions=listed)
            return self.bind(found if op == "=" else exp.Not(this=found))
        if isinstance(node.right, exp.Any):  # x = ANY (array_column)
            return self.any_comparison(node, op, self.bind(node.left), self.bind(node.right.this))
        left, right = self.bind(node.left), self.bind(node.right)
        if "interval" in (left.type.kind, right.type.kind):
            return self.interval_comparison(node, op, left, right)
        typed = self.typed_comparison(node, op, left, right)  # json, jsonb, uuid, inet, enums (sql.bind_types)
        if typed is not None:
            return typed
        if left.type.is_array or right.type.is_array:  # (GROUP BY, DISTINCT and UNION over arrays are)
            raise self.unsupported(node, f"comparing arrays ({op}; joins on arrays)")
        target = self._comparable(node, left, right)
        left, right = self.coerce(left, target), self.coerce(right, target)
        return Call(ty.BOOL, op, self.collated(node, left, right))

    def collated(self, node: exp.Expression, *args: Expr) -> tuple[Expr, ...]:
        """Text operands as the keys their collation compares by (MySQL), jsonb ones as their equality key;
        others as they are."""
        if any(a.type.kind == "jsonb" for a in args):  # (a constant's key computed here)
            return tuple((Literal(ty.TEXT, None if a.value is None else equality_key(a.value))
                          if isinstance(a, Literal) else collation_key(a, JSONB_EQUALITY))
                         if a.type.kind == "jsonb" else a for a in args)
        texts = [a for a in args if a.type.kind == "text"]
        if not texts:
            return args
        explicit = [a.type.collation for a in texts if a.type.collation is not None]
        collation = self.dialect.collation(texts[0].type if not explicit else
                                           next(a.type for a in texts if a.type.collation is not None))
        if collation is None:
            return args
        if collation_kind(collation) is None:
            raise self.unsupported(node, unsupported_collation(collation))
        return tuple(collation_key(a, collation) if a.type.kind == "text" else a for a in args)

    def collation_of(self, e: Expr) -> str | None:
        """The collation ``e`` groups by (MySQL text: case-insensitive, or _bin with PAD SPACE; jsonb: its
        equality, ``dialect.JSONB_EQUALITY``), else None."""
        if e.type.kind == "jsonb":
            return JSONB_EQUALITY
        return self.dialect.collation(e.type)

    def ci_collation_of(self, e: Expr) -> str | None:
        """The collation ``e`` orders by when it is not by code point (case-insensitive), else None."""
        collation = self.dialect.collation(e.type)
        return None if collation is None or collation_kind(collation) == "bin" else collation

    def visit_Collate(self, node: exp.Collate) -> Expr:
        arg = self.bind(node.this)
        name = node.expression.name.lower() if node.expression is not None else ""
        if arg.type.kind not in ("text", "null"):
            raise self.type_error(node, f"COLLATE applies to text, not {arg.type}")
        if collation_kind(name) is None:
            raise self.unsupported(node, unsupported_collation(name), "COLLATE")
        return dataclasses.replace(arg, type=SqlType("text", collation=name))

    def _comparable(self, node: exp.Expression, left: Expr, right: Expr) -> SqlType:
        # A quoted literal compared with a date/number takes the other side's type, as in PostgreSQL.
        if isinstance(right, Literal) and right.type.kind == "text" and left.type.kind not in ("text", "null"):
            return left.type
        if isinstance(left, Literal) and left.type.kind == "text" and right.type.kind not in ("text", "null"):
            return right.type
        target = ty.common_type(left.type, right.type)
        if target is None:
            raise self.type_error(node, f"cannot compare {left.type} with {right.type}")
        return target

    def arithmetic(self, node: exp.Expression, op: str) -> Expr:
        left, right = self.bind(node.left), self.bind(node.right)
        if "interval" in (left.type.kind, right.type.kind):
            return self._interval_arithmetic(node, op, left, right)
        if op == "-" and left.type.is_temporal and right.type.is_temporal and \
                (left.type.kind, right.type.kind) != ("date", "date"):
            return self.timestamp_difference(node, left, right)
        if isinstance(right, Literal) and right.type.kind == "text" and left.type.is_temporal:
            raise self.unsupported(node, "date/time arithmetic with a string operand")
        special = self.dialect.arithmetic(op, left, right)
        if special is not None:
            return special
        result = ty.arithmetic_type(op, left.type, right.type)
        if result is None and self.dialect.string_arithmetic and "text" in (left.type.kind, right.type.kind):
            raise self.unsupported(node, self.dialect.string_arithmetic)
        if result is None:
            raise self.type_error(node, f"operator {op} is not defined for {left.type} and {right.type}")
        if result.kind == "date" or (left.type.kind == "date" and right.type.kind == "date"):
            return Call(result, op, (left, right))
        if result.kind == "numeric":
            if op in "*/":  # operand scales combine; each side keeps its own
                return Call(result, op, (self._to_numeric(left), self._to_numeric(right)))
            operand = SqlType.numeric(None, max(ty.numeric_scale(left.type), ty.numeric_scale(right.type)))
            return Call(result, op, (self.coerce(left, operand), self.coerce(right, operand)))
        return Call(result, op, (self.coerce(left, result), self.coerce(right, result)))

    def _to_numeric(self, e: Expr) -> Expr:
        if e.type.kind == "numeric":
            return e
        return self.coerce(e, SqlType.numeric(None, 0))

    def visit_Interval(self, node: exp.Interval) -> Expr:
        """INTERVAL '90' DAY / INTERVAL '1 year' as (months, days, microseconds)."""
        text = node.this.name if node.this is not None else ""
        unit = node.args.get("unit")
        spec = f"{text} {unit.name if unit is not None else ''}".strip().lower()
        parts = spec.split()
        if len(parts) != 2 or not parts[0].lstrip("-").isdigit():
            raise self.unsupported(node, f"interval {spec!r} (use a form like INTERVAL '3' MONTH)")
        n, unit_name = int(parts[0]), parts[1].rstrip("s")
        scale = {"year": (12, 0, 0), "month": (1, 0, 0), "week": (0, 7, 0), "day": (0, 1, 0),
                 "hour": (0, 0, 3_600_000_000), "minute": (0, 0, 60_000_000), "second": (0, 0, 1_000_000)}
        if unit_name not in scale:
            raise self.unsupported(node, f"interval unit {unit_name!r}")
        months, days, micros = scale[unit_name]
        return Literal(SqlType("interval"), (n * months, n * days, n * micros))

    def _interval_arithmetic(self, node: exp.Expression, op: str, left: Expr, right: Expr) -> Expr:
        """Constants are folded later (``plan.rewrite.fold_constants``), a NULL one here: its type is known."""
        if op == "+" and left.type.kind == "interval":
            left, right = right, left
        if (op in "+-" and right.type.kind == "interval" and left.type.is_temporal
                and isinstance(left, Literal) and isinstance(right, Literal)
                and (left.value is None or right.value is None)):
            return Literal(left.type if left.type.kind != "date" else SqlType("timestamp"), None)
        return self.interval_arithmetic(node, op, left, right)

    def visit_IntDiv(self, node: exp.IntDiv) -> Expr:
        left, right = self.bind(node.left), self.bind(node.right)
        out = self.dialect.int_div(left, right)
        if out is None:
            raise self.unsupported(node, f"DIV of {left.type} and {right.type} (DIV is computed for integers and decimals)",
                                   "DIV")
        return out

    def visit_Xor(self, node: exp.Xor) -> Expr:
        """a XOR b: true when exactly one is true, NULL when either is NULL (MySQL)."""
        return Call(ty.BOOL, "<>", (self.bool_operand(node.left), self.bool_operand(node.right)))

    def visit_Neg(self, node: exp.Neg) -> Expr:
        arg = self.bind(node.this)
        if isinstance(arg, Literal) and arg.value is not None and arg.type.is_numeric:
            return Literal(arg.type, -arg.value)
        if not arg.type.is_numeric:
            raise self.type_error(node, f"cannot negate {arg.type}")
        return Call(arg.type, "neg", (arg,))

    def visit_And(self, node: exp.And) -> Expr:
        return Call(ty.BOOL, "and", (self.bool_operand(node.left), self.bool_operand(node.right)))

    def visit_Or(self, node: exp.Or) -> Expr:
        return Call(ty.BOOL, "or", (self.bool_operand(node.left), self.bool_operand(node.right)))

    def visit_Not(self, node: exp.Not) -> Expr:
        return Call(ty.BOOL, "not", (self.bool_operand(node.this),))

    def visit_Is(self, node: exp.Is) -> Expr:
        if not isinstance(node.expression, exp.Null):
            return self.boolean_test(node)
        return Call(ty.BOOL, "is_null", (self.bind(node.this),))

    def visit_DPipe(self, node: exp.DPipe) -> Expr:
        args = [self.bind(node.left), self.bind(node.right)]
        return Call(ty.TEXT, "||", tuple(self._to_text(a) for a in args))

    def _to_text(self, e: Expr) -> Expr:
        return e if e.type.kind == "text" else self.coerce(e, ty.TEXT)

    def visit_In(self, node: exp.In) -> Expr:
        if node.args.get("query") is not None:
            if self.mark is not None:  # the query builder decorrelates it into a mark join (``sql.subqueries``)
                return self.mark(node)
            raise self.unsupported(node, f"IN (subquery) in {self.context}", "IN")
        if node.args.get("unnest") or node.args.get("field"):
            raise self.unsupported(node, "IN over an array", "IN")
        arg = self.bind(node.this)
        values = [self.bind(v) for v in node.expressions]
        target = arg.type
        for v in values:
            target = ty.common_type(target, self._comparable(node, arg, v)) or target
        return Call(ty.BOOL, "in", self.collated(node, self.coerce(arg, target),
                                                 *[self.coerce(v, target) for v in values]))

    def visit_Between(self, node: exp.Between) -> Expr:
        arg = self.bind(node.this)
        low, high = self.bind(node.args["low"]), self.bind(node.args["high"])
        t1 = self._comparable(node, arg, low)
        t2 = self._comparable(node, arg, high)
        target = ty.common_type(t1, t2) or t1
        a, lo, hi = self.collated(node, self.coerce(arg, target), self.coerce(low, target), self.coerce(high, target))
        return Call(ty.BOOL, "and", (Call(ty.BOOL, ">=", (a, lo)), Call(ty.BOOL, "<=", (a, hi))))

    def _like(self, node: exp.Expression, op: str) -> Expr:
        if node.args.get("escape") is not None:
            raise self.unsupported(node, "LIKE ... ESCAPE")
        left, right = self.bind(node.this), self.bind(node.expression)
        for side in (left, right):
            if side.type.kind not in ("text", "null"):
                raise self.type_error(node, f"{op.upper()} needs text operands, not {side.type}")
        collation = self.ci_collation_of(left) if op == "like" else None
        if collation is not None:  # MySQL: under a _ci collation LIKE ignores case and accents, not trailing spaces
            left, right = (Call(ty.TEXT, "collfold", (side,), collation) for side in (left, right))
        return Call(ty.BOOL, op, (left, right))

    def visit_Like(self, node: exp.Like) -> Expr:
        return self._like(node, "like")

    def visit_ILike(self, node: exp.ILike) -> Expr:
        return self._like(node, "ilike")

    def visit_Escape(self, node: exp.Escape) -> Expr:
        raise self.unsupported(node, "LIKE ... ESCAPE")

    # ------------------------------------------------------------------ conditionals
    def visit_Case(self, node: exp.Case) -> Expr:
        operand = node.this
        whens: list[tuple[Expr, Expr]] = []
        for if_node in node.args.get("ifs") or []:
            cond_node = if_node.this
            if operand is not None:
                cond = self.comparison(exp.EQ(this=operand.copy(), expression=cond_node.copy()), "=")
            else:
                cond = self.bool_operand(cond_node)
            whens.append((cond, self.bind(if_node.args["true"])))
        default = self.bind(node.args["default"]) if node.args.get("default") is not None else None
        result = self._unify([v for _, v in whens] + ([default] if default is not None else []), node)
        return Case(result, tuple((c, self.coerce(v, result)) for c, v in whens),
                    self.coerce(default, result) if default is not None else None)

    def visit_If(self, node: exp.If) -> Expr:
        cond = self.bool_operand(node.this)
        a = self.bind(node.args["true"])
        b = self.bind(node.args["false"]) if node.args.get("false") is not None else None
        result = self._unify([a] + ([b] if b is not None else []), node)
        return Case(result, ((cond, self.coerce(a, result)),), self.coerce(b, result) if b is not None else None)

    def _unify(self, values: list[Expr], node: exp.Expression) -> SqlType:
        result = ty.NULL
        for v in values:
            nxt = ty.common_type(result, v.type)
            if nxt is None:
                if isinstance(v, Literal) and v.type.kind == "text":
                    continue
                if result.kind == "text" and isinstance(v, Literal):
                    continue
                raise self.type_error(node, f"branches have incompatible types {result} and {v.type}")
            result = nxt
        return ty.TEXT if result.kind == "null" else result

    def visit_Coalesce(self, node: exp.Coalesce) -> Expr:
        args = [self.bind(node.this)] + [self.bind(e) for e in node.expressions]
        result = self._unify(args, node)
        return Call(result, "coalesce", tuple(self.coerce(a, result) for a in args))

    def visit_Nullif(self, node: exp.Nullif) -> Expr:
        a, b = self.bind(node.this), self.bind(node.expression)
        target = self._comparable(node, a, b)
        return Call(a.type, "nullif", (a, self.coerce(b, target) if b.type != a.type else b))

    def visit_Greatest(self, node: exp.Greatest) -> Expr:
        return self._variadic(node, "greatest")

    def visit_Least(self, node: exp.Least) -> Expr:
        return self._variadic(node, "least")

    def _variadic(self, node: exp.Expression, op: str) -> Expr:
        args = [self.bind(node.this)] + [self.bind(e) for e in node.expressions]
        result = self._unify(args, node)
        return Call(result, op, tuple(self.coerce(a, result) for a in args))

    # ------------------------------------------------------------------ strings
    def _text_fn(self, node: exp.Expression, op: str, result: SqlType = ty.TEXT) -> Expr:
        arg = self.bind(node.this)
        if arg.type.kind not in ("text", "null"):
            raise self.type_error(node, f"{op}() needs a text argument, not {arg.type}")
        return Call(result, op, (arg,))

    def visit_Lower(self, node: exp.Lower) -> Expr:
        return self._text_fn(node, "lower")

    def visit_Upper(self, node: exp.Upper) -> Expr:
        return self._text_fn(node, "upper")

    def visit_Length(self, node: exp.Length) -> Expr:
        return self._text_fn(node, "length", ty.INT4)

    def visit_Substring(self, node: exp.Substring) -> Expr:
        arg = self._to_text(self.bind(node.this))
        start = node.args.get("start")
        length = node.args.get("length")
        start_e = self.coerce(self.bind(start), ty.INT4) if start is not None else Literal(ty.INT4, 1)
        if length is None:
            return Call(ty.TEXT, "substring", (arg, start_e))
        return Call(ty.TEXT, "substring", (arg, start_e, self.coerce(self.bind(length), ty.INT4)))

    def visit_Trim(self, node: exp.Trim) -> Expr:
        arg = self.bind(node.this)
        position = (node.args.get("position") or "BOTH").upper()
        chars = node.args.get("expression")
        op = {"BOTH": "trim", "LEADING": "ltrim", "TRAILING": "rtrim"}[position]
        if chars is not None:
            return Call(ty.TEXT, op, (self._to_text(arg), self._to_text(self.bind(chars))))
        return Call(ty.TEXT, op, (self._to_text(arg),))

    def visit_Concat(self, node: exp.Concat) -> Expr:
        # PostgreSQL's concat() skips NULL arguments (unlike ||); MySQL's is NULL then.
        args = tuple(self.output_text(self.bind(e)) for e in node.expressions)
        return self.dialect.concat(args)

    def visit_Anonymous(self, node: exp.Anonymous) -> Expr:
        name = str(node.this).lower()
        if name == "every":
            return self._agg(node, "bool_and")
        bound = self.bind_anonymous(node, name)
        if bound is not None:
            return bound
        args = [self.bind(a) for a in node.expressions]
        if name in ("btrim", "ltrim", "rtrim") and 1 <= len(args) <= 2:
            return Call(ty.TEXT, {"btrim": "trim"}.get(name, name), tuple(self._to_text(a) for a in args))
        raise UnsupportedSqlError(f"function {name}() is not supported", locate(node, self.sql), self.sql)

    # ------------------------------------------------------------------ numbers
    def visit_Abs(self, node: exp.Abs) -> Expr:
        arg = self.bind(node.this)
        if not arg.type.is_numeric:
            raise self.type_error(node, f"abs() needs a number, not {arg.type}")
        return Call(arg.type, "abs", (arg,))

    def visit_Round(self, node: exp.Round) -> Expr:
        arg = self.bind(node.this)
        places = node.args.get("decimals")
        if not arg.type.is_numeric:
            raise self.type_error(node, f"round() needs a number, not {arg.type}")
        if places is None:
            result = SqlType.numeric(None, 0) if arg.type.kind == "numeric" else arg.type
            return Call(result, "round", (arg,))
        p = self.bind(places)
        if not isinstance(p, Literal) or not isinstance(p.value, int):
            raise self.unsupported(node, "round() with a non-constant number of places")
        if arg.type.is_float:
            raise self.type_error(node, "round(double precision, integer) does not exist in PostgreSQL")
        return Call(SqlType.numeric(None, max(p.value, 0)), "round", (self._to_numeric(arg), p))

    def visit_Floor(self, node: exp.Floor) -> Expr:
        return self._floor_ceil(node, "floor")

    def visit_Ceil(self, node: exp.Ceil) -> Expr:
        return self._floor_ceil(node, "ceil")

    def _floor_ceil(self, node: exp.Expression, op: str) -> Expr:
        if node.args.get("decimals") is not None:
            raise self.unsupported(node, f"{op}() with places")
        arg = self.bind(node.this)
        if not arg.type.is_numeric:
            raise self.type_error(node, f"{op}() needs a number, not {arg.type}")
        # PostgreSQL has floor/ceil for numeric and double precision; integers take the latter.
        result = SqlType.numeric(None, 0) if arg.type.kind == "numeric" else ty.FLOAT8
        return Call(result, op, (arg,))

    # ------------------------------------------------------------------ casts and dates
    def visit_Cast(self, node: exp.Cast) -> Expr:
        arg = self.bind(node.this)
        target_text = node.to.sql(dialect="postgres")
        try:
            target = parse_type(target_text)
        except Exception:
            raise self.unsupported(node, f"CAST to {target_text}") from None
        if target.kind == "interval":
            return self.cast_to_interval(node, node.this)
        typed = self.typed_cast(node, arg, target)
        if typed is not None:
            return typed
        return self.coerce(arg, target) if not isinstance(arg, Literal) else self._cast_literal(node, arg, target)

    def _cast_literal(self, node: exp.Expression, arg: Literal, target: SqlType) -> Expr:
        try:
            return Literal(target, _convert_literal(arg.value, target))
        except (ValueError, decimal.InvalidOperation):
            raise self.type_error(node, f"invalid input {arg.value!r} for type {target}") from None

    def visit_TryCast(self, node: exp.TryCast) -> Expr:
        raise self.unsupported(node, "TRY_CAST")

    def visit_Extract(self, node: exp.Extract) -> Expr:
        field_name = node.this.name.lower() if isinstance(node.this, (exp.Var, exp.Identifier)) else str(node.this).lower()
        if field_name not in _EXTRACT_FIELDS:
            raise self.unsupported(node, f"EXTRACT({field_name.upper()})")
        arg = self.bind(node.expression)
        if not (arg.type.is_temporal or arg.type.kind == "interval"):
            raise self.type_error(node, f"EXTRACT needs a date or timestamp, not {arg.type}")
        if is_date_part(node, self.sql):
            return self.date_part(node, field_name, arg)
        return self.extract_field(node, field_name, arg)

    def _trunc(self, node: exp.Expression, unit_node: exp.Expression | None, arg_node: exp.Expression) -> Expr:
        unit = unit_node.name.lower() if unit_node is not None else ""
        if unit.endswith("s") and unit not in ("microseconds", "milliseconds"):
            unit = unit[:-1]
        if unit not in _TRUNC_UNITS:
            raise self.unsupported(node, f"date_trunc unit {unit!r}")
        arg = self.bind(arg_node)
        if not arg.type.is_temporal:
            raise self.type_error(node, f"date_trunc needs a date or timestamp, not {arg.type}")
        # PostgreSQL: date_trunc(text, date) casts the date to timestamptz.
        result = SqlType("timestamptz") if arg.type.kind == "date" else arg.type
        return Call(result, "date_trunc", (arg,), unit)

    # MySQL's YEAR()/MONTH()/DAY() (sqlglot wraps the argument in TsOrDsToDate) and DATE_ADD/DATE_SUB
    def visit_TsOrDsToDate(self, node: exp.TsOrDsToDate) -> Expr:
        arg = self.bind(node.this)
        if not arg.type.is_temporal:
            raise self.type_error(node, f"a date or timestamp is needed here, not {arg.type}")
        return arg

    def _date_field(self, node: exp.Expression, field_name: str) -> Expr:
        return Cast(ty.INT4, self.extract_field(node, field_name, self.visit_TsOrDsToDate(node.this)
                                                if isinstance(node.this, exp.TsOrDsToDate) else self.bind(node.this)))

    def visit_Year(self, node: exp.Year) -> Expr:
        return self._date_field(node, "year")

    def visit_Month(self, node: exp.Month) -> Expr:
        return self._date_field(node, "month")

    def visit_Day(self, node: exp.Day) -> Expr:
        return self._date_field(node, "day")

    def visit_DateAdd(self, node: exp.DateAdd) -> Expr:
        return self._date_add(node, "+")

    def visit_DateSub(self, node: exp.DateSub) -> Expr:
        return self._date_add(node, "-")

    def _date_add(self, node: exp.Expression, op: str) -> Expr:
        """DATE_ADD(d, INTERVAL n unit): d ± n * INTERVAL 1 unit; a date moved by days or more stays a date (MySQL)."""
        unit = node.args.get("unit")
        unit_name = unit.name.lower() if unit is not None else "day"
        if unit_name == "quarter":
            unit_name, factor = "month", 3
        else:
            factor = 1
        one = exp.Interval(this=exp.Literal.string(str(factor)), unit=exp.Var(this=unit_name.upper()))
        amount = node.expression
        if isinstance(amount, exp.Literal):
            step: exp.Expression = exp.Interval(this=exp.Literal.string(str(int(amount.name) * factor)),
                                                unit=exp.Var(this=unit_name.upper()))
        else:
            step = exp.Mul(this=amount.copy(), expression=one)
        base = self.bind(node.this)
        if not base.type.is_temporal:
            raise self.type_error(node, f"DATE_ADD/DATE_SUB need a date or timestamp, not {base.type}")
        moved = self._interval_arithmetic(node, op, base, self.bind(step))
        if base.type.kind == "date" and unit_name.rstrip("s") in ("day", "week", "month", "year"):
            return self.coerce(moved, SqlType("date"))
        return moved

    def visit_TimestampTrunc(self, node: exp.TimestampTrunc) -> Expr:
        return self._trunc(node, node.args.get("unit"), node.this)

    def visit_DateTrunc(self, node: exp.DateTrunc) -> Expr:
        return self._trunc(node, node.args.get("unit"), node.this)

    # ------------------------------------------------------------------ aggregates
    def _agg(self, node: exp.Expression, func: str) -> Expr:
        return bind_aggregate(self, node, func)

    def visit_Count(self, node: exp.Count) -> Expr:
        if node.args.get("big_int") is None and node.expressions:
            raise self.unsupported(node, "COUNT with several arguments")
        return self._agg(node, "count")

    def visit_Sum(self, node: exp.Sum) -> Expr:
        return self._agg(node, "sum")

    def visit_Avg(self, node: exp.Avg) -> Expr:
        return self._agg(node, "avg")

    def visit_Min(self, node: exp.Min) -> Expr:
        return self._agg(node, "min")

    def visit_Max(self, node: exp.Max) -> Expr:
        return self._agg(node, "max")

    # ------------------------------------------------------------------ refused constructs
    def visit_Window(self, node: exp.Window) -> Expr:
        windows = getattr(self, "windows", None)  # set on the SELECT list's binder (sql.window)
        if windows is None:
            raise self.unsupported(node, f"window function (OVER ...) in {self.context}", "OVER")
        return windows.add(self, node)

    def visit_Grouping(self, node: exp.Grouping) -> Expr:
        if not getattr(self, "grouping", False):  # the SELECT list and HAVING of a GROUP BY (sql.grouping_sets)
            raise self.unsupported(node, f"GROUPING() in {self.context}", "GROUPING")
        return Call(ty.INT4, "grouping", tuple(self.bind(a) for a in node.expressions))

    def visit_Subquery(self, node: exp.Subquery) -> Expr:
        if self.subquery is not None:  # the query builder decorrelates it (``sql.subqueries``)
            return self.subquery(node)
        raise self.unsupported(node, f"a scalar subquery in {self.context}", "(")

    def visit_Exists(self, node: exp.Exists) -> Expr:
        if self.mark is not None:
            return self.mark(node)
        raise self.unsupported(node, f"EXISTS (subquery) in {self.context}", "EXISTS")

    def visit_Select(self, node: exp.Select) -> Expr:
        raise self.unsupported(node, "subquery in an expression", "SELECT")


def _array_list(node: exp.Expression, quantifier: str | None) -> list[exp.Expression] | None:
    """The elements of ``ANY (ARRAY[...])`` (``quantifier`` any) or ``ALL (ARRAY[...])`` (all), else None."""
    if quantifier == "any" and isinstance(node, exp.Any):
        inner = node.this
    elif quantifier == "all" and isinstance(node, exp.Anonymous) and str(node.this).upper() == "ALL" \
            and len(node.expressions) == 1:
        inner = node.expressions[0]
    else:
        return None
    while isinstance(inner, exp.Paren):
        inner = inner.this
    return list(inner.expressions) if isinstance(inner, exp.Array) and inner.expressions else None


def _describe(node: exp.Expression) -> str:
    if isinstance(node, exp.Func):
        return f"function {node.sql_name().lower()}()"
    return f"{type(node).__name__} expression ({node.sql(dialect='postgres')[:40]})"


def _convert_literal(value, target: SqlType):
    """Convert a constant the way PostgreSQL's input functions would."""
    if value is None:
        return None
    kind = target.kind
    if kind in ("int2", "int4", "int8"):
        if isinstance(value, str):
            return int(value.strip())
        if isinstance(value, bool):
            return int(value)
        return int(decimal.Decimal(value).to_integral_value(rounding=decimal.ROUND_HALF_UP)) \
            if not isinstance(value, int) else value
    if kind == "numeric":
        d = decimal.Decimal(value.strip()) if isinstance(value, str) else decimal.Decimal(str(value))
        scale = target.decimal_precision_scale[1]
        return d.quantize(decimal.Decimal(1).scaleb(-scale), rounding=decimal.ROUND_HALF_UP)
    if kind in ("float4", "float8"):
        return float(value)
    if kind in SqlType.TEXTUAL and kind != "text":
        return convert_textual(value, target)
    if kind == "text":
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)
    if kind == "bool":
        if isinstance(value, str):
            v = value.strip().lower()
            if v in ("t", "true", "yes", "y", "on", "1"):
                return True
            if v in ("f", "false", "no", "n", "off", "0"):
                return False
            raise ValueError(value)
        return bool(value)
    if kind == "date":
        if isinstance(value, str):
            text = _iso_date_part(value)
            return dt.date.fromisoformat(text[:10] if len(text) > 10 and text[10] in " T" else text)
        return value
    if kind in ("timestamp", "timestamptz"):
        if isinstance(value, str):
            parsed = dt.datetime.fromisoformat(_iso_date_part(value))
            if kind == "timestamptz" and parsed.tzinfo is None:
                parsed = parsed.replace(tzinfo=dt.timezone.utc)
            if kind == "timestamp" and parsed.tzinfo is not None:
                parsed = parsed.replace(tzinfo=None)
            return parsed
        if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
            return dt.datetime(value.year, value.month, value.day,
                               tzinfo=dt.timezone.utc if kind == "timestamptz" else None)
        return value
    raise ValueError(f"cannot convert {value!r} to {target}")


_YMD = re.compile(r"(\d{4})-(\d{1,2})-(\d{1,2})(?=$|[ T])")


def _iso_date_part(value: str) -> str:
    """``value`` stripped, its leading year-month-day zero-padded: PostgreSQL reads '2002-3-1' as 2002-03-01."""
    text = value.strip()
    m = _YMD.match(text)
    return f"{m[1]}-{int(m[2]):02d}-{int(m[3]):02d}{text[m.end():]}" if m else text
