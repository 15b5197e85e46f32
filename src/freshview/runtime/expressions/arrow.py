"""Evaluating typed plan expressions over Arrow arrays, in-process, with PostgreSQL semantics.

The second executor of the plan's scalar expressions (``spark`` is the first):
small steps run on the driver over Arrow and must produce exactly what the
Spark lowering produces, which matches PostgreSQL.  The rules are therefore
the Spark lowering's, op by op:

* Integer arithmetic is checked (``*_checked`` kernels) and overflows at the
  result type's range ("integer out of range"); ``/`` truncates toward zero,
  ``%`` takes the dividend's sign; a zero divisor raises "division by zero"
  (float ``NaN / 0`` is NaN, as in PostgreSQL).
* Numeric ``+ - * %`` are exact, then rounded as Spark's decimal arithmetic
  rounds (``DecimalPrecision``: a result wider than 38 digits keeps
  ``max(6, 38 - integer digits)`` fractional digits, half away from zero;
  products beyond 38 significant digits and negations beyond 34 go through
  Spark's ``MathContext``) before the cast to the declared type.  Numeric
  ``/`` is computed in float64, as the Spark lowering does, and the quotient
  becomes a decimal the way Spark converts a double: its shortest decimal
  spelling, rounded half away from zero.
* NULLs: an operand is evaluated only where the operands Spark evaluates
  before it are non-NULL (Spark's generated code skips it; PostgreSQL would
  evaluate it), so ``NULL + 1/0`` is NULL in both executors; for ``/`` and
  ``%`` Spark evaluates the divisor first.
* CASE, COALESCE, AND and OR are lazy: a sub-expression that can fail is
  first tried on the whole batch, and only if that raises, evaluated again on
  the rows that need it (take, evaluate, scatter back); sub-expressions that
  cannot fail are simply evaluated on the whole batch.
* Floats compare as in PostgreSQL and Spark: NaN equals NaN and sorts above
  every other value; -0 equals 0.
* Text input (casts from text) accepts exactly ``pgtext``'s spellings, the
  same as the Spark lowering; text output of floats is PostgreSQL's.

Literals stay Arrow scalars (broadcast only in the final result), so
``x + 1`` is one kernel call.  Decimals whose unscaled values fit in int64 are
computed on those integers with numpy, others in decimal256 kernels.
Per-row Python is left only where Arrow has no kernel and the case is rare:
numeric ``%`` on unscaled values beyond int64, Spark's significant-digit
rounding of products beyond 38 digits and negations beyond 34 (those rows
only), LIKE and trim with a different pattern on each row (one kernel call
per distinct pattern), and error messages that name the offending value.

Errors are ``ExecutionError`` with PostgreSQL's messages, never Arrow's.

The module is the evaluator, its operators and conditionals, and the table of every function's
implementation (``IMPLEMENTATIONS``, by ``plan.functions`` name); the values it works on (NULL masks,
broadcasting, decimals, text slices) are ``arrow_values``, casts ``arrow_casts``, and each function
family its own module: ``arrow_numeric``, ``arrow_text``, ``arrow_collation``, ``arrow_temporal``,
``arrow_json`` (json and arrays).
"""

from __future__ import annotations

import decimal
from typing import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from freshview.errors import ExecutionError, FreshviewError
from freshview.plan.expr import Call, Case, Cast, ColumnRef, Expr, Literal
from freshview.plan.functions import MORE_THAN_ONE_ROW_BY_DIALECT, may_raise
from freshview.runtime.expressions import arrow_collation, arrow_json, arrow_numeric, arrow_temporal, arrow_text
from freshview.runtime.expressions.arrow_casts import (
    _CASTS,
    _compare,
    _group,
)
from freshview.runtime.expressions.arrow_values import (
    _INT_KINDS,
    _LITERALS,
    Datum,
    _any,
    _as,
    _as_decimal,
    _as_type,
    _broadcast,
    _case_when,
    _checked_int,
    _decimal_to_float,
    _double_to_decimal,
    _fail,
    _from_np,
    _is_scalar,
    _like_pattern_check,
    _like_unescape,
    _literal,
    _np,
    _null,
    _numeric_arith,
    _numeric_mod,
    _per_pattern,
    _raw,
    _spark_unary_minus,
    _text,
    _to_decimal,
    _truth,
    _valid_mask,
)
from freshview.runtime.expressions.pgtext import DATE_MAX_DAYS, DATE_MIN_DAYS
from freshview.schema import SqlType

__all__ = ["evaluate", "evaluate_filter"]


def evaluate(expr: Expr, table: pa.Table | pa.RecordBatch) -> pa.Array:
    """``expr`` over ``table`` (columns ``c0, c1, ...``): an array of ``expr.type.arrow``, one value per row."""
    ev = _Evaluator.of_table(table)
    try:
        out = ev.visit(expr)
        return _broadcast(out, ev.n, expr.type.arrow)
    except FreshviewError:
        raise
    except (pa.ArrowException, OverflowError, decimal.InvalidOperation) as exc:  # pragma: no cover - a bug
        raise ExecutionError(f"internal: evaluating {expr}: {exc}") from None


def evaluate_filter(expr: Expr, table: pa.Table | pa.RecordBatch) -> pa.BooleanArray:
    """WHERE semantics: a boolean array without NULLs (NULL counts as false), for ``table.filter``."""
    return pc.fill_null(evaluate(expr, table), False)

class _Evaluator:
    def __init__(self, column: Callable[[int], pa.Array], n: int, memo: dict[int, bool]) -> None:
        self._column = column
        self._cols: dict[int, pa.Array] = {}
        self.n = n
        self._fails = memo  # id(expr) -> can it raise?

    @staticmethod
    def of_table(table: pa.Table | pa.RecordBatch) -> "_Evaluator":
        def column(i: int) -> pa.Array:
            col = table.column(f"c{i}")
            if isinstance(col, pa.ChunkedArray):
                return col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()
            return col
        return _Evaluator(column, table.num_rows, {})

    def column(self, i: int) -> pa.Array:
        col = self._cols.get(i)
        if col is None:
            col = self._cols[i] = self._column(i)
        return col

    # -- laziness ------------------------------------------------------------
    def can_fail(self, e: Expr) -> bool:
        key = id(e)
        known = self._fails.get(key)
        if known is None:
            known = self._fails[key] = _can_fail(e, self.can_fail)
        return known

    def where(self, e: Expr, mask: np.ndarray | Callable[[], np.ndarray]) -> Datum:
        """``e`` as if evaluated on the rows of ``mask`` only: values on those rows; other rows hold
        anything (NULL, or the value ``e`` has there).  Only an error decides: a row outside the mask
        must not raise.  So ``e`` is first tried on the whole batch (one pass; most batches have no
        failing row at all), and only if that raises, evaluated again on the masked rows alone.
        ``mask`` may be a function, called only then.
        """
        if not self.can_fail(e):
            return self.visit(e)
        if callable(mask) or not mask.all():
            try:
                return self.visit(e)
            except ExecutionError:
                pass
        if callable(mask):
            mask = mask()
        if mask.all():
            return self.visit(e)  # (raises)
        t = e.type.arrow
        if not mask.any():
            return _null(t)
        idx = pa.array(np.flatnonzero(mask).astype(np.int32))
        sub = _Evaluator(lambda i: self.column(i).take(idx), len(idx), self._fails)
        part = sub.visit(e)
        if _is_scalar(part):
            return part
        positions = np.cumsum(mask, dtype=np.int64) - 1
        return part.take(pa.array(positions, mask=~mask))

    def strict_args(self, args: Sequence[Expr], order: Sequence[int] | None = None) -> list[Datum]:
        """Operands in Spark's order; each evaluated only where the ones before it are non-NULL.

        (Tried eagerly first: if no operand raises anywhere, which rows were skipped cannot matter.)
        """
        order = list(order) if order is not None else list(range(len(args)))
        if not any(self.can_fail(args[i]) for i in order[1:]):
            return [self.visit(a) for a in args]
        try:
            return [self.visit(a) for a in args]
        except ExecutionError:
            pass
        out: list[Datum] = [None] * len(args)  # type: ignore[list-item]
        alive: np.ndarray | None = None
        for k, i in enumerate(order):
            out[i] = self.where(args[i], alive) if alive is not None else self.visit(args[i])
            if any(self.can_fail(args[j]) for j in order[k + 1:]):
                valid = _valid_mask(out[i], self.n)
                alive = valid if alive is None else alive & valid
        return out

    # -- dispatch ------------------------------------------------------------
    def visit(self, e: Expr) -> Datum:
        return getattr(self, "visit_" + type(e).__name__)(e)

    def visit_ColumnRef(self, e: ColumnRef) -> Datum:
        col = self.column(e.index)
        return col if col.type == e.type.arrow else col.cast(e.type.arrow)

    def visit_Literal(self, e: Literal) -> Datum:
        key = (e.type, type(e.value), repr(e.value))  # repr tells -0.0 from 0.0 (equal, same hash)
        scalar = _LITERALS.get(key)
        if scalar is None:
            scalar = _literal(e.value, e.type)
            if len(_LITERALS) < 10_000:
                _LITERALS[key] = scalar
        return scalar

    def visit_Cast(self, e: Cast) -> Datum:
        return self.cast(self.visit(e.arg), e.arg.type, e.type)

    def visit_Call(self, e: Call) -> Datum:
        method = IMPLEMENTATIONS.get(e.op)
        if method is None:
            raise FreshviewError(f"internal: no Arrow evaluation for {e.op}")
        return method(self, e, e.param) if e.param else method(self, e)

    def visit_Case(self, e: Case) -> Datum:
        t = e.type.arrow
        default = e.default if e.default is not None else Literal(e.type, None)
        lazy = any(self.can_fail(c) for c, _ in e.whens[1:]) or \
            any(self.can_fail(v) for _, v in e.whens) or self.can_fail(default)
        try:  # every branch on every row: right unless some row raises (then lazily, below)
            conds = [self.visit(c) for c, _ in e.whens]
            values = [self.visit(v) for _, v in e.whens] + [self.visit(default)]
            return _case_when(conds, values, self.n, t)
        except ExecutionError:
            if not lazy:
                raise
        remaining = np.ones(self.n, bool)
        masks: list[np.ndarray] = []
        for cond, _ in e.whens:
            taken = _truth(self.where(cond, remaining), self.n, True) & remaining
            masks.append(taken)
            remaining &= ~taken
        masks.append(remaining)
        values = [self.where(v, m) for (_, v), m in zip(e.whens, masks)] + [self.where(default, remaining)]
        return _case_when([pa.array(m) for m in masks[:-1]], values, self.n, t)

    # -- arithmetic ----------------------------------------------------------
    def op_add(self, e: Call) -> Datum:
        return self._arith(e, "+")

    def op_sub(self, e: Call) -> Datum:
        return self._arith(e, "-")

    def op_mul(self, e: Call) -> Datum:
        return self._arith(e, "*")

    def _arith(self, e: Call, op: str) -> Datum:
        ta, tb = e.args[0].type, e.args[1].type
        if e.type.kind == "date" or (ta.kind == "date" and tb.kind == "date"):
            return self._date_arith(e, op)
        a, b = self.strict_args(e.args)
        rt = e.type
        if rt.is_integer:
            fn = {"+": pc.add_checked, "-": pc.subtract_checked, "*": pc.multiply_checked}[op]
            return _checked_int(fn, rt.kind, _as(a, rt), _as(b, rt))
        if rt.is_float:
            fn = {"+": pc.add, "-": pc.subtract, "*": pc.multiply}[op]
            return fn(_as(a, rt), _as(b, rt))
        return _numeric_arith(op, _as_decimal(a, ta), _as_decimal(b, tb), rt, self.n)

    def _date_arith(self, e: Call, op: str) -> Datum:
        ta, tb = e.args[0].type, e.args[1].type
        if ta.kind == "date" and tb.kind == "date":  # date - date: days, int4
            a, b = self.strict_args(e.args)
            return _checked_int(pc.subtract_checked, "int4", a.cast(pa.int32()), b.cast(pa.int32()))
        a, b = self.strict_args(e.args)
        date, days = (a, b) if ta.kind == "date" else (b, a)
        fn = pc.add if op == "+" else pc.subtract
        n = fn(date.cast(pa.int32()).cast(pa.int64()), days.cast(pa.int64()))
        lo, hi = (n.as_py(), n.as_py()) if _is_scalar(n) else pc.min_max(n).values()
        lo, hi = (lo.as_py(), hi.as_py()) if isinstance(lo, pa.Scalar) else (lo, hi)
        if (lo is not None and lo < DATE_MIN_DAYS) or (hi is not None and hi > DATE_MAX_DAYS):
            raise _fail("date out of range")
        return n.cast(pa.int32()).cast(pa.date32())

    def op_div(self, e: Call) -> Datum:
        if e.type.is_float:
            a, b = self.visit(e.args[0]), self.visit(e.args[1])
            zero = pc.and_(pc.equal(b, 0), pc.invert(pc.is_nan(a)))
            if (zero.as_py() if _is_scalar(zero) else pc.any(zero).as_py()):
                raise _fail("division by zero")
            return pc.divide(_as(a, e.type), _as(b, e.type))  # NaN / 0 is NaN, as in PostgreSQL
        b, a = self._divmod_args(e)
        rt = e.type
        if rt.is_integer:
            return _checked_int(pc.divide_checked, rt.kind, _as(a, rt), _as(b, rt))
        # numeric: in float64, as the Spark lowering (see spark.py)
        fa = _decimal_to_float(_as_decimal(a, e.args[0].type), self.n, pa.float64())
        fb = _decimal_to_float(_as_decimal(b, e.args[1].type), self.n, pa.float64())
        p, s = rt.decimal_precision_scale
        return _double_to_decimal(pc.divide(fa, fb), p, s)

    def op_mod(self, e: Call) -> Datum:
        b, a = self._divmod_args(e)
        rt = e.type
        n = self.n
        valid = _valid_mask(a, n) & _valid_mask(b, n)
        if rt.is_integer or rt.is_float:
            t = rt.arrow
            x, y = _raw(_as(a, rt), n), _raw(_as(b, rt), n)
            if rt.is_integer:  # x % -1 = 0 (INT_MIN % -1 traps in C); a zero divisor is a NULL row's
                y = np.where((y == 0) | (y == -1), np.ones_like(y), y)
            with np.errstate(all="ignore"):
                out = np.fmod(x, y)  # C's remainder: the dividend's sign
            return _from_np(out, valid, t)
        return _numeric_mod(_as_decimal(a, e.args[0].type), _as_decimal(b, e.args[1].type), valid, n, rt)

    def _divmod_args(self, e: Call) -> tuple[Datum, Datum]:
        """Spark's DivModLike: divisor first, dividend where the divisor is non-NULL; zero raises."""
        a, b = self.strict_args(e.args, (1, 0))
        zero = pc.equal(b, pa.scalar(0, b.type) if not pa.types.is_decimal(b.type) else
                        pa.scalar(decimal.Decimal(0), b.type))
        if _any(zero) and _any(pc.and_(zero, pc.is_valid(a))):
            raise _fail("division by zero")
        return b, a

    def op_neg(self, e: Call) -> Datum:
        (a,) = self.strict_args(e.args)
        if e.type.is_integer:
            return _checked_int(pc.negate_checked, e.type.kind, a)
        if e.type.kind == "numeric":
            return _spark_unary_minus(a, pc.negate, e.type)
        return pc.negate(a)

    def op_abs(self, e: Call) -> Datum:
        (a,) = self.strict_args(e.args)
        if e.type.is_integer:
            return _checked_int(pc.abs_checked, e.type.kind, a)
        if e.type.kind == "numeric":
            return _spark_unary_minus(a, pc.abs, e.type)
        return pc.abs(a)

    # -- comparisons and logic ----------------------------------------------
    def op_cmp(self, e: Call) -> Datum:
        a, b = self.strict_args(e.args)
        return _compare(e.op, a, b, e.args[0].type, e.args[1].type, self.n)

    def op_and(self, e: Call) -> Datum:
        a = self.visit(e.args[0])
        b = self.where(e.args[1], lambda: ~_truth(a, self.n, False))
        return pc.and_kleene(a, b)

    def op_or(self, e: Call) -> Datum:
        a = self.visit(e.args[0])
        b = self.where(e.args[1], lambda: ~_truth(a, self.n, True))
        return pc.or_kleene(a, b)

    def op_not(self, e: Call) -> Datum:
        return pc.invert(self.visit(e.args[0]))

    def op_is_null(self, e: Call) -> Datum:
        return pc.is_null(self.visit(e.args[0]))

    def op_in(self, e: Call) -> Datum:
        target_e, *items = e.args
        target = self.visit(target_e)
        tt = target_e.type
        if all(isinstance(i, Literal) for i in items) and not tt.is_float and tt.kind != "null":
            values = [i.value for i in items]
            present = [_literal(v, tt) for v in values if v is not None]
            if present:
                hit = pc.is_in(target, value_set=pa.array([p.as_py() for p in present], tt.arrow))
            else:
                hit = pa.scalar(False)
            if None in values:
                hit = pc.if_else(hit, True, _null(pa.bool_()))
            if not _is_scalar(target) and target.null_count == 0:
                return hit
            return pc.if_else(pc.is_null(target), _null(pa.bool_()), hit)
        # Spark's In: items in order, each only where the target is non-NULL and no item matched yet.
        result: Datum = pa.scalar(False)
        pending = _valid_mask(target, self.n)
        for item in items:
            value = self.where(item, pending)
            eq = _compare("=", target, value, tt, item.type, self.n)
            result = pc.or_kleene(result, eq)
            if any(self.can_fail(i) for i in items):
                pending = pending & ~_truth(eq, self.n, True)
        return pc.if_else(pc.is_null(target), _null(pa.bool_()), result)

    def op_like(self, e: Call, ignore_case: bool = False) -> Datum:
        s, pattern = self.strict_args(e.args)
        if e.args[0].type.kind == "null" or e.args[1].type.kind == "null":
            return _null(pa.bool_())
        _like_pattern_check(pattern)
        pattern = _like_unescape(pattern)
        if ignore_case:  # Spark: lower(a) LIKE lower(b)
            s, pattern = pc.utf8_lower(s), pc.utf8_lower(pattern)
        if _is_scalar(pattern):
            if not pattern.is_valid:
                return _null(pa.bool_())
            if _is_scalar(s):
                return pc.match_like(pa.array([s.as_py()], pa.string()), pattern.as_py())[0]
            return pc.match_like(s, pattern.as_py())
        return _per_pattern(_broadcast(s, self.n, pa.string()), pattern,
                            lambda v, p: pc.match_like(v, p), pa.bool_())

    def op_ilike(self, e: Call) -> Datum:
        return self.op_like(e, ignore_case=True)

    # -- conditionals ----------------------------------------------------------
    def op_coalesce(self, e: Call) -> Datum:
        t = e.type.arrow
        out = _as_type(self.visit(e.args[0]), t)
        for arg in e.args[1:]:
            if _is_scalar(out) and out.is_valid or not _is_scalar(out) and out.null_count == 0:
                break
            missing = out
            out = pc.coalesce(out, _as_type(self.where(arg, lambda: ~_valid_mask(missing, self.n)), t))
        return out

    def op_nullif(self, e: Call) -> Datum:
        a, b = self.strict_args(e.args)
        eq = _compare("=", a, b, e.args[0].type, e.args[1].type, self.n)
        return pc.if_else(pc.fill_null(eq, False), _null(e.type.arrow), _as_type(a, e.type.arrow))

    def op_single_row(self, e: Call, dialect: str) -> Datum:
        """A scalar subquery's value (``sql.single_row``): v where its row count n is 1, NULL (v is) at 0,
        the dialect's error where a row reads a count above 1."""
        n = self.visit(e.args[0])
        if _any(pc.greater(n, 1)):
            raise _fail(MORE_THAN_ONE_ROW_BY_DIALECT[dialect])
        return _as_type(self.visit(e.args[1]), e.type.arrow)

    def op_greatest(self, e: Call) -> Datum:
        return self._extreme(e, greatest=True)

    def op_least(self, e: Call) -> Datum:
        return self._extreme(e, greatest=False)

    def _extreme(self, e: Call, greatest: bool) -> Datum:
        t = e.type.arrow
        args = [_as_type(self.visit(a), t) for a in e.args]
        if len(args) == 1:
            return args[0]
        if pa.types.is_boolean(t):
            out = self._extreme_of([a.cast(pa.int8()) for a in args], greatest)
            return out.cast(pa.bool_())
        if pa.types.is_null(t):
            return _null(t)
        if pa.types.is_temporal(t):  # no element-wise min/max kernel for dates and timestamps
            storage = pa.int32() if pa.types.is_date32(t) else pa.int64()
            return self._extreme_of([a.cast(storage) for a in args], greatest).cast(t)
        out = self._extreme_of(args, greatest)
        if pa.types.is_floating(t) and greatest:
            # Arrow skips NaN; PostgreSQL and Spark order NaN above every number.
            any_nan = None
            for a in args:
                isnan = pc.fill_null(pc.is_nan(a), False)
                any_nan = isnan if any_nan is None else pc.or_(any_nan, isnan)
            out = pc.if_else(any_nan, pa.scalar(float("nan"), t), out)
        return out

    @staticmethod
    def _extreme_of(args: list[Datum], greatest: bool) -> Datum:
        fn = pc.max_element_wise if greatest else pc.min_element_wise
        return fn(*args, skip_nulls=True)

    # -- casts -----------------------------------------------------------------
    def cast(self, v: Datum, src: SqlType, dst: SqlType) -> Datum:
        if src.kind == "null":
            return _null(dst.arrow)
        fn = _CASTS.get((_group(src), _group(dst)))
        if fn is None:
            raise _fail(f"cannot cast type {src} to {dst}")
        return fn(v, src, dst, self.n)


def _can_fail(e: Expr, rec: Callable[[Expr], bool]) -> bool:
    """Whether evaluating ``e`` may raise for some row (division, checked arithmetic, casts ...)."""
    if isinstance(e, (ColumnRef, Literal)):
        return False
    if any(rec(c) for c in e.children()):
        return True
    if isinstance(e, Case):
        return False
    if isinstance(e, Cast):
        return not _safe_cast(e.arg.type, e.type)
    assert isinstance(e, Call)
    return may_raise(e)  # the function's own rule (plan.functions)


def _safe_cast(src: SqlType, dst: SqlType) -> bool:
    if src == dst or src.kind == "null":
        return True
    if dst.kind == "text":
        return True
    if src.is_integer and dst.is_integer:
        return _INT_KINDS.index(src.kind) <= _INT_KINDS.index(dst.kind)
    if src.is_integer and dst.is_float:
        return True
    if src.kind == "float4" and dst.kind == "float8":
        return True
    if src.kind == "date" and dst.kind in ("timestamp", "timestamptz"):
        return True
    if src.kind in ("timestamp", "timestamptz") and dst.kind in ("date", "timestamp", "timestamptz"):
        return True
    if src.kind == "bool" and dst.is_integer:
        return True
    return False


# The Arrow implementation of each function in plan.functions, by name (tests/plan/test_functions.py
# checks that every registered function has one).
IMPLEMENTATIONS: dict[str, Callable[..., Datum]] = {
    "+": _Evaluator.op_add, "-": _Evaluator.op_sub, "*": _Evaluator.op_mul,
    "/": _Evaluator.op_div, "%": _Evaluator.op_mod, "neg": _Evaluator.op_neg,
    "=": _Evaluator.op_cmp, "<>": _Evaluator.op_cmp, "<": _Evaluator.op_cmp,
    "<=": _Evaluator.op_cmp, ">": _Evaluator.op_cmp, ">=": _Evaluator.op_cmp,
    "and": _Evaluator.op_and, "or": _Evaluator.op_or, "not": _Evaluator.op_not,
    "is_null": _Evaluator.op_is_null, "in": _Evaluator.op_in,
    "like": _Evaluator.op_like, "ilike": _Evaluator.op_ilike,
    "coalesce": _Evaluator.op_coalesce, "nullif": _Evaluator.op_nullif, "single_row": _Evaluator.op_single_row,
    "greatest": _Evaluator.op_greatest, "least": _Evaluator.op_least,
    "abs": _Evaluator.op_abs,
}
for _family in (arrow_numeric, arrow_text, arrow_collation, arrow_temporal, arrow_json):  # each family's module
    IMPLEMENTATIONS.update(_family.OPS)
