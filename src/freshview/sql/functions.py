"""Binding PostgreSQL's scalar functions, boolean tests and interval arithmetic.

``FunctionBinding`` is a mixin of ``ExprBinder`` (it uses its ``bind``,
``coerce``, ``unsupported`` and ``type_error``): one ``visit_<Node>`` per
sqlglot function node, plus ``bind_anonymous`` for functions sqlglot does not
model.  Result types follow PostgreSQL's function resolution: an integer
argument of a math function picks the ``double precision`` variant (sqrt(int),
power(int, int), trunc(int) are float8), a numeric one keeps numeric
(trunc, sign), text functions return text.  Each function becomes a plan
``Call`` that both executors evaluate (runtime/expressions/arrow_<family>.py
and spark_functions.py), or a rewrite into existing operators:

* ``a IS [NOT] DISTINCT FROM b``  -> CASE on ``IS NULL`` and ``=``
* ``x IS [NOT] TRUE/FALSE/UNKNOWN`` -> ``coalesce(x, false)``, ``x IS NULL``
* ``date_part(f, x)``             -> ``CAST(EXTRACT(f FROM x) AS float8)``
* ``to_char(ts, fmt)``            -> concatenation of EXTRACTs, lpad and CASE
* ``mod(a, b)``                   -> ``a % b`` (sqlglot already spells it so)

Intervals are PostgreSQL's (months, days, microseconds): an interval
expression is ``make_interval(months, days, microseconds)`` over int8
expressions (or an interval literal), so ``date + qty * INTERVAL '1 day'``,
``ts - INTERVAL '1 month'``, ``o_date + (qty || ' days')::interval``,
``ts1 - ts2 > INTERVAL '2 hours'`` and ``EXTRACT(EPOCH FROM ts1 - ts2)``
bind to ``add_interval`` and integer arithmetic on the parts; an interval
column (of a source, or of a view read by another) is taken apart with
``interval_part`` (param months, days or micros).  Evaluated, ``make_interval`` is an
interval value (an output column: Arrow month_day_nano, see ``SqlType``).
Intervals compare as PostgreSQL's interval_cmp (a month is 30 days, a day
24 hours); GROUP BY, DISTINCT and set operations over an interval are
refused by the query builder, as equal intervals may be spelled apart.

Functions whose value is not a function of their arguments (random(),
current_time ...) are refused: a view is maintained incrementally, so a
row's value must not change between the step that inserted it and the
step that deletes it.  now(), current_date and the other instants are
bound by ``sql.temporal`` (time-based views), before these refusals.
"""

from __future__ import annotations

import decimal
import re

from sqlglot import exp
from sqlglot.tokens import TokenType

from freshview.errors import UnsupportedSqlError
from freshview.plan.expr import Call, Case, Cast, Expr, Literal
from freshview.schema import SqlType
from freshview.plan import typing as ty
from freshview.sql.parse import DIALECT, locate

INTERVAL = SqlType("interval")
_DAY_US = 86_400_000_000

_WHY_NOT_DETERMINISTIC = ("its value changes from one evaluation to the next, and a view is maintained "
                          "incrementally: each of its values must depend only on the rows it is computed from")

_NONDETERMINISTIC_NAMES = {
    "clock_timestamp", "statement_timestamp", "transaction_timestamp", "timeofday", "setseed",
    "random_normal", "gen_random_uuid", "uuid_generate_v4", "nextval", "currval", "lastval",
    "txid_current", "pg_backend_pid", "inet_client_addr", "current_user", "session_user",
    "now", "sysdate", "curtime", "utc_date", "utc_time", "utc_timestamp", "uuid", "uuid_short",  # MySQL
    "connection_id",
}


class FunctionBinding:
    """Mixin of ``ExprBinder``: PostgreSQL's scalar functions (see the module docstring)."""

    # ------------------------------------------------------------------ refusals
    def _nondeterministic(self, node: exp.Expression, name: str) -> UnsupportedSqlError:
        where = None
        for keyword in re.findall(r"[a-z_]+", name):  # the spelling used, when sqlglot kept no position
            where = locate(node, self.sql, keyword)
            if where is not None:
                break
        return UnsupportedSqlError(f"{name} is not supported: {_WHY_NOT_DETERMINISTIC}", where, self.sql)

    def visit_CurrentTime(self, node): raise self._nondeterministic(node, "current_time")  # noqa: E704
    def visit_Localtime(self, node): raise self._nondeterministic(node, "localtime")  # noqa: E704
    def visit_Rand(self, node): raise self._nondeterministic(node, "random()")  # noqa: E704
    def visit_Uuid(self, node): raise self._nondeterministic(node, "gen_random_uuid()")  # noqa: E704
    def visit_UtcTime(self, node): raise self._nondeterministic(node, "utc_time()")  # noqa: E704

    # ------------------------------------------------------------------ boolean tests
    def visit_NullSafeEQ(self, node: exp.NullSafeEQ) -> Expr:
        return Call(ty.BOOL, "not", (self._distinct(node),))

    def visit_NullSafeNEQ(self, node: exp.NullSafeNEQ) -> Expr:
        return self._distinct(node)

    def _distinct(self, node: exp.Expression) -> Expr:
        """a IS DISTINCT FROM b: never NULL; NULLs are equal to each other, unequal to values."""
        ne = self.comparison(node, "<>")
        a, b = ne.args
        a_null, b_null = Call(ty.BOOL, "is_null", (a,)), Call(ty.BOOL, "is_null", (b,))
        return Case(ty.BOOL, ((a_null, Call(ty.BOOL, "not", (b_null,))),
                              (b_null, Literal(ty.BOOL, True))), ne)

    def boolean_test(self, node: exp.Is) -> Expr:
        """x IS TRUE / IS FALSE (IS UNKNOWN is IS NULL); NOT comes from the caller's negate flag."""
        value = node.expression.this if isinstance(node.expression, exp.Boolean) else None
        if value is None:
            raise self.unsupported(node, f"IS {node.expression.sql(dialect=DIALECT)}", "IS")
        arg = self.bool_operand(node.this)
        if not value:
            arg = Call(ty.BOOL, "not", (arg,))
        return Call(ty.BOOL, "coalesce", (arg, Literal(ty.BOOL, False)))

    # ------------------------------------------------------------------ math
    def _float_arg(self, node: exp.Expression, arg_node: exp.Expression, name: str) -> Expr:
        arg = self.bind(arg_node)
        if arg.type.kind == "numeric":
            raise self.unsupported(
                node, f"{name}(numeric) (its result scale depends on the value; "
                      f"cast the argument to double precision)")
        if not (arg.type.is_numeric or arg.type.kind == "null"):
            raise self.type_error(node, f"function {name}({arg.type}) does not exist")
        return self.coerce(arg, ty.FLOAT8)

    def _float_fn(self, node: exp.Expression, name: str, op: str | None = None) -> Expr:
        return Call(ty.FLOAT8, op or name, (self._float_arg(node, node.this, name),))

    def visit_Sqrt(self, node: exp.Sqrt) -> Expr:
        return self._float_fn(node, "sqrt")

    def visit_Cbrt(self, node: exp.Cbrt) -> Expr:
        return self._float_fn(node, "cbrt")

    def visit_Exp(self, node: exp.Exp) -> Expr:
        return self._float_fn(node, "exp")

    def visit_Ln(self, node: exp.Ln) -> Expr:
        return self._float_fn(node, "ln")

    def visit_Log(self, node: exp.Log) -> Expr:
        if node.args.get("expression") is not None:
            raise self.unsupported(node, "log(b, x) (PostgreSQL computes it in numeric; use ln(x) / ln(b))")
        return self._float_fn(node, "log", "log10")

    def visit_Pow(self, node: exp.Pow) -> Expr:
        # PostgreSQL picks power(float8, float8) when an argument is a float (a numeric one is cast),
        # power(numeric, numeric) when one is numeric and none a float, float8 for integers.
        base, expo = self.bind(node.this), self.bind(node.expression)
        if base.type.is_float or expo.type.is_float:
            args = []
            for arg in (base, expo):
                if not (arg.type.is_numeric or arg.type.kind == "null"):
                    raise self.type_error(node, f"function power({base.type}, {expo.type}) does not exist")
                args.append(self.coerce(arg, ty.FLOAT8))
            return Call(ty.FLOAT8, "power", tuple(args))
        base = self._float_arg(node, node.this, "power")
        expo = self._float_arg(node, node.expression, "power")
        return Call(ty.FLOAT8, "power", (base, expo))

    def _number_arg(self, node: exp.Expression, name: str) -> Expr:
        arg = self.bind(node.this)
        if arg.type.kind == "null":
            return self.coerce(arg, ty.FLOAT8)
        if not arg.type.is_numeric:
            raise self.type_error(node, f"function {name}({arg.type}) does not exist")
        return arg if arg.type.kind == "numeric" else self.coerce(arg, ty.FLOAT8)

    def visit_Sign(self, node: exp.Sign) -> Expr:
        arg = self._number_arg(node, "sign")
        result = SqlType.numeric(None, 0) if arg.type.kind == "numeric" else ty.FLOAT8
        return Call(result, "sign", (arg,))

    def visit_Trunc(self, node: exp.Trunc) -> Expr:
        places = node.args.get("decimals")
        arg = self._number_arg(node, "trunc")
        if places is None:
            if arg.type.kind == "numeric":
                return Call(SqlType.numeric(None, 0), "trunc", (arg, Literal(ty.INT4, 0)))
            return Call(ty.FLOAT8, "trunc", (arg,))
        p = self.bind(places)
        if not isinstance(p, Literal) or not isinstance(p.value, int):
            raise self.unsupported(node, "trunc() with a non-constant number of places")
        if arg.type.is_float:  # trunc(int, int) is trunc(numeric, int); trunc(float8, int) does not exist
            if not self.bind(node.this).type.is_integer:
                raise self.type_error(node, "function trunc(double precision, integer) does not exist")
            arg = self.coerce(self.bind(node.this), SqlType.numeric(None, 0))
        return Call(SqlType.numeric(None, max(p.value, 0)), "trunc", (arg, p))

    # ------------------------------------------------------------------ text
    def _text_arg(self, node: exp.Expression, arg_node: exp.Expression | None, name: str) -> Expr:
        arg = self.bind(arg_node)
        if arg.type.kind == "null":
            return Literal(ty.TEXT, None)
        if arg.type.kind != "text":
            raise self.type_error(node, f"function {name}() needs text, not {arg.type}")
        return arg

    def _int_arg(self, node: exp.Expression, arg_node: exp.Expression | None, name: str) -> Expr:
        arg = self.bind(arg_node)
        if arg.type.kind == "null":
            return Literal(ty.INT4, None)
        if arg.type.kind not in ("int2", "int4") and not (isinstance(arg, Literal) and arg.type.is_integer):
            raise self.type_error(node, f"function {name}() needs an integer count, not {arg.type}")
        return self.coerce(arg, ty.INT4)

    def visit_Replace(self, node: exp.Replace) -> Expr:
        args = (self._text_arg(node, node.this, "replace"), self._text_arg(node, node.expression, "replace"),
                self._text_arg(node, node.args.get("replacement"), "replace"))
        return Call(ty.TEXT, "replace", args)

    def visit_SplitPart(self, node: exp.SplitPart) -> Expr:
        return Call(ty.TEXT, "split_part", (
            self._text_arg(node, node.this, "split_part"),
            self._text_arg(node, node.args.get("delimiter"), "split_part"),
            self._int_arg(node, node.args.get("part_index"), "split_part")))

    def visit_StrPosition(self, node: exp.StrPosition) -> Expr:
        if node.args.get("position") is not None or node.args.get("occurrence") is not None:
            raise self.unsupported(node, "strpos() with a start position")
        return Call(ty.INT4, "strpos", (self._text_arg(node, node.this, "strpos"),
                                        self._text_arg(node, node.args.get("substr"), "strpos")))

    def visit_Left(self, node: exp.Left) -> Expr:
        return Call(ty.TEXT, "left", (self._text_arg(node, node.this, "left"),
                                      self._int_arg(node, node.expression, "left")))

    def visit_Right(self, node: exp.Right) -> Expr:
        return Call(ty.TEXT, "right", (self._text_arg(node, node.this, "right"),
                                       self._int_arg(node, node.expression, "right")))

    def visit_Pad(self, node: exp.Pad) -> Expr:
        name = "lpad" if node.args.get("is_left") else "rpad"
        fill = node.args.get("fill_pattern")
        fill_e = self._text_arg(node, fill, name) if fill is not None else Literal(ty.TEXT, " ")
        return Call(ty.TEXT, name, (self._text_arg(node, node.this, name),
                                    self._int_arg(node, node.expression, name), fill_e))

    def visit_Repeat(self, node: exp.Repeat) -> Expr:
        return Call(ty.TEXT, "repeat", (self._text_arg(node, node.this, "repeat"),
                                        self._int_arg(node, node.args.get("times"), "repeat")))

    def visit_Reverse(self, node: exp.Reverse) -> Expr:
        return Call(ty.TEXT, "reverse", (self._text_arg(node, node.this, "reverse"),))

    def visit_Initcap(self, node: exp.Initcap) -> Expr:
        return Call(ty.TEXT, "initcap", (self._text_arg(node, node.this, "initcap"),))

    def visit_MD5(self, node: exp.MD5) -> Expr:
        return Call(ty.TEXT, "md5", (self._text_arg(node, node.this, "md5"),))

    def visit_StartsWith(self, node: exp.StartsWith) -> Expr:
        return Call(ty.BOOL, "starts_with", (self._text_arg(node, node.this, "starts_with"),
                                             self._text_arg(node, node.expression, "starts_with")))

    def visit_ConcatWs(self, node: exp.ConcatWs) -> Expr:
        sep, *rest = node.expressions
        if not rest:
            raise self.type_error(node, "concat_ws() needs a separator and at least one value")
        return Call(ty.TEXT, "concat_ws", (self._text_arg(node, sep, "concat_ws"),
                                           *[self.output_text(self.bind(e)) for e in rest]))

    def output_text(self, e: Expr) -> Expr:
        """A value as its type's output function spells it (concat, concat_ws): a boolean is t/f, not true/false."""
        if e.type.kind == "bool":
            return Case(ty.TEXT, ((e, Literal(ty.TEXT, "t")), (Call(ty.BOOL, "not", (e,)), Literal(ty.TEXT, "f"))),
                        None)
        return self._to_text(e)

    def visit_RegexpReplace(self, node: exp.RegexpReplace) -> Expr:
        from freshview.sql import regex

        s = self._text_arg(node, node.this, "regexp_replace")
        pattern = self.bind(node.expression)
        repl = self.bind(node.args["replacement"])
        flags_node = node.args.get("modifiers")
        flags = self.bind(flags_node) if flags_node is not None else Literal(ty.TEXT, "")
        for part, what in ((pattern, "pattern"), (repl, "replacement"), (flags, "flags")):
            if not (isinstance(part, Literal) and part.type.kind in ("text", "null")):
                raise self.unsupported(node, f"regexp_replace() with a non-constant {what}")
        if pattern.value is None or repl.value is None or flags.value is None:
            return Literal(ty.TEXT, None)
        try:
            rx = regex.translate(pattern.value, repl.value, flags.value)
        except regex.Unsupported as why:
            raise self.unsupported(node, f"regexp_replace() {why}") from None
        return Call(ty.TEXT, "regexp_replace", (s, *[Literal(ty.TEXT, t) for t in rx.texts()],
                                                Literal(ty.BOOL, rx.all)))

    # ------------------------------------------------------------------ functions sqlglot does not model
    def bind_anonymous(self, node: exp.Anonymous, name: str) -> Expr | None:
        if name in _NONDETERMINISTIC_NAMES:
            raise self._nondeterministic(node, f"{name}()")
        handler = getattr(self, f"fn_{name}", None)
        return handler(node, node.expressions) if handler is not None else None

    def fn_octet_length(self, node: exp.Expression, args: list) -> Expr:
        if len(args) != 1:
            raise self.type_error(node, "octet_length() takes one argument")
        return Call(ty.INT4, "octet_length", (self._to_text(self.bind(args[0])),))

    def fn_make_date(self, node: exp.Expression, args: list) -> Expr:
        if len(args) != 3:
            raise self.type_error(node, "make_date(year, month, day) takes three arguments")
        return Call(SqlType("date"), "make_date", tuple(self._int_arg(node, a, "make_date") for a in args))

    def fn_age(self, node: exp.Expression, args: list) -> Expr:
        if len(args) == 1:
            raise self._nondeterministic(node, "age(timestamp) (the age at current_date)")
        if len(args) != 2:
            raise self.type_error(node, "age() takes one or two arguments")
        a, b = (self._timestamp_arg(node, x, "age") for x in args)
        if a.type != b.type:
            a, b = self.coerce(a, SqlType("timestamptz")), self.coerce(b, SqlType("timestamptz"))
        return Call(INTERVAL, "make_interval", tuple(Call(ty.INT8, "age", (a, b), part)
                                                     for part in ("months", "days", "micros")))

    def fn_date_part(self, node: exp.Expression, args: list) -> Expr:  # (when sqlglot leaves it anonymous)
        raise self.unsupported(node, "date_part() with a non-constant field")

    def _timestamp_arg(self, node: exp.Expression, arg_node: exp.Expression, name: str) -> Expr:
        arg = self.bind(arg_node)
        if isinstance(arg, Literal) and arg.type.kind == "text":
            return self._cast_literal(node, arg, SqlType("timestamp"))
        if arg.type.kind == "date":
            return self.coerce(arg, SqlType("timestamp"))
        if arg.type.kind not in ("timestamp", "timestamptz"):
            raise self.type_error(node, f"function {name}() needs timestamps, not {arg.type}")
        return arg

    # ------------------------------------------------------------------ dates
    def date_part(self, node: exp.Extract, field_name: str, arg: Expr) -> Expr:
        """date_part(text, x): EXTRACT as double precision; a date is a timestamp here."""
        if arg.type.kind == "date":
            arg = self.coerce(arg, SqlType("timestamp"))
        return Cast(ty.FLOAT8, self.extract_field(node, field_name, arg))

    def extract_field(self, node: exp.Extract, field_name: str, arg: Expr) -> Expr:
        if arg.type.kind == "interval":
            return self.extract_interval(node, field_name, arg)
        if arg.type.kind == "date" and field_name in ("hour", "minute", "second", "milliseconds", "microseconds"):
            raise self.type_error(node, f'unit "{field_name}" not supported for type date')
        scale = 6 if field_name in ("second", "epoch", "milliseconds") else 0
        return Call(SqlType.numeric(None, scale), "extract", (arg,), field_name)

    def visit_TimeToStr(self, node: exp.TimeToStr) -> Expr:
        from freshview.sql import to_char

        fmt_text = _source_string_arg(self.sql, node)
        arg = self.bind(node.this)
        if arg.type.is_numeric:
            raise self.unsupported(node, "to_char() of a number")
        if not arg.type.is_temporal:
            raise self.type_error(node, f"to_char() needs a date or timestamp, not {arg.type}")
        if fmt_text is None:
            raise self.unsupported(node, "to_char() with a non-constant format")
        if arg.type.kind == "date":
            arg = self.coerce(arg, SqlType("timestamp"))
        try:
            return to_char.expand(arg, fmt_text)
        except to_char.Unsupported as why:
            raise self.unsupported(node, f"to_char() format {why}") from None

    # ------------------------------------------------------------------ intervals
    def cast_to_interval(self, node: exp.Cast, arg_node: exp.Expression) -> Expr:
        """``(n || ' days')::interval`` with an integer n, and interval literals spelled as casts."""
        inner = arg_node.this if isinstance(arg_node, exp.Paren) else arg_node
        if isinstance(inner, exp.Literal) and inner.is_string:
            return self._interval_literal(node, inner.this)
        if isinstance(inner, exp.DPipe) and isinstance(inner.right, exp.Literal) and inner.right.is_string:
            count = self.bind(inner.left)
            unit = inner.right.this.strip().lower()
            parts = _unit_parts(unit)
            if count.type.is_integer and parts is not None:
                n = self.coerce(count, ty.INT8)
                return _make_interval(*[_mul_const(n, k) for k in parts])
        raise self.unsupported(node, "a cast to interval (supported: (integer || ' unit')::interval)")

    def _interval_literal(self, node: exp.Expression, text: str) -> Expr:
        m = re.fullmatch(r"\s*(-?\d+)\s+([a-z]+)\s*", text.lower())
        parts = _unit_parts(m.group(2)) if m else None
        if parts is None:
            raise self.unsupported(node, f"interval {text!r} (use a form like INTERVAL '3' MONTH)")
        n = int(m.group(1))
        return Literal(INTERVAL, tuple(n * k for k in parts))

    def interval_arithmetic(self, node: exp.Expression, op: str, left: Expr, right: Expr) -> Expr:
        lk, rk = left.type.kind, right.type.kind
        if op == "+" and lk == "interval" and rk != "interval":
            left, right, lk, rk = right, left, rk, lk
        if lk == "interval" and rk == "interval" and op in "+-":
            a, b = _parts(left), _parts(right)
            if a is not None and b is not None:
                return _make_interval(*[_arith(op, x, y) for x, y in zip(a, b)])
        if op in "+-" and rk == "interval" and left.type.is_temporal:
            parts = _parts(right)
            if parts is not None:
                if op == "-":
                    parts = tuple(_negate(p) for p in parts)
                result = SqlType("timestamp") if lk == "date" else left.type
                start = self.coerce(left, SqlType("timestamp")) if lk == "date" else left
                return Call(result, "add_interval", (start, *parts))
        if op == "*" and "interval" in (lk, rk):
            iv, k = (left, right) if lk == "interval" else (right, left)
            parts = _parts(iv)
            if parts is not None and k.type.is_integer:
                k8 = self.coerce(k, ty.INT8)
                return _make_interval(*[_arith("*", p, k8) for p in parts])
            if parts is not None and k.type.kind == "null":
                return _make_interval(*[Literal(ty.INT8, None)] * 3)
            raise self.unsupported(node, "an interval multiplied by a non-integer")
        if any(side.type.kind == "interval" and _parts(side) is None for side in (left, right)):
            raise self.unsupported(node, "arithmetic on an interval column")
        raise self.unsupported(node, f"operator {op} on {left.type} and {right.type}")

    def timestamp_difference(self, node: exp.Expression, left: Expr, right: Expr) -> Expr:
        """timestamp - timestamp: an interval of days and microseconds (PostgreSQL's justify_hours)."""
        target = ty.common_type(left.type, right.type) or SqlType("timestamp")
        if target.kind == "date":
            target = SqlType("timestamp")
        a, b = self.coerce(left, target), self.coerce(right, target)
        diff = Call(ty.INT8, "-", (Call(ty.INT8, "epoch_us", (a,)), Call(ty.INT8, "epoch_us", (b,))))
        day = Literal(ty.INT8, _DAY_US)
        return _make_interval(Literal(ty.INT8, 0), Call(ty.INT8, "/", (diff, day)), Call(ty.INT8, "%", (diff, day)))

    def interval_comparison(self, node: exp.Expression, op: str, left: Expr, right: Expr) -> Expr:
        """Intervals compare by their span with a month of 30 days and a day of 24 hours."""
        if isinstance(right, Literal) and right.type.kind == "text":
            right = self._interval_literal(node, right.value)
        if isinstance(left, Literal) and left.type.kind == "text":
            left = self._interval_literal(node, left.value)
        spans = []
        for side in (left, right):
            parts = _parts(side) if side.type.kind == "interval" else None
            if parts is None and side.type.kind == "interval":
                raise self.unsupported(node, "comparing an interval column")
            if parts is None:
                raise self.type_error(node, f"cannot compare {left.type} with {right.type}")
            spans.append(_span_us(parts))
        return Call(ty.BOOL, op, tuple(spans))

    def extract_interval(self, node: exp.Expression, field_name: str, arg: Expr) -> Expr:
        parts = _parts(arg)
        if parts is None:
            raise self.unsupported(node, "EXTRACT from an interval column")
        months, days, micros = parts
        i8 = lambda v: Literal(ty.INT8, v)  # noqa: E731
        div = lambda a, k: Call(ty.INT8, "/", (a, i8(k)))  # noqa: E731  (truncates, as C)
        mod = lambda a, k: Call(ty.INT8, "%", (a, i8(k)))  # noqa: E731
        num0, num6 = SqlType.numeric(None, 0), SqlType.numeric(None, 6)
        if field_name == "epoch":
            whole = _sum([_mul_const(div(months, 12), 31_557_600), _mul_const(mod(months, 12), 2_592_000),
                          _mul_const(days, 86_400)])
            frac = Call(num6, "*", (Cast(num0, micros), Literal(num6, decimal.Decimal("0.000001"))))
            return Call(num6, "+", (Cast(num6, whole), frac))
        fields = {
            "year": lambda: div(months, 12), "month": lambda: mod(months, 12), "day": lambda: days,
            "hour": lambda: div(micros, 3_600_000_000), "minute": lambda: mod(div(micros, 60_000_000), 60),
            "millennium": lambda: div(months, 12_000), "century": lambda: div(months, 1_200),
            "decade": lambda: div(months, 120), "quarter": lambda: Call(ty.INT8, "+", (div(mod(months, 12), 3), i8(1))),
        }
        if field_name == "second":
            return Call(num6, "*", (Cast(num0, mod(micros, 60_000_000)),
                                    Literal(num6, decimal.Decimal("0.000001"))))
        if field_name not in fields:
            raise self.unsupported(node, f"EXTRACT({field_name.upper()} FROM interval)")
        return Cast(num0, fields[field_name]())


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------

_UNITS = {"year": (12, 0, 0), "month": (1, 0, 0), "week": (0, 7, 0), "day": (0, 1, 0),
          "hour": (0, 0, 3_600_000_000), "minute": (0, 0, 60_000_000), "second": (0, 0, 1_000_000),
          "mon": (1, 0, 0), "min": (0, 0, 60_000_000), "sec": (0, 0, 1_000_000), "yr": (12, 0, 0),
          "hr": (0, 0, 3_600_000_000), "d": (0, 1, 0), "h": (0, 0, 3_600_000_000), "y": (12, 0, 0),
          "m": (0, 0, 60_000_000), "s": (0, 0, 1_000_000)}


def _unit_parts(unit: str) -> tuple[int, int, int] | None:
    u = unit.strip().lower()
    if u not in _UNITS and u.endswith("s"):
        u = u[:-1]
    return _UNITS.get(u)


def _make_interval(months: Expr, days: Expr, micros: Expr) -> Expr:
    parts = (months, days, micros)
    if all(isinstance(p, Literal) for p in parts):
        values = tuple(p.value for p in parts)  # type: ignore[attr-defined]
        return Literal(INTERVAL, None if None in values else values)
    return Call(INTERVAL, "make_interval", parts)


def _parts(e: Expr) -> tuple[Expr, Expr, Expr] | None:
    """An interval expression as (months, days, microseconds) int8 expressions (None: not decomposable)."""
    if isinstance(e, Literal) and e.type.kind in ("interval", "null"):
        if e.value is None:
            return (Literal(ty.INT8, None),) * 3
        return tuple(Literal(ty.INT8, v) for v in e.value)  # type: ignore[return-value]
    if isinstance(e, Call) and e.op == "make_interval":
        return e.args  # type: ignore[return-value]
    if e.type.kind == "interval":  # a column, a CASE ...: taken apart where evaluated
        return tuple(Call(ty.INT8, "interval_part", (e,), p) for p in ("months", "days", "micros"))  # type: ignore[return-value]
    return None


def _mul_const(e: Expr, k: int) -> Expr:
    if k == 0:
        return Literal(ty.INT8, 0) if not (isinstance(e, Literal) and e.value is None) else Literal(ty.INT8, None)
    if k == 1:
        return e
    if isinstance(e, Literal):
        return Literal(ty.INT8, None if e.value is None else e.value * k)
    return Call(ty.INT8, "*", (e, Literal(ty.INT8, k)))


def _negate(e: Expr) -> Expr:
    if isinstance(e, Literal):
        return Literal(ty.INT8, None if e.value is None else -e.value)
    return Call(ty.INT8, "neg", (e,))


def _arith(op: str, a: Expr, b: Expr) -> Expr:
    if isinstance(a, Literal) and isinstance(b, Literal):
        if a.value is None or b.value is None:
            return Literal(ty.INT8, None)
        return Literal(ty.INT8, {"+": a.value + b.value, "-": a.value - b.value, "*": a.value * b.value}[op])
    return Call(ty.INT8, op, (a, b))


def _sum(parts: list[Expr]) -> Expr:
    out = parts[0]
    for p in parts[1:]:
        out = _arith("+", out, p)
    return out


def _span_us(parts: tuple[Expr, Expr, Expr]) -> Expr:
    months, days, micros = parts
    return _sum([_mul_const(months, 30 * _DAY_US), _mul_const(days, _DAY_US), micros])


def is_date_part(node: exp.Extract, sql: str) -> bool:
    """Whether an Extract node was spelled date_part(...) (sqlglot parses both alike; the types differ)."""
    from freshview.sql.parse import _first_offset

    offset = _first_offset(node)
    if offset is None:
        return False
    before = sql[:offset].lower()
    found = [m.start() for m in re.finditer(r"\b(?:extract|date_part)\s*\(", before)]
    return bool(found) and before.startswith("date_part", found[-1])


def _source_string_arg(sql: str, node: exp.Expression) -> str | None:
    """The text of the string literal that is the second argument of the call at ``node`` (as written:
    sqlglot rewrites to_char formats into strftime)."""
    start = (getattr(node, "meta", None) or {}).get("start")
    if start is None:
        return None
    from sqlglot.dialects.dialect import Dialect

    tokens = Dialect.get_or_raise(DIALECT).tokenize(sql[start:])
    depth, commas = 0, 0
    for i, tok in enumerate(tokens):
        if tok.token_type == TokenType.L_PAREN:
            depth += 1
        elif tok.token_type == TokenType.R_PAREN:
            depth -= 1
            if depth == 0:
                return None
        elif tok.token_type == TokenType.COMMA and depth == 1:
            commas += 1
            if commas == 1:
                nxt = tokens[i + 1] if i + 1 < len(tokens) else None
                after = tokens[i + 2] if i + 2 < len(tokens) else None
                if nxt is not None and nxt.token_type == TokenType.STRING and \
                        after is not None and after.token_type == TokenType.R_PAREN:
                    return nxt.text
                return None
    return None
