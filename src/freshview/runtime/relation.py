"""The shape of a relation inside a step, shared by every executor (no Spark imported here).

Columns are named positionally (``c0``, ``c1`` ...) plus ``_weight`` (int64),
so that rewrites never depend on user names; ``conform`` is the one place a
computed table is brought to the exact schema freshview declared.
"""

from __future__ import annotations

import pyarrow as pa

from freshview.plan.nodes import Columns
from freshview.schema import WEIGHT, interval_from_struct, interval_to_struct


def col_name(i: int) -> str:
    return f"c{i}"


def arrow_schema(columns: Columns, extra: list[pa.Field] | None = None) -> pa.Schema:
    fields = [pa.field(col_name(i), t.arrow) for i, (_, t) in enumerate(columns)]
    return pa.schema(fields + (extra or []) + [pa.field(WEIGHT, pa.int64())])


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table``'s columns of ``schema``, in its order and cast to its types (a Spark interval struct
    becomes month_day_nano)."""
    table = table.select(schema.names)
    if table.schema.equals(schema):
        return table
    arrays = [_interval(table.column(f.name)) if pa.types.is_interval(f.type) and pa.types.is_struct(
        table.schema.field(f.name).type) else table.column(f.name).cast(f.type) for f in schema]
    return pa.Table.from_arrays(arrays, schema=schema)


def _interval(col: pa.ChunkedArray) -> pa.Array:
    return interval_from_struct(col.combine_chunks())


def for_spark(table: pa.Table) -> pa.Table:
    """``table`` as Spark takes it: intervals as struct<months, days, micros> (see ``SqlType``), and no
    empty record batch (``createDataFrame`` drops every row after an empty batch: measured with PySpark
    4.3, a 30k-row delta chunked [30000, 0, 30000] reached Spark as its first 30000 rows)."""
    batches = table.to_batches()
    if any(b.num_rows == 0 for b in batches) and table.num_rows:
        table = pa.Table.from_batches([b for b in batches if b.num_rows], schema=table.schema)
    for i, f in enumerate(table.schema):
        if pa.types.is_interval(f.type):
            table = table.set_column(i, pa.field(f.name, interval_to_struct(pa.array([], f.type)).type),
                                     interval_to_struct(table.column(i).combine_chunks()))
    return table
