"""The join tree of a SELECT: its FROM items joined left-deep in order, each step by its kind.

Kinds: ``inner`` (a comma item, [INNER|CROSS] JOIN, an uncorrelated scalar
subquery), ``left`` / ``right`` / ``full`` (outer joins; also a correlated
scalar subquery, a left join), ``semi`` / ``anti`` / ``not_in`` (EXISTS, IN
and their negations; these add no columns), ``mark_exists`` / ``mark_in``
(EXISTS / IN used as a value: they add one column, the predicate's value;
the item's last column is that mark, its others the subquery's).  Outer,
semi- and anti-joins become ``LogicalJoin`` nodes, lowered by
``plan.rewrite.joins`` once the rewrites have moved filters and pruned
columns around them; mark kinds are lowered here, at once, by
``plan.rewrite.mark_join`` into core nodes the rewrites then see.

Where each condition goes (PostgreSQL semantics):

* an inner join's ON conjuncts filter its (cross) product;
* an outer, semi- or anti-join's ON conjunct belongs to its join:
  equalities between the item and the items before it become keys; on the
  null-supplied item alone (the right of LEFT, the left of RIGHT) it filters
  that side first; anything else is a residual of the join (a LEFT join's
  conjunct on its preserved left side stays there: a left row failing it is
  kept, NULL-padded);
* the WHERE conjuncts filter the joined rows.

Moving filters down (inner join keys included) and dropping unused columns
are plan rewrites that run afterwards (``plan.rewrite``).

``JOIN … USING (c, …)`` and ``NATURAL JOIN`` (``resolve_using``) are joins
on ``left.c = right.c`` whose USING columns appear once, as PostgreSQL
merges them: the left's value for INNER and LEFT, the right's for RIGHT,
``COALESCE(left.c, right.c)`` for FULL (each cast to the two sides' common
type).  An unqualified ``c`` means the merged column, ``l.c`` / ``r.c`` still
name the sides, and ``SELECT *`` lists the USING columns first, then the rest
of the left, then the rest of the right.  The merge is a projection over the
join the kind already lowers to, so it adds no delta rule: the merged column
is an expression over columns whose changes the join already carries.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

from sqlglot import exp

from freshview.errors import SqlError, UnsupportedSqlError
from freshview.plan import nodes as pn
from freshview.plan.expr import Call, ColumnRef, Expr, columns_used, conjoin, remap_columns
from freshview.plan.flatmap import FlatMap
from freshview.plan.rewrite import mark_join
from freshview.plan.rewrite.joins import null_safe
from freshview.plan import typing as ty
from freshview.sql.dialect import JSONB_EQUALITY, collation_key
from freshview.sql.parse import locate

NO_COLUMNS = ("semi", "anti", "not_in")
MARKS = ("mark_exists", "mark_in")


@dataclass
class Step:
    """How FROM item k joins the items before it (item 0's step is ``inner`` and unused)."""

    kind: str = "inner"
    on: list[Expr] = field(default_factory=list)
    pad: tuple[Expr, ...] | None = None  # left: the right side's values on an unmatched row
    not_in: tuple[Expr, Expr] | None = None  # not_in, mark_in: (x over the left, y over this item)
    outer: tuple[pn.OuterRows, tuple[Expr, ...]] | None = None  # a subquery over the left's correlation values
    srf: tuple | None = None  # (SrfCall over the wide row, ordinality): set-returning functions of each left row (sql.srf)


def join_kinds(node) -> list[str]:
    """Per FROM item of a SELECT: ``inner`` for the FROM list and [INNER|CROSS] JOINs, else the side."""
    from_ = node.args.get("from_") or node.args.get("from")
    kinds = ["inner"] * (1 + len(from_.expressions or [])) if from_ is not None else ["inner"]  # (one row)
    for join in node.args.get("joins") or []:
        side = (join.args.get("side") or "").lower()
        kinds.append(side if side in ("left", "right", "full") else "inner")
    return kinds


@dataclass
class Using:
    """The USING / NATURAL joins of one FROM clause, resolved over the wide row."""

    on: dict[int, list[Expr]] = field(default_factory=dict)  # FROM item k -> its join's equalities
    merged: dict[str, Expr] = field(default_factory=dict)  # unqualified name -> the merged column
    hidden: set[int] = field(default_factory=set)  # wide columns an unqualified name no longer reaches
    star: list[tuple[str, Expr]] = field(default_factory=list)  # SELECT * in PostgreSQL's order


def starts_group(join: exp.Join) -> bool:
    """A comma-separated FROM item (no join keyword of its own): it starts a new join group."""
    return not any(join.args.get(k) for k in ("side", "kind", "on", "using", "method"))


def resolve_using(items, node: exp.Select, sql: str) -> Using | None:
    """The USING / NATURAL joins of ``node`` (``items``: its FROM items, wide offsets), or None if it has none."""
    joins_ast = node.args.get("joins") or []
    if not any(j.args.get("using") or (j.args.get("method") or "").upper() == "NATURAL" for j in joins_ast):
        return None
    first_join = len(items) - len(joins_ast)
    out = Using()
    groups: list[list[tuple[str, Expr, bool]]] = []  # per join group: visible (name, expr, merged?)

    def item_columns(k: int) -> list[tuple[str, Expr, bool]]:
        it = items[k]
        return [(n, ColumnRef(t, it.offset + i, n), False) for i, (n, t) in enumerate(it.node.columns)]

    for k in range(len(items)):
        join = joins_ast[k - first_join] if k >= first_join else None
        if join is None or starts_group(join):
            groups.append(item_columns(k))
            continue
        left, right = groups[-1], item_columns(k)
        natural = (join.args.get("method") or "").upper() == "NATURAL"
        if natural:
            right_names = {n for n, _, _ in right}
            names = [(n, join) for n, _, _ in left if n in right_names]
        else:
            names = [(ident.name, ident) for ident in join.args.get("using") or []]
        side = (join.args.get("side") or "").lower()
        merged: list[tuple[str, Expr, bool]] = []
        for i, (name, where) in enumerate(names):
            keyword = "NATURAL" if natural else None
            if name in [n for n, _ in names[:i]]:
                raise SqlError(f"column name {name!r} appears more than once in USING clause",
                               locate(where, sql, keyword), sql)
            ls = [e for n, e, _ in left if n == name]
            rs = [e for n, e, _ in right if n == name]
            for found, what in ((ls, "left"), (rs, "right")):
                if not found:
                    raise SqlError(f"column {name!r} specified in USING clause does not exist in {what} table",
                                   locate(where, sql, keyword), sql)
                if len(found) > 1:
                    raise SqlError(f"common column name {name!r} appears more than once in {what} table",
                                   locate(where, sql, keyword), sql)
            le, re_ = ls[0], rs[0]
            t = ty.common_type(le.type, re_.type)
            if t is None:
                raise SqlError(f"JOIN/USING types {le.type} and {re_.type} cannot be matched",
                               locate(where, sql, keyword), sql)
            if t.is_array:
                raise UnsupportedSqlError(f"JOIN USING / NATURAL JOIN on the array column {name!r} is not supported "
                                          "(comparing arrays; joins on arrays)", locate(where, sql, keyword), sql)
            le, re_ = ty.cast_to(le, t), ty.cast_to(re_, t)
            keys = (le, re_) if t.kind != "jsonb" else tuple(collation_key(e, JSONB_EQUALITY) for e in (le, re_))
            out.on.setdefault(k, []).append(Call(ty.BOOL, "=", keys))  # (jsonb: numbers equal by value)
            value = {"right": re_, "full": Call(t, "coalesce", (le, re_))}.get(side, le)
            merged.append((name, value, True))
        used = {n for n, _ in names}
        groups[-1] = merged + [c for c in left if c[0] not in used] + [c for c in right if c[0] not in used]
        for _, e, _ in [c for c in left if c[0] in used] + [c for c in right if c[0] in used]:
            if isinstance(e, ColumnRef):
                out.hidden.add(e.index)
    for group in groups:
        for name, e, is_merged in group:
            out.star.append((name, e))
            if is_merged:
                out.merged[name] = e
    return out


def build_join_tree(items, steps: list[Step], where: list[Expr]) -> tuple[pn.Node, dict[int, int]]:
    """Join ``items`` by ``steps``, then filter by ``where``; returns the plan and wide index -> output index.

    Every item comes in full and every WHERE conjunct filters the joined rows:
    moving them down and dropping unused columns are plan rewrites
    (``plan.rewrite.pushdown``, ``plan.rewrite.prune``)."""
    owner: dict[int, int] = {}
    for k, it in enumerate(items):
        for i in range(len(it.node.columns)):
            owner[it.offset + i] = k

    def rels(e: Expr) -> set[int]:
        return {owner[i] for i in columns_used(e)}

    n = len(items)
    leaf_filters: list[list[Expr]] = [[] for _ in range(n)]
    before: list[list[Expr]] = [[] for _ in range(n)]  # filters on the accumulated left before step k
    at_step: list[list[Expr]] = [[] for _ in range(n)]  # ON conjuncts (keys or residual) of step k

    for k in range(n):
        kind = steps[k].kind
        for c in steps[k].on:
            r = rels(c)
            if kind == "inner":
                at_step[k].append(c)
            elif r == {k} and kind in ("left", "semi", "anti", "not_in") + MARKS:
                leaf_filters[k].append(c)
            elif r and max(r) < k and kind == "right":
                before[k].append(c)
            else:
                at_step[k].append(c)

    leaves: list[tuple[pn.Node, list[int]]] = []
    for k, it in enumerate(items):
        plan = it.node
        if leaf_filters[k]:
            local = {it.offset + i: i for i in range(len(it.node.columns))}
            plan = pn.Filter(plan, conjoin([remap_columns(c, local) for c in leaf_filters[k]]))  # type: ignore[arg-type]
        leaves.append((plan, [it.offset + i for i in range(len(it.node.columns))]))

    plan, wide_cols = leaves[0]
    joined = {0}

    def over(cols: list[int]) -> Callable[[Expr], Expr]:
        mapping = {w: j for j, w in enumerate(cols)}
        return lambda e: remap_columns(e, mapping)

    for k in range(1, n):
        step = steps[k]
        right, right_cols = leaves[k]
        if before[k]:
            plan = pn.Filter(plan, conjoin([over(wide_cols)(c) for c in before[k]]))  # type: ignore[arg-type]
        lkeys: list[Expr] = []
        rkeys: list[Expr] = []
        residual: list[Expr] = []
        for c in at_step[k]:
            split = equi_split(c, rels, joined, k) if step.kind != "inner" else None
            if split is not None:
                le, re_ = split
                t = ty.common_type(le.type, re_.type) or le.type
                lkeys.append(ty.cast_to(over(wide_cols)(le), t))
                rkeys.append(ty.cast_to(over(right_cols)(re_), t))
            else:
                residual.append(over(wide_cols + right_cols)(c))
        if step.srf is not None:  # each left row followed by its functions' rows (sql.srf, plan.flatmap)
            calls, ordinality = step.srf
            calls = tuple(replace(c, args=tuple(over(wide_cols)(a) for a in c.args)) for c in calls)
            plan = FlatMap(plan, calls, ordinality, step.kind == "left")
            wide_cols = wide_cols + right_cols
            joined.add(k)
            if residual:
                plan = pn.Filter(plan, conjoin(residual))  # type: ignore[arg-type]
            continue
        if step.outer is not None:  # (sql.magic_sets): the item's first columns are its correlation values
            right, lkeys, rkeys = _over_outer_rows(plan, right, [over(wide_cols)(e) for e in step.outer[1]],
                                                   step.outer[0])
        res = conjoin(residual)
        lk, rk = tuple(lkeys), tuple(rkeys)
        if step.kind == "inner":
            plan = pn.Join(plan, right, lk, rk)
            if res is not None:
                plan = pn.Filter(plan, res)
        elif step.kind == "mark_exists":
            plan = mark_join.exists_mark(plan, right, lk, rk, res)
        elif step.kind == "mark_in":
            assert step.not_in is not None
            x, y = step.not_in
            plan = mark_join.in_mark(plan, right, lk, rk, res, over(wide_cols)(x), over(right_cols)(y))
        else:
            x_y = None
            if step.kind == "not_in":
                assert step.not_in is not None
                x_y = (over(wide_cols)(step.not_in[0]), over(right_cols)(step.not_in[1]))
            plan = pn.LogicalJoin(step.kind, plan, right, lk, rk, res, step.pad, x_y)
        if step.kind in MARKS:  # one more column: the mark, the item's last
            wide_cols = wide_cols + [items[k].offset + len(items[k].node.columns) - 1]
            joined.add(k)
        elif step.kind not in NO_COLUMNS:
            wide_cols = wide_cols + right_cols
            joined.add(k)
    if where:
        plan = pn.Filter(plan, conjoin([over(wide_cols)(c) for c in where]))  # type: ignore[arg-type]
    return plan, {w: j for j, w in enumerate(wide_cols)}



def _over_outer_rows(left: pn.Node, right: pn.Node, exprs: list[Expr],
                     holder: pn.OuterRows) -> tuple[pn.Node, list[Expr], list[Expr]]:
    """``right`` with ``holder`` replaced by the distinct values of ``exprs`` over ``left``, and the
    null-safe keys joining each left row to its values, the first ``len(exprs)`` columns of ``right``."""
    names = tuple(n for n, _ in holder.columns)
    values = pn.Distinct(pn.Project(left, tuple(exprs), names))

    def put(node: pn.Node) -> pn.Node:
        return values if node == holder else pn.with_inputs(node, [put(c) for c in node.inputs()])

    right = put(right)
    own = tuple(ColumnRef(t, i, n) for i, (n, t) in enumerate(right.columns[:len(exprs)]))
    return right, list(null_safe(tuple(exprs))), list(null_safe(own))


def equi_split(c: Expr, rels, joined: set[int], k: int) -> tuple[Expr, Expr] | None:
    if not (isinstance(c, Call) and c.op == "=" and len(c.args) == 2):
        return None
    a, b = c.args
    ra, rb = rels(a), rels(b)
    if ra and rb and ra <= joined and rb == {k}:
        return a, b
    if ra and rb and rb <= joined and ra == {k}:
        return b, a
    return None


__all__ = ["Step", "Using", "build_join_tree", "join_kinds", "resolve_using", "starts_group"]
