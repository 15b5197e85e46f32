"""A relation's change inside one step, lazily a Spark DataFrame or materialised Arrow.

Linear operators (filter, project, union) only extend a DataFrame's lineage;
a stateful operator materialises its inputs once (one Spark job), because it
must look its state up by the keys the change touches.  Columns are named
positionally (``c0``, ``c1`` ...) plus ``_weight`` so that rewrites never
depend on user names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as st

from freshview.algebra.batch import consolidate
from freshview.runtime.relation import arrow_schema, col_name, conform, for_spark  # noqa: F401 (re-exported)
from freshview.schema import WEIGHT


def column(i: int) -> Column:
    """The Spark Column of a relation's i-th column (what ``lower`` resolves ColumnRefs to)."""
    return F.col(col_name(i))


def spark_schema(schema: pa.Schema) -> st.StructType:
    from freshview.schema import SqlType

    out = []
    for f in schema:
        if f.name == WEIGHT:
            out.append(st.StructField(f.name, st.LongType(), False))
        else:
            out.append(st.StructField(f.name, SqlType.from_arrow(f.type).spark(), True))
    return st.StructType(out)


@dataclass
class Delta:
    """The change of one relation in this step; ``schema`` includes ``_weight``."""

    schema: pa.Schema
    df: DataFrame | None = None
    arrow: pa.Table | None = None
    _spark: SparkSession | None = field(default=None, repr=False)
    loader: Callable[[pa.Table], DataFrame] | None = field(default=None, repr=False)  # Arrow -> DataFrame
    # a Spark result written once to Parquet files (``BulkKernels.stage``): their directory and row count;
    # ``df`` then reads them, and the driver streams them in bounded batches
    files: str | None = None
    rows: int | None = None
    loose: bool = False  # ``arrow`` may hold equal rows apart (not consolidated yet: ``materialize`` does it)

    @staticmethod
    def of_arrow(table: pa.Table, spark: SparkSession) -> "Delta":
        return Delta(table.schema, None, table, spark)

    def frame(self) -> DataFrame:
        if self.df is None:
            assert self.arrow is not None and self._spark is not None
            if self.loader is not None:
                self.df = self.loader(self.arrow)
            else:
                self.df = self._spark.createDataFrame(for_spark(self.arrow), schema=spark_schema(self.schema))
        return self.df

    def materialize(self, consolidated: bool = True) -> pa.Table:
        """The change as Arrow, consolidated unless asked otherwise (runs the Spark job at most once)."""
        if self.arrow is None:
            assert self.df is not None
            table = conform(self.df.toArrow(), self.schema)
            if not consolidated:
                return table
            self.arrow = consolidate(table)
        elif self.loose and consolidated:
            self.arrow, self.loose = consolidate(self.arrow), False
        return self.arrow

    @property
    def spark(self) -> SparkSession:
        if self._spark is not None:
            return self._spark
        assert self.df is not None
        return self.df.sparkSession
