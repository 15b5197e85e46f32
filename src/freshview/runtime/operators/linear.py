"""Linear operators: filter, project, union all.

Delta rule: for a linear operator L, ΔL(R) = L(ΔR).  They keep no state and
act on the change alone, extending the Spark lineage without running a job.
"""

from __future__ import annotations

from pyspark.sql import functions as F

from freshview.plan import nodes as pn
from freshview.runtime.delta import Delta, arrow_schema, col_name
from freshview.runtime.expressions import lower
from freshview.schema import WEIGHT


def _col(i: int):
    return F.col(col_name(i))


def filter_delta(node: pn.Filter, d: Delta) -> Delta:
    df = d.frame()
    return Delta(d.schema, df.filter(lower(node.predicate, _col)), None, d._spark)


def project_delta(node: pn.Project, d: Delta) -> Delta:
    df = d.frame()
    exprs = [
        lower(e, _col).cast(e.type.spark()).alias(col_name(k))
        for k, e in enumerate(node.exprs)
    ]
    schema = arrow_schema(node.columns)
    return Delta(schema, df.select(*exprs, F.col(WEIGHT)), None, d._spark)


def union_delta(node: pn.UnionAll, parts: list[Delta]) -> Delta:
    frames = [p.frame() for p in parts]
    out = frames[0]
    for f in frames[1:]:
        out = out.unionByName(f)
    return Delta(arrow_schema(node.columns), out, None, parts[0]._spark)
