"""The join tree of a SELECT: its FROM items joined left-deep in order, each step by its kind.

Kinds: ``inner`` (a comma item, [INNER|CROSS] JOIN, an uncorrelated scalar
subquery), ``left`` / ``right`` / ``full`` (outer joins; also a correlated
scalar subquery, a left join), ``semi`` / ``anti`` / ``not_in`` (EXISTS, IN
and their negations; these add no columns).  Outer, semi- and anti-joins
become ``LogicalJoin`` nodes, lowered by ``plan.rewrite.joins`` once the
rewrites have moved filters and pruned columns around them.

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
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from freshview.plan import nodes as pn
from freshview.plan.expr import Call, Expr, columns_used, conjoin, remap_columns
from freshview.sql import typing as ty

NO_COLUMNS = ("semi", "anti", "not_in")


@dataclass
class Step:
    """How FROM item k joins the items before it (item 0's step is ``inner`` and unused)."""

    kind: str = "inner"
    on: list[Expr] = field(default_factory=list)
    pad: tuple[Expr, ...] | None = None  # left: the right side's values on an unmatched row
    not_in: tuple[Expr, Expr] | None = None  # not_in: (x over the left, y over this item)


def join_kinds(node) -> list[str]:
    """Per FROM item of a SELECT: ``inner`` for the FROM list and [INNER|CROSS] JOINs, else the side."""
    from_ = node.args.get("from_") or node.args.get("from")
    kinds = ["inner"] * (1 + len(from_.expressions or [])) if from_ is not None else []
    for join in node.args.get("joins") or []:
        side = (join.args.get("side") or "").lower()
        kinds.append(side if side in ("left", "right", "full") else "inner")
    return kinds


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
            elif r == {k} and kind in ("left", "semi", "anti", "not_in"):
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
        res = conjoin(residual)
        lk, rk = tuple(lkeys), tuple(rkeys)
        if step.kind == "inner":
            plan = pn.Join(plan, right, lk, rk)
            if res is not None:
                plan = pn.Filter(plan, res)
        else:
            x_y = None
            if step.kind == "not_in":
                assert step.not_in is not None and res is None
                x_y = (over(wide_cols)(step.not_in[0]), over(right_cols)(step.not_in[1]))
            plan = pn.LogicalJoin(step.kind, plan, right, lk, rk, res, step.pad, x_y)
        if step.kind not in NO_COLUMNS:
            wide_cols = wide_cols + right_cols
            joined.add(k)
    if where:
        plan = pn.Filter(plan, conjoin([over(wide_cols)(c) for c in where]))  # type: ignore[arg-type]
    return plan, {w: j for j, w in enumerate(wide_cols)}



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


__all__ = ["Step", "build_join_tree", "join_kinds"]
