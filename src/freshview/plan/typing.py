"""PostgreSQL typing rules for the expressions freshview supports.

Result types follow PostgreSQL: integer arithmetic stays integer (and
division truncates), integer mixed with numeric is numeric, anything with a
float is double precision; SUM(int) is bigint, SUM(bigint) and AVG(int) are
numeric, COUNT is bigint.

In ``plan`` (not ``sql``) because both the front end (binding) and the runtime's evaluators
(``common_type`` of a comparison; the accumulators' own expressions) use them.
"""

from __future__ import annotations

from freshview.plan.expr import Cast, Expr, Literal
from freshview.schema import AVG_MIN_SCALE, MAX_DECIMAL_PRECISION, SqlType

INT_RANK = {"int2": 0, "int4": 1, "int8": 2}
BOOL = SqlType("bool")
TEXT = SqlType("text")
INT4 = SqlType("int4")
INT8 = SqlType("int8")
FLOAT8 = SqlType("float8")
NULL = SqlType("null")


def numeric_scale(t: SqlType) -> int:
    if t.kind == "numeric":
        return t.decimal_precision_scale[1]
    return 0


def common_type(a: SqlType, b: SqlType) -> SqlType | None:
    """The type both operands are compared or combined in, or None if incompatible."""
    if a == b:
        return a
    if a.kind == "null":
        return b
    if b.kind == "null":
        return a
    if a.is_numeric and b.is_numeric:
        if a.is_float or b.is_float:
            return SqlType("float4") if a.kind == b.kind == "float4" else FLOAT8
        if a.kind == "numeric" or b.kind == "numeric":
            if a.kind == b.kind == "numeric" and a.precision is not None and b.precision is not None:
                scale = max(numeric_scale(a), numeric_scale(b))
                ints = max(a.precision - numeric_scale(a), b.precision - numeric_scale(b))
                return SqlType.numeric(min(ints + scale, MAX_DECIMAL_PRECISION), scale)
            return SqlType.numeric(None, max(numeric_scale(a), numeric_scale(b)))
        return a if INT_RANK[a.kind] >= INT_RANK[b.kind] else b
    if a.kind == "text" and b.kind == "text":
        return TEXT
    if a.is_temporal and b.is_temporal:
        if "timestamptz" in (a.kind, b.kind):
            return SqlType("timestamptz")
        return SqlType("timestamp")
    if a.kind == b.kind:
        return a
    return None


def arithmetic_type(op: str, a: SqlType, b: SqlType) -> SqlType | None:
    """Result type of ``a op b`` for + - * / %; None when PostgreSQL has no such operator."""
    if a.kind == "null" or b.kind == "null":
        other = b if a.kind == "null" else a
        return other if other.is_numeric else None
    if a.kind == "date" and b.is_integer and op in "+-":
        return SqlType("date")
    if a.is_integer and b.kind == "date" and op == "+":
        return SqlType("date")
    if a.kind == "date" and b.kind == "date" and op == "-":
        return INT4
    if not (a.is_numeric and b.is_numeric):
        return None
    if a.is_float or b.is_float:
        return FLOAT8 if not (a.kind == b.kind == "float4") else SqlType("float4")
    if a.is_integer and b.is_integer:
        return a if INT_RANK[a.kind] >= INT_RANK[b.kind] else b
    sa, sb = numeric_scale(a), numeric_scale(b)
    if op in "+-":
        scale = max(sa, sb)
    elif op == "*":
        scale = min(sa + sb, MAX_DECIMAL_PRECISION // 2)
    elif op == "/":
        # PostgreSQL gives at least 16 significant digits; keep a generous scale.
        scale = max(AVG_MIN_SCALE, sa, sb)
    else:  # %
        scale = max(sa, sb)
    return SqlType.numeric(None, scale)


def sum_type(arg: SqlType) -> SqlType | None:
    if arg.kind in ("int2", "int4"):
        return INT8
    if arg.kind == "int8":
        return SqlType.numeric(None, 0)
    if arg.kind == "numeric":
        return SqlType.numeric(None, numeric_scale(arg))
    if arg.is_float:
        return arg
    if arg.kind == "null":
        return SqlType.numeric(None, 0)
    return None


def avg_type(arg: SqlType) -> SqlType | None:
    if arg.is_integer or arg.kind == "null":
        return SqlType.numeric(None, AVG_MIN_SCALE)
    if arg.kind == "numeric":
        return SqlType.numeric(None, max(AVG_MIN_SCALE, numeric_scale(arg)))
    if arg.is_float:
        return FLOAT8
    return None


def cast_to(e: Expr, t: SqlType) -> Expr:
    """``e`` as type ``t``: itself when it has that type, a NULL of type ``t`` for a NULL literal, else a Cast."""
    if e.type == t:
        return e
    if isinstance(e, Literal) and e.value is None:
        return Literal(t, None)
    return Cast(t, e)
