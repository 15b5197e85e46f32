"""Linear operators: filter, project, union all, negate.

Delta rule: for a linear operator L, ΔL(R) = L(ΔR).  They keep no state and
act on the change alone (on Spark they only extend the lineage, no job).
Negate is −R (every weight times −1), so Δ(−R) = −ΔR; with union all it
gives differences, L − (L ⋉ R) (an anti-join).
"""

from __future__ import annotations

from typing import Sequence

from freshview.plan import nodes as pn
from freshview.plan.expr import Literal
from freshview.runtime.kernels import Kernels, Rel
from freshview.runtime.relation import arrow_schema
from freshview.schema import SqlType

_MINUS_ONE = Literal(SqlType("int8"), -1)


def filter_delta(k: Kernels, node: pn.Filter, d: Rel, memo: dict) -> Rel:
    return k.filter(d, node.predicate, memo)


def project_delta(k: Kernels, node: pn.Project, d: Rel, memo: dict) -> Rel:
    return k.project(d, node.exprs, arrow_schema(node.columns), memo)


def union_delta(k: Kernels, node: pn.UnionAll, parts: Sequence[Rel]) -> Rel:
    return k.union(parts, arrow_schema(node.columns))


def negate_delta(k: Kernels, node: pn.Negate, d: Rel, memo: dict) -> Rel:
    """Δ(−R) = −ΔR: the reweighting by −1 (``Kernels.reweight``)."""
    return k.reweight(d, _MINUS_ONE, memo)
