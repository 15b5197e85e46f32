"""Set-returning functions over columns: in FROM (implicitly LATERAL) and in the SELECT list.

``FROM t, unnest(t.xs) WITH ORDINALITY AS u(x, n)``, ``CROSS JOIN LATERAL jsonb_each(t.j)``,
``LEFT JOIN LATERAL unnest(t.xs) AS u ON TRUE``, ``ROWS FROM (unnest(t.a), json_array_elements(t.j))``,
``unnest(t.a, t.b)`` become a ``plan.flatmap.FlatMap`` applied to the rows of the FROM items
before it (``sql.join_tree`` applies it at its place in the join order), so each input row maps to
its own rows: a linear operator, no state, no join (``runtime.operators.flatmap``).

Functions (PostgreSQL's types and column names): ``unnest(anyarray)``;
``json[b]_array_elements[_text]`` (column ``value``), ``json[b]_each[_text]`` (``key``,
``value``), ``json[b]_object_keys``; ``generate_series(start, stop[, step])`` over integer or
numeric columns (of constants only it stays a constant relation, ``sql.constants``);
``regexp_split_to_table(s, pattern[, flags])`` with a constant pattern (``sql.regex``'s
translation; one that can match the empty string is refused); ``string_to_table(s, delimiter[,
null_string])``.  A function without named output columns is named after the FROM alias when it is
alone, else after itself; ``WITH ORDINALITY`` adds ``ordinality`` (bigint); the alias's column
list renames in order.

In the SELECT list (PostgreSQL 10+): ``SELECT id, unnest(xs) + 1, generate_series(1, n) FROM t``
is ``SELECT id, s.s0 + 1, s.s1 FROM t, LATERAL ROWS FROM (unnest(xs), generate_series(1, n)) s``:
the functions run in lockstep, the shorter padded with NULLs, a row where every function returns
nothing gives none (``select_list`` rewrites the query so).  Refused with the reason: a
set-returning function in the SELECT list of a query that aggregates or has window functions (it
would run after them), nested in another one, or returning a record (``json_each`` in the SELECT
list: write it in FROM); RIGHT/FULL JOIN to a function, a LEFT JOIN's ON other than TRUE.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlglot import exp

from freshview import jsontext
from freshview.errors import SqlError, UnknownColumnError, UnsupportedSqlError
from freshview.plan import nodes as pn
from freshview.plan import typing as ty
from freshview.plan.expr import Cast, ColumnRef, Expr, Literal
from freshview.plan.flatmap import FlatMap, ORDINALITY_TYPE, SrfCall
from freshview.schema import SqlType
from freshview.sql import constants, regex
from freshview.sql.bind_expr import ExprBinder, FromItem, Scope, ScopeColumn
from freshview.sql.parse import locate

if TYPE_CHECKING:
    from freshview.sql.context import QueryContext

_JSON = ("json_array_elements", "jsonb_array_elements", "json_array_elements_text", "jsonb_array_elements_text",
         "json_each", "jsonb_each", "json_each_text", "jsonb_each_text", "json_object_keys", "jsonb_object_keys")
NAMES = ("unnest", "generate_series", "regexp_split_to_table", "string_to_table") + _JSON
_SELECT_ALIAS = "__fv_srf"


def function_name(node: exp.Expression) -> str | None:
    """The set-returning function ``node`` calls (``NAMES``), else None."""
    if isinstance(node, (exp.Unnest, exp.Explode)):
        return "unnest"
    if isinstance(node, (exp.GenerateSeries, exp.ExplodingGenerateSeries)):
        return "generate_series"
    if isinstance(node, exp.Anonymous) and str(node.this).lower() in NAMES:
        return str(node.this).lower()
    return None


def is_item(r: exp.Expression) -> bool:
    """A FROM item that is a set-returning function over columns (not generate_series of constants)."""
    if isinstance(r, exp.Lateral):
        r = r.this
    if isinstance(r, exp.Unnest) or function_name(r) is not None:
        return True
    if not isinstance(r, exp.Table):
        return False
    if r.args.get("rows_from"):
        return True
    f = r.this
    if isinstance(f, (exp.GenerateSeries, exp.ExplodingGenerateSeries)):
        return f.find(exp.Column) is not None
    return isinstance(f, exp.Anonymous) and function_name(f) is not None


# ---------------------------------------------------------------------- FROM
def srf_item(qb: "QueryContext", r: exp.Expression, before: list[FromItem], join: exp.Join | None) -> FromItem:
    """The FROM item of the set-returning function(s) ``r`` over the items ``before`` it (wide offsets):
    a placeholder of its columns carrying the FlatMap's calls (``FromItem.srf``), or, first in FROM, a
    FlatMap over one row."""
    item = r.this if isinstance(r, exp.Lateral) else r
    alias_node = r.args.get("alias") or item.args.get("alias")
    side = ((join.args.get("side") or "") if join is not None else "").lower()
    if side in ("right", "full"):
        raise qb.unsupported(join, f"{side.upper()} JOIN to a set-returning function (it reads the left side)",
                             side.upper())
    on = join.args.get("on") if join is not None else None
    if side == "left" and on is not None and not (isinstance(on, exp.Boolean) and on.this is True):
        raise qb.unsupported(on, "a LEFT JOIN to a set-returning function with an ON condition other than TRUE")
    if isinstance(item, exp.Unnest):
        funcs = [exp.Unnest(expressions=[a]) for a in item.expressions]
        offset = item.args.get("offset")
        ordinality = bool(offset)
        extra = [offset] if isinstance(offset, exp.Identifier) else []
    elif isinstance(item, exp.Table):
        funcs = [t.this if isinstance(t, exp.Table) else t for t in item.args.get("rows_from") or [item.this]]
        ordinality = bool(item.args.get("ordinality"))
        extra = []
    else:  # LATERAL f(...) [WITH ORDINALITY]
        funcs, ordinality, extra = [item], bool(r.args.get("ordinality")), []
    scope = Scope([ScopeColumn(it.relation(i), n, t, it.offset + i) for it in before
                   for i, (n, t) in enumerate(it.node.columns) if i >= it.hidden])
    binder = ExprBinder(scope, qb.sql, None, "a set-returning function's arguments", qb.dialect)
    alone = len(funcs) == 1
    alias = alias_node.name if alias_node is not None and alias_node.name else None
    calls = tuple(_call(qb, f, binder, alias if alone else None) for f in funcs)
    columns = [c for call in calls for c in call.columns] + ([("ordinality", ORDINALITY_TYPE)] if ordinality else [])
    names = [c.name for c in alias_node.columns] if alias_node is not None and alias_node.columns else []
    names += [e.name for e in extra]
    if len(names) > len(columns):
        raise SqlError(f"{alias or 'the function'} has {len(columns)} columns but {len(names)} were named",
                       locate(r, qb.sql), qb.sql)
    renamed = [(names[j] if j < len(names) else n, t) for j, (n, t) in enumerate(columns)]
    k = 0
    named_calls = []
    for call in calls:
        named_calls.append(SrfCall(call.func, call.args, tuple(renamed[k: k + len(call.columns)]), call.option))
        k += len(call.columns)
    calls = tuple(named_calls)
    table_alias = alias or (calls[0].func if alone else "rows_from")
    if not before:  # first in FROM: over one row, its arguments constant
        flat = FlatMap(constants.ONE_ROW, calls, ordinality, False)
        node = pn.Project(flat, tuple(ColumnRef(t, 1 + j, n) for j, (n, t) in enumerate(renamed)),
                          tuple(n for n, _ in renamed))
        return FromItem(table_alias, node, 0)
    # The item's node only gives its columns: sql.join_tree applies the calls to the rows before it.
    return FromItem(table_alias, pn.Constant((), tuple(renamed)), 0, srf=(calls, ordinality))


def _call(qb: "QueryContext", f: exp.Expression, binder: ExprBinder, alias: str | None) -> SrfCall:
    name = function_name(f)
    if name is None:
        called = f.sql(dialect=qb.dialect.sqlglot).split("(")[0].lower()
        raise UnsupportedSqlError(f"set-returning function {called}(...) in FROM is not supported (supported: "
                                  f"{', '.join(sorted(NAMES))})", locate(f, qb.sql), qb.sql)
    if name == "generate_series":
        raw = [f.args.get(k) for k in ("start", "end", "step") if f.args.get(k) is not None]
    elif isinstance(f, (exp.Unnest, exp.Explode)):
        raw = list(f.expressions) if isinstance(f, exp.Unnest) else [f.this]
    else:
        raw = list(f.expressions)
    try:
        args = [binder.bind(a) for a in raw]
    except UnknownColumnError as why:
        raise UnsupportedSqlError(f"{why.message}: a set-returning function in FROM reads the FROM items before "
                                  "it; one reading a column of an outer query (inside a subquery) is not supported",
                                  why.location, qb.sql) from None
    one = alias or name

    def wrong(message: str | None = None) -> SqlError:
        types = ", ".join(str(a.type) for a in args)
        return SqlError(message or f"function {name}({types}) does not exist", locate(f, qb.sql), qb.sql)

    if name == "unnest":
        if len(args) != 1 or args[0].type.kind != "array":
            raise wrong()
        return SrfCall(name, tuple(args), ((one, args[0].type.element),))
    if name in _JSON:
        if len(args) != 1:
            raise wrong()
        kind = "jsonb" if name.startswith("jsonb") else "json"
        arg = _as(args[0], SqlType(kind), wrong)
        value = ty.TEXT if name.endswith("_text") else SqlType(kind)
        if "elements" in name:
            return SrfCall(name, (arg,), (("value", value),))
        if "each" in name:
            return SrfCall(name, (arg,), (("key", ty.TEXT), ("value", value)))
        return SrfCall(name, (arg,), ((one, ty.TEXT),))
    if name == "generate_series":
        if len(args) not in (2, 3) or any(a.type.kind not in ("int2", "int4", "int8", "numeric", "null")
                                          for a in args):
            raise UnsupportedSqlError(
                "generate_series(...) over columns is supported over integers and numerics only "
                f"(not {', '.join(str(a.type) for a in args)})", locate(f, qb.sql), qb.sql)
        t = args[0].type
        for a in args[1:]:
            t = ty.common_type(t, a.type) or t
        if t.kind in ("int2", "null"):
            t = ty.INT4
        if t.kind == "numeric":
            t = SqlType("numeric")
        return SrfCall(name, tuple(ty.cast_to(a, t) for a in args), ((one, t),))
    if name == "string_to_table":
        if len(args) not in (2, 3):
            raise wrong()
        return SrfCall(name, tuple(_as(a, ty.TEXT, wrong) for a in args), ((one, ty.TEXT),))
    # regexp_split_to_table(s, pattern[, flags]): the pattern and flags constants
    if len(args) not in (2, 3):
        raise wrong()
    consts = [_constant_text(a) for a in args[1:]]
    if any(c is None for c in consts):
        raise qb.unsupported(f, "regexp_split_to_table with a pattern or flags that are not constants")
    pattern, flags = consts[0], consts[1] if len(consts) > 1 else ""
    try:
        if regex._nullable(pattern):
            raise regex.Unsupported("a pattern that matches the empty string (PostgreSQL splits between "
                                    "characters there)")
        translated = regex.translate(pattern, "", flags.replace("g", ""))
    except regex.Unsupported as why:
        raise UnsupportedSqlError(f"regexp_split_to_table pattern {pattern!r}: {why}", locate(f, qb.sql),
                                  qb.sql) from None
    return SrfCall(name, (_as(args[0], ty.TEXT, wrong),), ((one, ty.TEXT),), translated.re2_pattern)


def _as(e: Expr, t: SqlType, wrong) -> Expr:
    """``e`` as ``t``: as it is, or a string literal (PostgreSQL's unknown) read as ``t``."""
    if e.type.kind == t.kind:
        return e
    if isinstance(e, Literal) and (e.value is None or isinstance(e.value, str)):
        if e.value is None or t.kind == "text":
            return Literal(t, e.value)
        try:
            return Literal(t, jsontext.jsonb(e.value) if t.kind == "jsonb" else jsontext.json_check(e.value))
        except ValueError as why:
            raise wrong(str(why)) from None
    raise wrong()


def _constant_text(e: Expr) -> str | None:
    while isinstance(e, Cast):
        e = e.arg
    return e.value if isinstance(e, Literal) and isinstance(e.value, str) else None


# ---------------------------------------------------------------------- SELECT list
def select_list(qb: "QueryContext", node: exp.Select) -> exp.Select:
    """``node`` with the set-returning functions of its SELECT list moved into a ``ROWS FROM`` item
    (the module docstring); ``node`` itself when it has none."""
    found: list[exp.Expression] = []
    for sel in node.expressions:
        for n in sel.walk():
            if function_name(n) is not None and not isinstance(n, exp.Unnest):
                found.append(n)
    if not found:
        return node
    for f in found:
        outer = f.parent
        while outer is not None and outer is not node:
            if function_name(outer) is not None:
                raise qb.unsupported(f, "a set-returning function nested in another one")
            if isinstance(outer, (exp.AggFunc, exp.Window)):
                raise qb.unsupported(f, "a set-returning function inside an aggregate or window function")
            if isinstance(outer, (exp.Case, exp.If, exp.Coalesce)):
                raise SqlError("set-returning functions are not allowed in CASE or COALESCE", locate(f, qb.sql),
                               qb.sql)
            outer = outer.parent
        if function_name(f) in ("json_each", "jsonb_each", "json_each_text", "jsonb_each_text"):
            raise qb.unsupported(f, f"{function_name(f)}(...) in the SELECT list (it returns a record: write it "
                                    "in FROM)")
    aggregates = node.args.get("group") is not None or node.args.get("having") is not None or any(
        isinstance(n, (exp.AggFunc, exp.Window)) for sel in node.expressions for n in sel.walk())
    if aggregates:
        raise qb.unsupported(found[0], "a set-returning function in the SELECT list of a query that aggregates "
                                       "or has window functions (write it in FROM over a derived table)")
    rewritten = node.copy()
    copies = [n for sel in rewritten.expressions for n in sel.walk()
              if function_name(n) is not None and not isinstance(n, exp.Unnest)]
    funcs = []
    for i, f in enumerate(copies):
        name = f"s{i}"
        sel = f
        while sel.parent is not rewritten:
            sel = sel.parent
        if sel is f:  # the function alone is the item: named after the function, as PostgreSQL names it
            f.replace(exp.alias_(exp.column(name, table=_SELECT_ALIAS), function_name(f)))
        else:
            f.replace(exp.column(name, table=_SELECT_ALIAS))
        funcs.append(exp.Table(this=f.copy()) if not isinstance(f, exp.Explode) else
                     exp.Unnest(expressions=[f.this.copy()]))
    item = exp.Table(rows_from=funcs, alias=exp.TableAlias(
        this=exp.to_identifier(_SELECT_ALIAS), columns=[exp.to_identifier(f"s{i}") for i in range(len(funcs))]))
    if rewritten.args.get("from_") is None:
        rewritten.set("from_", exp.From(this=item))
    else:
        rewritten.append("joins", exp.Join(this=item))
    return rewritten


def hidden_names() -> tuple[str, ...]:
    """The alias ``select_list`` gives its item (no ``*`` shows it: see ``build``)."""
    return (_SELECT_ALIAS,)


__all__ = ["NAMES", "function_name", "hidden_names", "is_item", "select_list", "srf_item"]
