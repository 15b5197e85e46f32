"""A relation's change inside one step, lazily a Spark DataFrame or materialised Arrow.

Linear operators (filter, project, union) only extend a DataFrame's lineage;
a stateful operator materialises its inputs once (one Spark job), because it
must look its state up by the keys the change touches.  Columns are named
positionally (``c0``, ``c1`` ...) plus ``_weight`` so that rewrites never
depend on user names.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as st

from freshview.algebra.batch import consolidate
from freshview.plan.nodes import Columns
from freshview.schema import WEIGHT


def col_name(i: int) -> str:
    return f"c{i}"


def column(i: int) -> Column:
    """The Spark Column of a relation's i-th column (what ``lower`` resolves ColumnRefs to)."""
    return F.col(col_name(i))


def arrow_schema(columns: Columns, extra: list[pa.Field] | None = None) -> pa.Schema:
    fields = [pa.field(col_name(i), t.arrow) for i, (_, t) in enumerate(columns)]
    return pa.schema(fields + (extra or []) + [pa.field(WEIGHT, pa.int64())])


def spark_schema(schema: pa.Schema) -> st.StructType:
    from freshview.schema import SqlType

    out = []
    for f in schema:
        if f.name == WEIGHT:
            out.append(st.StructField(f.name, st.LongType(), False))
        else:
            out.append(st.StructField(f.name, SqlType.from_arrow(f.type).spark(), True))
    return st.StructType(out)


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Cast Spark's Arrow output to the exact schema freshview declared."""
    table = table.select(schema.names)
    if table.schema.equals(schema):
        return table
    arrays = [table.column(f.name).cast(f.type) for f in schema]
    return pa.Table.from_arrays(arrays, schema=schema)


@dataclass
class Delta:
    """The change of one relation in this step; ``schema`` includes ``_weight``."""

    schema: pa.Schema
    df: DataFrame | None = None
    arrow: pa.Table | None = None
    _spark: SparkSession | None = field(default=None, repr=False)

    @staticmethod
    def of_arrow(table: pa.Table, spark: SparkSession) -> "Delta":
        return Delta(table.schema, None, table, spark)

    def frame(self) -> DataFrame:
        if self.df is None:
            assert self.arrow is not None and self._spark is not None
            self.df = self._spark.createDataFrame(self.arrow, schema=spark_schema(self.schema))
        return self.df

    def materialize(self) -> pa.Table:
        """The consolidated change as Arrow (runs the Spark job at most once)."""
        if self.arrow is None:
            assert self.df is not None
            table = self.df.toArrow()
            self.arrow = consolidate(conform(table, self.schema))
        return self.arrow

    @property
    def spark(self) -> SparkSession:
        if self._spark is not None:
            return self._spark
        assert self.df is not None
        return self.df.sparkSession


def weight_product(a: str, b: str):
    return (F.col(a) * F.col(b)).cast("long")
