"""Relations written in the query: VALUES lists, SELECT without FROM, generate_series of constants.

Each becomes a ``plan.nodes.Constant`` (its rows at the view's first
computation, nothing after; the runtime's ``visit_Constant``), typed as
PostgreSQL types them:

* ``VALUES (e11, e12), (e21, e22) ...``: column j is named ``columnj`` and
  has the common type of its expressions (as a UNION's columns).  Rows of
  plain literals are the Constant's rows; other constant expressions
  (``1 + 2``, ``DATE '2024-01-01'``) are computed by a projection of a
  one-row Constant per row, so every executor evaluates them as it
  evaluates any expression.  Accepted as a whole query, in FROM (with an
  alias and column list) and inside ``IN (...)`` (``sql.parse`` turns a
  one-column VALUES in IN into the list it is).
* ``SELECT ... `` without FROM: over one row of no visible column.
* ``generate_series(start, stop[, step])`` in FROM over integer or numeric
  constants: its rows, computed here; other set-returning functions read
  no table and are refused.
"""

from __future__ import annotations

import decimal
from typing import TYPE_CHECKING

from sqlglot import exp

from freshview.errors import SqlError, UnsupportedSqlError
from freshview.plan import nodes as pn
from freshview.plan import typing as ty
from freshview.plan.expr import Cast, Expr, Literal
from freshview.sql.bind_expr import ExprBinder, Scope
from freshview.sql.parse import locate

if TYPE_CHECKING:
    from freshview.sql.context import QueryContext

#: The one row a SELECT without FROM reads: a column no SQL name reaches.
ONE_ROW = pn.Constant(((None,),), (("", ty.INT4),))
MAX_SERIES_ROWS = 1_000_000


def values(qb: "QueryContext", node: exp.Values) -> pn.Node:
    """A VALUES list as a constant relation (columns ``column1`` ...)."""
    binder = ExprBinder(Scope(), qb.sql, None, "VALUES", qb.dialect)
    rows: list[list[Expr]] = []
    for t in node.expressions:
        cells = list(t.expressions) if isinstance(t, exp.Tuple) else [t]
        if rows and len(cells) != len(rows[0]):
            raise SqlError("VALUES lists must all be the same length", locate(t, qb.sql), qb.sql)
        rows.append([binder.bind(c) for c in cells])
    if not rows or not rows[0]:
        raise qb.unsupported(node, "an empty VALUES list", "VALUES")
    types = []
    for j in range(len(rows[0])):
        t = rows[0][j].type
        for r in rows[1:]:
            common = ty.common_type(t, r[j].type)
            if common is None:
                raise SqlError(f"VALUES types {t} and {r[j].type} cannot be matched", locate(node, qb.sql), qb.sql)
            t = common
        types.append(ty.TEXT if t.kind == "null" else t)
    names = tuple(f"column{j + 1}" for j in range(len(types)))
    columns = tuple(zip(names, types))
    literal = [[_literal_value(e, t) for e, t in zip(r, types)] for r in rows]
    if all(v is not _NOT_LITERAL for r in literal for v in r):
        return pn.Constant(tuple(tuple(r) for r in literal), columns)
    parts = tuple(pn.Project(ONE_ROW, tuple(ty.cast_to(e, t) for e, t in zip(r, types)), names) for r in rows)
    return parts[0] if len(parts) == 1 else pn.UnionAll(parts)


_NOT_LITERAL = object()


def _literal_value(e: Expr, t):
    """A literal's value as type ``t`` when no cast can change it, else ``_NOT_LITERAL``."""
    if not isinstance(e, Literal):
        return _NOT_LITERAL
    if e.value is None:
        return None
    if e.type == t:
        return e.value
    if e.type.is_integer and t.is_integer:
        return e.value
    if e.type.kind in ("int2", "int4", "int8", "numeric") and t.kind == "numeric" and t.precision is None:
        return decimal.Decimal(e.value)
    return _NOT_LITERAL


def generate_series(qb: "QueryContext", call: exp.Expression, where: exp.Expression) -> pn.Constant:
    """``generate_series(start, stop[, step])`` over integer or numeric constants."""
    binder = ExprBinder(Scope(), qb.sql, None, "generate_series", qb.dialect)
    args = [call.args.get(k) for k in ("start", "end", "step")]
    columns = any(a is not None and a.find(exp.Column) is not None for a in args)
    bound = [] if columns else [binder.bind(a) if a is not None else Literal(ty.INT4, 1) for a in args]
    values = [_constant_number(e) for e in bound]
    if columns or any(v is None for v in values) or any(
            e.type.kind not in ("int2", "int4", "int8", "numeric") for e in bound):
        raise UnsupportedSqlError(
            "generate_series(...) in FROM is supported over integer or numeric constants only: a view reads "
            "tables and views, and a series of other arguments (timestamps, columns) is not a fixed relation",
            locate(where, qb.sql), qb.sql)
    t = bound[0].type
    for e in bound[1:]:
        t = ty.common_type(t, e.type) or t
    if t.kind == "int2":
        t = ty.INT4
    start, stop, step = values
    if step == 0:
        raise SqlError("step size cannot equal zero", locate(where, qb.sql), qb.sql)
    count = max(0, int((stop - start) // step) + 1)
    if count > MAX_SERIES_ROWS:
        raise UnsupportedSqlError(f"generate_series(...) of {count} rows in a view (at most {MAX_SERIES_ROWS})",
                                  locate(where, qb.sql), qb.sql)
    rows = []
    for i in range(count):
        v = start + i * step
        rows.append((decimal.Decimal(v) if t.kind == "numeric" else int(v),))
    return pn.Constant(tuple(rows), (("generate_series", t),))


def _constant_number(e: Expr):
    """A numeric literal's value (negated ones come folded from the binder; a cast kept), else None."""
    if isinstance(e, Cast):
        return _constant_number(e.arg)
    if isinstance(e, Literal) and isinstance(e.value, (int, decimal.Decimal)) and not isinstance(e.value, bool):
        return e.value
    return None


__all__ = ["ONE_ROW", "values", "generate_series"]
