"""GROUP BY and DISTINCT under a MySQL collation (MySQL dialect).

In MySQL, ``'a'`` and ``'A'`` fall into one group when the column's collation
is case-insensitive (MariaDB's default ``utf8mb4_general_ci``), and the group
shows one of its members' spellings.  freshview groups by the collation key
(``collkey(x)`` with the collation as its parameter, ``freshview.collation``) and shows the smallest
spelling by code point among the group's current members: ``x`` in the
SELECT list and HAVING becomes ``spelling(x)``, which is ``MIN(x)`` (binary),
so the shown spelling is deterministic: when that member is deleted the group
shows the next smallest one.  It is its own aggregate because its input is
special (all of a group's values are spelled alike, but for a few groups),
which its delta rule uses (``runtime.operators.accumulators``).  ``SELECT DISTINCT`` over such a column is
the same GROUP BY over all output columns.  ``*_bin`` collations are PAD
SPACE too (``'a'`` and ``'a '`` are one group), so they take the same path
with a key that only strips trailing spaces.

``collate_groups`` is pure: bound expressions in, bound expressions out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from freshview.plan.expr import AggCall, Call, Expr
from freshview.sql.dialect import collation_key

if TYPE_CHECKING:
    from freshview.sql.bind_expr import AggCollector, ExprBinder


def needs_collation(binder: "ExprBinder", exprs: list[Expr]) -> bool:
    """Whether any of ``exprs`` is text under a case-insensitive collation."""
    return any(binder.collation_of(e) is not None for e in exprs)


def collate_groups(binder: "ExprBinder", aggs: "AggCollector", group_exprs: list[Expr],
                   outputs: list[Expr | None]) -> tuple[list[Expr], list[Expr | None]]:
    """Group by collation keys; ``outputs`` (SELECT list, HAVING) show each such group value as its spelling."""
    keys: list[Expr] = []
    shown: dict[Expr, Expr] = {}
    for g in group_exprs:
        collation = binder.collation_of(g)
        if collation is None:
            keys.append(g)
            continue
        keys.append(collation_key(g, collation))
        shown[g] = aggs.add(AggCall("spelling", g, g.type))
    return keys, [None if e is None else _replace(e, shown) for e in outputs]


def _replace(e: Expr, shown: dict[Expr, Expr]) -> Expr:
    if e in shown:
        return shown[e]
    if isinstance(e, Call) and e.op == "grouping":  # GROUPING(x) names the grouped x, not its spelling
        return e
    return e.map_children(lambda c: _replace(c, shown))
