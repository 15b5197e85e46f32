"""Linear operators: filter, project, union all.

Delta rule: for a linear operator L, ΔL(R) = L(ΔR).  They keep no state and
act on the change alone, extending the Spark lineage without running a job.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import functions as F

from freshview.algebra.batch import consolidate
from freshview.plan.expr import ColumnRef

from freshview.plan import nodes as pn
from freshview.runtime.delta import Delta, arrow_schema, col_name, column
from freshview.runtime.expressions import lower
from freshview.schema import WEIGHT


def filter_delta(node: pn.Filter, d: Delta, memo: dict) -> Delta:
    # Lowered Columns are unresolved expressions, reusable across steps: building
    # them costs one py4j round trip per node, so they are built once per operator.
    predicate = memo.get("predicate")
    if predicate is None:
        predicate = memo["predicate"] = lower(node.predicate, column)
    return Delta(d.schema, d.frame().filter(predicate), None, d._spark)


def project_delta(node: pn.Project, d: Delta, memo: dict) -> Delta:
    schema = arrow_schema(node.columns)
    if d.df is None and all(isinstance(e, ColumnRef) for e in node.exprs):
        # A pure selection of columns of a change already in Arrow: plumbing, no Spark job.
        table = d.materialize()
        picked = [table.column(col_name(e.index)) for e in node.exprs] + [table.column(WEIGHT)]  # type: ignore[attr-defined]
        return Delta.of_arrow(consolidate(pa.Table.from_arrays(picked, schema=schema)), d.spark)
    exprs = memo.get("exprs")
    if exprs is None:
        exprs = memo["exprs"] = [
            lower(e, column).cast(e.type.spark()).alias(col_name(k)) for k, e in enumerate(node.exprs)
        ] + [F.col(WEIGHT)]
    return Delta(schema, d.frame().select(*exprs), None, d._spark)


def union_delta(node: pn.UnionAll, parts: list[Delta]) -> Delta:
    frames = [p.frame() for p in parts]
    out = frames[0]
    for f in frames[1:]:
        out = out.unionByName(f)
    return Delta(arrow_schema(node.columns), out, None, parts[0]._spark)
