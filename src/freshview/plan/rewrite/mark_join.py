"""Lowering mark joins (EXISTS / IN used as a value) into semi- and anti-joins.

A subquery predicate that is not a WHERE conjunct (``a = 1 OR x IN (S)``,
``NOT (EXISTS (S) AND …)``, inside CASE, a boolean output column) is
decorrelated into a *mark join*: every row of ``left`` exactly once (with
its multiplicity), plus one column, the predicate's value for that row.
It is built from ``plan.rewrite.joins``' semi- and anti-joins, which are
Join, Distinct (per correlation key / per IN value), Project, UnionAll and
Negate, so each executor maintains it with the operators it has:

* EXISTS:  mark(L) = π_{L, TRUE}(L ⋉ R) ∪ π_{L, FALSE}(L ▷ R)   (never NULL)
* x IN (S), PostgreSQL's three-valued result, with k the correlation keys and
  θ the residual correlated conditions:

  - TRUE   for  σ_{x not null}L ⋉_{k, x=y, θ} R;
  - NULL   for  (σ_{x not null}L ▷_{k, x=y, θ} R) ⋉_{k, θ} σ_{y null}R  (a NULL in S)
           and  σ_{x null}L ⋉_{k, θ} R                                   (S non-empty);
  - FALSE  for the rest: the same two inputs ▷ instead of ⋉.

**Delta rule.** Linear in its parts: ``Δ mark(L) = Σ_parts Δ π_{L,m}(part)``,
each part maintained by the semi-join's rule
``Δ(L ⋉ R) = Δ π_L(L ⋈ Distinct(π_k R))`` and the anti-join's
``Δ(L ▷ R) = ΔL − Δ(L ⋉ R)``.  The parts partition L (each row of L lands in
exactly one, as often as it is in L), so the output never goes negative and
a change of R moves a row from one mark to another as a −1/+1 pair.
"""

from __future__ import annotations

from freshview.plan import nodes as pn
from freshview.plan.expr import Call, Expr, Literal
from freshview.plan.rewrite.joins import BOOL, antijoin, refs, semijoin

MARK = "__mark"


def _marked(rows: pn.Node, value: bool | None) -> pn.Node:
    return pn.Project(rows, refs(rows.columns) + (Literal(BOOL, value),),
                      tuple(n for n, _ in rows.columns) + (MARK,))


def exists_mark(left: pn.Node, right: pn.Node, lkeys: tuple[Expr, ...], rkeys: tuple[Expr, ...],
                residual: Expr | None = None) -> pn.Node:
    """``left`` plus a column: whether the row has a match in ``right`` (EXISTS)."""
    return pn.UnionAll((_marked(semijoin(left, right, lkeys, rkeys, residual), True),
                        _marked(antijoin(left, right, lkeys, rkeys, residual), False)))


def in_mark(left: pn.Node, right: pn.Node, lkeys: tuple[Expr, ...], rkeys: tuple[Expr, ...],
            residual: Expr | None, x: Expr, y: Expr) -> pn.Node:
    """``left`` plus a column: ``x IN (y of the right rows matching on the keys and the residual)``,
    TRUE / NULL / FALSE as PostgreSQL gives it.  ``x`` is over ``left``, ``y`` over ``right``."""
    x_null = Call(BOOL, "is_null", (x,))
    some_x = pn.Filter(left, Call(BOOL, "not", (x_null,)))
    null_x = pn.Filter(left, x_null)
    null_y = pn.Filter(right, Call(BOOL, "is_null", (y,)))
    found = semijoin(some_x, right, lkeys + (x,), rkeys + (y,), residual)
    not_found = antijoin(some_x, right, lkeys + (x,), rkeys + (y,), residual)
    return pn.UnionAll((
        _marked(found, True),
        _marked(semijoin(not_found, null_y, lkeys, rkeys, residual), None),
        _marked(antijoin(not_found, null_y, lkeys, rkeys, residual), False),
        _marked(semijoin(null_x, right, lkeys, rkeys, residual), None),
        _marked(antijoin(null_x, right, lkeys, rkeys, residual), False),
    ))


__all__ = ["MARK", "exists_mark", "in_mark"]
