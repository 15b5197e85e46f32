"""Set operations: UNION, INTERSECT and EXCEPT, with and without ALL, as PostgreSQL defines them.

Over a row that occurs c1 times on the left and c2 times on the right, the
result holds it

* UNION ALL: c1 + c2 times (``UnionAll``; a chain of them is one node);
* UNION: once if c1 + c2 > 0 (``Distinct`` over the ``UnionAll``);
* INTERSECT ALL: least(c1, c2) times;  INTERSECT: once if c1 > 0 and c2 > 0;
* EXCEPT ALL: greatest(c1 − c2, 0) times;  EXCEPT: once if c1 > 0 and c2 = 0.

INTERSECT and EXCEPT tag each side's rows, aggregate both sides by all
columns (NULLs group together, as set operations compare rows "not
distinct") counting each side's rows, and ``Reweight`` every group's row by
the multiplicity above, then drop the counts: the aggregate is incremental,
the reweighting linear.

Columns take the names of the leftmost query and, position by position, the
common type of both sides (the rules of UNION ALL).  PostgreSQL's precedence
(INTERSECT binds tighter) comes from the parser, which nests it as a
subquery.  ORDER BY on a set operation is accepted and ignored (a view is a
set); LIMIT, OFFSET and FETCH are refused by the builder.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlglot import exp

from freshview.errors import SqlError, UnsupportedSqlError
from freshview.plan import nodes as pn
from freshview.plan.expr import AggCall, Call, Case, ColumnRef, Expr, Literal
from freshview.schema import SqlType
from freshview.plan import typing as ty
from freshview.sql.parse import locate

if TYPE_CHECKING:
    from freshview.sql.context import QueryContext

INT8 = SqlType("int8")
BOOL = SqlType("bool")


def build_set_operation(qb: "QueryContext", node: exp.SetOperation) -> pn.Node:
    """The plan of ``node`` (UNION, INTERSECT or EXCEPT, ALL or not)."""
    qb.refuse_modifiers(node)
    op = node.key.upper()
    if isinstance(node, exp.Union) and not node.args.get("distinct"):
        parts = _union_all_parts(qb, node)
        return pn.UnionAll(tuple(align(qb, node, "UNION ALL", [qb.query(p) for p in parts])))
    keyword = op if node.args.get("distinct") else f"{op} ALL"
    left, right = align(qb, node, op, [qb.query(node.left), qb.query(node.right)])
    if keyword == op and any(qb.dialect.collation(t) is not None for _, t in left.columns):
        raise UnsupportedSqlError(f"{op} (without ALL) of text columns under a MySQL collation (PAD SPACE, "
                                  "case-insensitive) "
                                  f"(use {op} ALL, or SELECT DISTINCT over a UNION ALL)", locate(node, qb.sql, op),
                                  qb.sql)
    if any(t.kind == "jsonb" for _, t in left.columns):  # rows would be matched by their text: refused
        hint = "; use UNION ALL, or SELECT DISTINCT over a UNION ALL" if op == "UNION" else ""
        raise qb.unsupported(node, f"{keyword} of a jsonb column (PostgreSQL holds '1.0'::jsonb and '1'::jsonb "
                                   f"equal{hint})", op.split()[0])
    if any(t.kind == "interval" for _, t in left.columns):  # rows are matched by value: see sql/functions.py
        raise qb.unsupported(node, f"{keyword} over an interval column (PostgreSQL holds '1 day' and "
                                   "'24 hours' equal but prints them apart)", op.split()[0])
    if isinstance(node, exp.Union):
        return pn.Distinct(pn.UnionAll((left, right)))
    if any(t.is_array for _, t in left.columns):  # (matched by a join, and joins do not key on arrays)
        raise qb.unsupported(node, f"{keyword} over an array column", op.split()[0])
    return counted(left, right, keyword)


def _union_all_parts(qb: "QueryContext", node: exp.Expression) -> list[exp.Expression]:
    """The operands of a chain of UNION ALLs (left-nested as parsed), flattened."""
    if isinstance(node, exp.Union) and not node.args.get("distinct"):
        qb.refuse_modifiers(node)
        return _union_all_parts(qb, node.left) + _union_all_parts(qb, node.right)
    return [node]


def align(qb: "QueryContext", node: exp.Expression, op: str, plans: list[pn.Node]) -> list[pn.Node]:
    """The operands cast, column by column, to their common type (each keeps its names: the leftmost's
    name the result)."""
    widths = {len(p.columns) for p in plans}
    if len(widths) != 1:
        raise SqlError(f"each {op} query must have the same number of columns",
                       locate(node, qb.sql, op.split()[0]), qb.sql)
    types: list[SqlType] = []
    for i in range(widths.pop()):
        t = ty.NULL
        for p in plans:
            nt = ty.common_type(t, p.columns[i][1])
            if nt is None:
                raise SqlError(f"{op} column {i + 1} has incompatible types {t} and {p.columns[i][1]}",
                               locate(node, qb.sql, op.split()[0]), qb.sql)
            t = nt
        types.append(ty.TEXT if t.kind == "null" else t)

    aligned = []
    for p in plans:
        if all(ct == t for (_, ct), t in zip(p.columns, types)):
            aligned.append(p)
            continue
        exprs = tuple(ty.cast_to(ColumnRef(ct, i, n), t) for i, ((n, ct), t) in enumerate(zip(p.columns, types)))
        aligned.append(pn.Project(p, exprs, tuple(n for n, _ in p.columns)))
    return aligned


def multiplicity(keyword: str, c1: Expr, c2: Expr) -> Expr:
    """How many times a row occurring c1 times left and c2 times right is in ``keyword``'s result."""
    zero, one = Literal(INT8, 0), Literal(INT8, 1)

    def cmp(op: str, a: Expr, b: Expr) -> Expr:
        return Call(BOOL, op, (a, b))

    if keyword == "INTERSECT ALL":
        return Case(INT8, ((cmp("<", c1, c2), c1),), c2)
    if keyword == "EXCEPT ALL":
        return Case(INT8, ((cmp(">", c1, c2), Call(INT8, "-", (c1, c2))),), zero)
    if keyword == "INTERSECT":
        return Case(INT8, ((Call(BOOL, "and", (cmp(">", c1, zero), cmp(">", c2, zero))), one),), zero)
    if keyword == "EXCEPT":
        return Case(INT8, ((Call(BOOL, "and", (cmp(">", c1, zero), cmp("=", c2, zero))), one),), zero)
    raise ValueError(keyword)


def counted(left: pn.Node, right: pn.Node, keyword: str) -> pn.Node:
    """INTERSECT/EXCEPT [ALL]: count each side's copies of every row, then reweight by ``multiplicity``."""
    columns = left.columns
    n = len(columns)
    names = tuple(name for name, _ in columns)
    refs = tuple(ColumnRef(t, i, name) for i, (name, t) in enumerate(columns))
    present, absent = Literal(SqlType("int4"), 1), Literal(SqlType("int4"), None)
    tagged = tuple(
        pn.Project(side, tuple(ColumnRef(t, i, name) for i, (name, t) in enumerate(side.columns)) + tags,
                   names + ("_left", "_right"))
        for side, tags in ((left, (present, absent)), (right, (absent, present)))
    )
    counts = pn.Aggregate(
        pn.UnionAll(tagged), refs,
        (AggCall("count", ColumnRef(SqlType("int4"), n, "_left"), INT8),
         AggCall("count", ColumnRef(SqlType("int4"), n + 1, "_right"), INT8)),
        names,
    )
    weight = multiplicity(keyword, ColumnRef(INT8, n, "c1"), ColumnRef(INT8, n + 1, "c2"))
    return pn.Project(pn.Reweight(counts, weight), refs, names)
