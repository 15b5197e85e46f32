"""SQL dialects: how a view's SQL is read and what it computes, PostgreSQL or MySQL.

One binder and one plan builder serve both; where the two languages differ
the binder asks its ``Dialect`` (``ExprBinder.dialect``), and the MySQL
rules are written here as plans of the operators both executors already
have (a ``NULLIF`` divisor for "division by zero is NULL", ``||`` chains for
a NULL-propagating CONCAT), plus two new scalar functions, the collation key and fold
(``collkey``, ``collfold``, the collation their parameter, ``freshview.collation``).

MySQL rules (MariaDB 10.11 is the reference; tests/differential/test_mysql_dialect.py
checks them against it):

* parsed with sqlglot's ``mysql`` dialect: backticks, ``"..."`` strings,
  ``DIV``, ``||``/``&&`` as OR/AND, ``XOR``, ``<=>``, ``LIMIT a, b`` …;
* ``a / b`` is DECIMAL with the dividend's scale + 4 (div_precision_increment)
  for exact operands, DOUBLE with a float; ``/``, ``DIV``, ``%``/``MOD`` by zero are NULL;
  ``DIV`` truncates to BIGINT; ``+ - *`` of integers are BIGINT;
* SUM of an exact number is DECIMAL(p + 22, s) (capped at 38 digits), AVG is
  DECIMAL(p + 4, s + 4), COUNT BIGINT;
* comparisons are booleans; a result column holding one is MySQL's BOOLEAN
  (TINYINT(1)): 1/0; numbers are accepted where a condition is expected
  (``WHERE qty`` means ``qty <> 0``);
* CONCAT is NULL when any argument is (CONCAT_WS skips NULLs);
* text compares, groups, joins and is DISTINCT by its collation: a column's
  own (``SqlType.collation``), an explicit ``COLLATE``, or the default
  ``utf8mb4_general_ci`` (case- and accent-insensitive, PAD SPACE; LIKE folds
  case and accents but is not PAD SPACE: ``collfold``).
  A group or DISTINCT row shows the smallest (by code point) spelling among
  its current members (MariaDB shows an arbitrary one);
* refused with a located error: arithmetic on strings (MySQL's implicit
  string-to-number conversion), MIN/MAX/ORDER BY over case-insensitive text,
  set operations (UNION, INTERSECT, EXCEPT without ALL) over text, non-aggregated
  columns outside GROUP BY, and collations freshview has no key for.
"""

from __future__ import annotations

from freshview.collation import GENERAL_CI
from freshview.plan.expr import Call, Expr, Literal
from freshview.schema import MAX_DECIMAL_PRECISION, SqlType
from freshview.plan import typing as ty


class Dialect:
    """PostgreSQL: the rules of ``plan.typing``; text compares by code point."""

    name = "postgres"
    sqlglot = "postgres"
    ungrouped_hint = ""  # appended to the error for a column outside GROUP BY
    string_arithmetic = ""  # non-empty: arithmetic on text is refused as this construct (else a type error)
    unnamed_subqueries = True  # PostgreSQL 16+: a subquery in FROM may go without an alias

    def collation(self, t: SqlType) -> str | None:
        """The collation text of type ``t`` compares by, or None for code points (no key needed)."""
        return None

    def sum_type(self, arg: SqlType) -> SqlType | None:
        return ty.sum_type(arg)

    def avg_type(self, arg: SqlType) -> SqlType | None:
        return ty.avg_type(arg)

    def arithmetic(self, op: str, left: Expr, right: Expr) -> Expr | None:
        """``left op right`` where this dialect differs from PostgreSQL's rules, else None."""
        return None

    def truth(self, e: Expr) -> Expr | None:
        """``e`` as a condition when it is not boolean, or None (not a condition)."""
        return None

    def concat(self, args: tuple[Expr, ...]) -> Expr:
        """CONCAT(args) of text arguments: PostgreSQL skips NULLs."""
        return Call(ty.TEXT, "concat", args)

    def int_div(self, left: Expr, right: Expr) -> Expr | None:
        return None


POSTGRES = Dialect()


def _modulo(left: Expr, right: Expr) -> Expr | None:
    """``left % right`` in the operands' common arithmetic type; NULL when ``right`` is zero (MySQL)."""
    result = ty.arithmetic_type("%", left.type, right.type)
    if result is None:
        return None
    return Call(result, "%", (_as(left, result), _nonzero(_as(right, result))))


def _nonzero(e: Expr) -> Expr:
    """``NULLIF(e, 0)``: a zero divisor becomes NULL, so the quotient is NULL (MySQL)."""
    return Call(e.type, "nullif", (e, Literal(e.type, 0)))


def _as(e: Expr, t: SqlType) -> Expr:
    return ty.cast_to(e, t)


def _precision(t: SqlType) -> int:
    """Digits of an exact type as MariaDB counts them for SUM/AVG."""
    return {"int2": 5, "int4": 10, "int8": 19}.get(t.kind) or (t.precision or MAX_DECIMAL_PRECISION)


class MySqlDialect(Dialect):
    name = "mysql"
    unnamed_subqueries = False  # "Every derived table must have its own alias"
    sqlglot = "mysql"
    ungrouped_hint = (" (MySQL without ONLY_FULL_GROUP_BY would show an indeterminate value of it; freshview "
                      "refuses that: wrap it in MIN() or MAX(), or add it to GROUP BY)")
    string_arithmetic = "arithmetic on a string (MySQL's implicit string-to-number conversion; CAST the string to a number)"

    def collation(self, t: SqlType) -> str | None:
        if t.kind != "text":
            return None
        return t.collation or GENERAL_CI

    def sum_type(self, arg: SqlType) -> SqlType | None:
        if arg.is_integer or arg.kind == "numeric":
            return SqlType.numeric(min(_precision(arg) + 22, MAX_DECIMAL_PRECISION), ty.numeric_scale(arg))
        return ty.sum_type(arg)

    def avg_type(self, arg: SqlType) -> SqlType | None:
        if arg.is_integer or arg.kind == "numeric":
            scale = ty.numeric_scale(arg) + 4
            return SqlType.numeric(min(_precision(arg) + 4, MAX_DECIMAL_PRECISION), scale)
        return ty.avg_type(arg)

    def arithmetic(self, op: str, left: Expr, right: Expr) -> Expr | None:
        a, b = left.type, right.type
        if not (a.is_numeric or a.kind == "null") or not (b.is_numeric or b.kind == "null"):
            return None  # dates and intervals: the shared rules
        if a.is_float or b.is_float:
            if op in "/%":
                return Call(ty.FLOAT8, op, (_as(left, ty.FLOAT8), _nonzero(_as(right, ty.FLOAT8))))
            return None
        if op == "/":  # exact division: the dividend's scale + div_precision_increment (4)
            result = SqlType.numeric(None, ty.numeric_scale(a) + 4)
            num = _as(left, SqlType.numeric(None, ty.numeric_scale(a)))
            den = _as(right, SqlType.numeric(None, ty.numeric_scale(b)))
            return Call(result, "/", (num, _nonzero(den)))
        if a.kind in ("numeric", "null") and b.kind in ("numeric", "null"):
            return _modulo(left, right) if op == "%" else None
        if (a.is_integer or a.kind == "null") and (b.is_integer or b.kind == "null"):
            # MariaDB widens integer + - * % to BIGINT
            args = (_as(left, ty.INT8), _as(right, ty.INT8))
            if op == "%":
                args = (args[0], _nonzero(args[1]))
            return Call(ty.INT8, op, args)
        return _modulo(left, right) if op == "%" else None

    def int_div(self, left: Expr, right: Expr) -> Expr | None:
        """``a DIV b``: the quotient truncated toward zero, BIGINT; NULL for a zero ``b``.  Integers divide
        as integers; with a DECIMAL operand the quotient is exact, (a − a MOD b) / b, a MOD b taking a's sign."""
        exact = [t.is_integer or t.kind in ("numeric", "null") for t in (left.type, right.type)]
        if not all(exact):
            return None
        if all(t.is_integer or t.kind == "null" for t in (left.type, right.type)):
            return Call(ty.INT8, "/", (_as(left, ty.INT8), _nonzero(_as(right, ty.INT8))))
        rest = _modulo(left, right)
        whole_t = ty.arithmetic_type("-", left.type, rest.type) if rest is not None else None
        if rest is None or whole_t is None:
            return None
        whole = Call(whole_t, "-", (_as(left, whole_t), _as(rest, whole_t)))
        common = ty.common_type(whole_t, right.type)
        quotient_t = ty.arithmetic_type("/", common, common) if common is not None else None
        if common is None or quotient_t is None:
            return None
        return ty.cast_to(Call(quotient_t, "/", (_as(whole, common), _nonzero(_as(right, common)))), ty.INT8)

    def truth(self, e: Expr) -> Expr | None:
        if e.type.is_numeric:
            return Call(ty.BOOL, "<>", (e, Literal(e.type, 0)))
        return None

    def concat(self, args: tuple[Expr, ...]) -> Expr:
        """MySQL's CONCAT is NULL when any argument is: ``a || b || …``."""
        out = args[0]
        for a in args[1:]:
            out = Call(ty.TEXT, "||", (out, a))
        return out


MYSQL = MySqlDialect()
DIALECTS = {"postgres": POSTGRES, "postgresql": POSTGRES, "mysql": MYSQL, "mariadb": MYSQL}


def get_dialect(name: "str | Dialect") -> Dialect:
    """The dialect called ``name`` (postgres, mysql; mariadb is mysql)."""
    if isinstance(name, Dialect):
        return name
    try:
        return DIALECTS[name.lower()]
    except KeyError:
        raise ValueError(f"unknown SQL dialect {name!r}; expected one of postgres, mysql") from None


def collation_key(e: Expr, collation: str) -> Expr:
    """``e`` as the key text compares by under ``collation`` (ci: folded + PAD SPACE; bin: PAD SPACE)."""
    return Call(ty.TEXT, "collkey", (e,), collation)


def unsupported_collation(collation: str) -> str:
    return (f"collation {collation!r} (freshview computes utf8mb4_general_ci and the *_bin collations; "
            "declare the column with one of those, or use COLLATE)")
