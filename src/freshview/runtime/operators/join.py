"""Incremental inner equi-join.

Delta rule (DBSP): with L and R the integrated inputs before this step,

    Δ(L ⋈ R) = ΔL ⋈ (R + ΔR)  +  L ⋈ ΔR

State: one arrangement per side, the side's rows indexed by the join key
(columns ``k0..``).  A step looks up only the keys its change touches, so its
cost follows the change, not the state; the small slices and the change are
joined on Spark.  NULL keys never match, as SQL ``=`` demands.

    ΔL ──┬──────────────► ⋈ ◄── lookup(R, keys ΔL) + ΔR
         └─► apply(L)
    ΔR ──┬──────────────► ⋈ ◄── lookup(L, keys ΔR)
         └─► apply(R)
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from freshview.plan import nodes as pn
from freshview.plan.expr import ColumnRef
from freshview.runtime.delta import Delta, arrow_schema, col_name, column, spark_schema
from freshview.runtime.expressions import lower
from freshview.schema import WEIGHT


@dataclass(frozen=True)
class JoinState:
    left: str
    right: str


def key_name(i: int) -> str:
    return f"k{i}"


def side_schema(columns: pn.Columns, keys) -> pa.Schema:
    return arrow_schema(columns, [pa.field(key_name(i), k.type.arrow) for i, k in enumerate(keys)])


def row_schema(schema: pa.Schema) -> pa.Schema:
    return pa.schema([f for f in schema if f.name != WEIGHT])


def keyed(d: Delta, columns: pn.Columns, keys, memo: dict, side: str) -> pa.Table:
    """Materialise a side's change with its join key columns appended (one Spark job).

    When the change is already Arrow and the keys are plain columns, appending
    them is plumbing, not computation: no Spark job is spent on it.
    """
    schema = side_schema(columns, keys)
    if d.df is None and all(isinstance(k, ColumnRef) and k.type == columns[k.index][1] for k in keys):
        table = d.materialize()
        arrays = [table.column(col_name(i)) for i in range(len(columns))]
        arrays += [table.column(col_name(k.index)) for k in keys]
        return pa.Table.from_arrays(arrays + [table.column(WEIGHT)], schema=schema)
    cols = memo.get(side)
    if cols is None:
        key_cols = [
            lower(k, column).cast(k.type.spark()).alias(key_name(j))
            for j, k in enumerate(keys)
        ]
        cols = memo[side] = [F.col(col_name(i)) for i in range(len(columns))] + key_cols + [F.col(WEIGHT)]
    return Delta(schema, d.frame().select(*cols), None, d._spark).materialize()


def ensure_state(store, state: JoinState, node: pn.Join) -> None:
    lkeys = [key_name(i) for i in range(len(node.left_keys))]
    store.ensure_arrangement(state.left, row_schema(side_schema(node.left.columns, node.left_keys)), lkeys)
    store.ensure_arrangement(state.right, row_schema(side_schema(node.right.columns, node.right_keys)), lkeys)


def join_delta(node: pn.Join, state: JoinState, store, left: Delta | None, right: Delta | None,
               spark, memo: dict) -> Delta | None:
    ensure_state(store, state, node)
    nkeys = len(node.left_keys)
    knames = [key_name(i) for i in range(nkeys)]
    dl = keyed(left, node.left.columns, node.left_keys, memo, "left") if left is not None else None
    dr = keyed(right, node.right.columns, node.right_keys, memo, "right") if right is not None else None
    if dl is not None and dl.num_rows == 0:
        dl = None
    if dr is not None and dr.num_rows == 0:
        dr = None
    if dl is None and dr is None:
        return None

    lschema = side_schema(node.left.columns, node.left_keys)
    rschema = side_schema(node.right.columns, node.right_keys)
    parts: list[DataFrame] = []
    if dl is not None:
        r_old = store.lookup(state.right, dl.select(knames))
        r_side = pa.concat_tables([_conform(r_old, rschema)] + ([dr] if dr is not None else []))
        if r_side.num_rows:
            parts.append(_join(spark, dl, lschema, r_side, rschema, node, knames, memo))
    if dr is not None:
        l_old = store.lookup(state.left, dr.select(knames))
        if l_old.num_rows:
            parts.append(_join(spark, _conform(l_old, lschema), lschema, dr, rschema, node, knames, memo))

    if dl is not None:
        store.apply(state.left, dl)
    if dr is not None:
        store.apply(state.right, dr)
    out_schema = arrow_schema(node.columns)
    if not parts:
        return None
    out = parts[0]
    for p in parts[1:]:
        out = out.unionByName(p)
    return Delta(out_schema, out, None, spark)


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    table = table.select(schema.names)
    return table.cast(schema) if not table.schema.equals(schema) else table


def _join(spark, lt: pa.Table, lschema: pa.Schema, rt: pa.Table, rschema: pa.Schema,
          node: pn.Join, knames: list[str], memo: dict) -> DataFrame:
    if "join_cols" not in memo:  # built once per operator: each Column costs py4j round trips
        nl = len(node.left.columns)
        cond = None
        for k in knames:
            c = F.col(f"l.{k}") == F.col(f"r.{k}")
            cond = c if cond is None else cond & c
        cols = [F.col(f"l.{col_name(i)}").alias(col_name(i)) for i in range(nl)]
        cols += [F.col(f"r.{col_name(i)}").alias(col_name(nl + i)) for i in range(len(node.right.columns))]
        cols.append((F.col(f"l.{WEIGHT}") * F.col(f"r.{WEIGHT}")).cast("long").alias(WEIGHT))
        memo["join_cond"], memo["join_cols"] = cond, cols
        memo["schemas"] = (spark_schema(lschema), spark_schema(rschema))
    lspark, rspark = memo["schemas"]
    ldf = spark.createDataFrame(lt, schema=lspark).alias("l")
    rdf = spark.createDataFrame(rt, schema=rspark).alias("r")
    if knames:
        # The smaller side is broadcast: both are slices of state touched by this step.
        if rt.num_rows <= lt.num_rows:
            joined = ldf.join(F.broadcast(rdf), memo["join_cond"], "inner")
        else:
            joined = F.broadcast(ldf).join(rdf, memo["join_cond"], "inner")
    else:
        joined = ldf.crossJoin(rdf)
    return joined.select(*memo["join_cols"])
