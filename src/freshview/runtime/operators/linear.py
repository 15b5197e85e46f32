"""Linear operators: filter, project, union all.

Delta rule: for a linear operator L, ΔL(R) = L(ΔR).  They keep no state and
act on the change alone (on Spark they only extend the lineage, no job).
"""

from __future__ import annotations

from typing import Sequence

from freshview.plan import nodes as pn
from freshview.runtime.kernels import Kernels, Rel
from freshview.runtime.relation import arrow_schema


def filter_delta(k: Kernels, node: pn.Filter, d: Rel, memo: dict) -> Rel:
    return k.filter(d, node.predicate, memo)


def project_delta(k: Kernels, node: pn.Project, d: Rel, memo: dict) -> Rel:
    return k.project(d, node.exprs, arrow_schema(node.columns), memo)


def union_delta(k: Kernels, node: pn.UnionAll, parts: Sequence[Rel]) -> Rel:
    return k.union(parts, arrow_schema(node.columns))
