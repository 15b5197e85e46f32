"""Factor the conjuncts common to every branch of an OR out of it.

    (A AND B) OR (A AND C)   →   A AND (B OR C)
    A OR (A AND C)           →   A

TPC-H Q19 puts its join condition inside every OR branch; factored out it is
a conjunct of its own, which ``pushdown`` turns into an equi-join key
instead of a cross product filtered afterwards.  Both forms are equal under
SQL's three-valued logic (AND distributes over OR; ``A OR (A AND C)`` is
``A`` for A true, false or NULL), so the rule is applied to every Filter.
"""

from __future__ import annotations

from freshview.plan import nodes as pn
from freshview.plan.rewrite.bottom_up import BottomUp
from freshview.plan.expr import Call, Expr, conjoin, conjuncts
from freshview.schema import SqlType

BOOL = SqlType("bool")


def factor_or(plan: pn.Node) -> pn.Node:
    """Every Filter's predicate with the conjuncts common to an OR's branches factored out."""
    return _FactorOr()(plan)


class _FactorOr(BottomUp):
    def visit_Filter(self, node: pn.Filter) -> pn.Node:
        factored = conjoin([f for c in conjuncts(node.predicate) for f in conjuncts(factor_common_conjuncts(c))])
        return node if factored == node.predicate else pn.Filter(node.input, factored)  # type: ignore[arg-type]


def factor_common_conjuncts(e: Expr) -> Expr:
    """(A AND B) OR (A AND C)  →  A AND (B OR C); anything but an OR is returned as it is."""
    if not (isinstance(e, Call) and e.op == "or"):
        return e
    branches = _disjuncts(e)
    parts = [conjuncts(b) for b in branches]
    common = [c for c in parts[0] if all(c in other for other in parts[1:])]
    if not common:
        return e
    rests = [[c for c in p if c not in common] for p in parts]
    if any(not r for r in rests):  # one branch is just the common part: the OR is implied
        return conjoin(common)  # type: ignore[return-value]
    ored = conjoin(rests[0])
    for r in rests[1:]:
        ored = Call(BOOL, "or", (ored, conjoin(r)))  # type: ignore[arg-type]
    return conjoin(common + [ored])  # type: ignore[return-value]


def _disjuncts(e: Expr) -> list[Expr]:
    if isinstance(e, Call) and e.op == "or":
        return _disjuncts(e.args[0]) + _disjuncts(e.args[1])
    return [e]


__all__ = ["factor_or", "factor_common_conjuncts"]
