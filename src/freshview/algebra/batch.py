"""DeltaBatch: a consolidated set of weighted rows, as an Arrow table.

Consolidation sums the weights of equal rows (NULL equals NULL here, as in
GROUP BY) and drops rows whose weight is zero.  Five ``+1`` rows for the same
group become one ``+5`` row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from freshview.errors import DeltaError
from freshview.schema import WEIGHT


def consolidate(table: pa.Table) -> pa.Table:
    """Sum the weights of equal rows and drop rows whose weight is 0."""
    if table.num_rows == 0:
        return table
    columns = [c for c in table.column_names if c != WEIGHT]
    weight = table.column(WEIGHT)
    if not columns:
        total = pc.sum(weight).as_py() or 0
        return pa.table({WEIGHT: pa.array([total] if total else [], pa.int64())})
    grouped = table.group_by(columns, use_threads=False).aggregate([(WEIGHT, "sum")])
    grouped = grouped.rename_columns(columns + [WEIGHT])
    grouped = grouped.filter(pc.not_equal(grouped.column(WEIGHT), 0))
    return grouped.select(table.column_names).cast(table.schema)


def negate(table: pa.Table) -> pa.Table:
    idx = table.column_names.index(WEIGHT)
    return table.set_column(idx, WEIGHT, pc.negate(table.column(WEIGHT)))


def to_arrow_delta(data: Any, schema: pa.Schema) -> pa.Table:
    """Accept a pyarrow Table/RecordBatch or a pandas DataFrame and conform it to ``schema``.

    ``schema`` includes the ``_weight`` field.  Missing columns, extra
    columns and values that cannot be converted are reported by name.
    """
    if isinstance(data, pa.RecordBatch):
        table = pa.Table.from_batches([data])
    elif isinstance(data, pa.Table):
        table = data
    else:
        try:
            import pandas as pd
        except ImportError:  # pragma: no cover
            pd = None
        if pd is not None and isinstance(data, pd.DataFrame):
            table = pa.Table.from_pandas(data, preserve_index=False)
        else:
            raise DeltaError(
                f"a delta must be a pyarrow Table/RecordBatch or a pandas DataFrame, not {type(data).__name__}"
            )
    names = set(table.column_names)
    expected = [f.name for f in schema]
    missing = [n for n in expected if n not in names]
    if missing:
        raise DeltaError(f"delta lacks column(s) {', '.join(missing)} (expected {', '.join(expected)})")
    extra = [n for n in table.column_names if n not in set(expected)]
    if extra:
        raise DeltaError(f"delta has unknown column(s) {', '.join(extra)} (expected {', '.join(expected)})")
    arrays = []
    for field in schema:
        col = table.column(field.name)
        if col.type != field.type:
            try:
                col = col.cast(field.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                raise DeltaError(
                    f"column {field.name!r}: cannot convert {col.type} to {field.type}: {exc}"
                ) from None
        arrays.append(col)
    out = pa.Table.from_arrays(arrays, schema=schema)
    if out.column(WEIGHT).null_count:
        raise DeltaError(f"column {WEIGHT!r} must not contain NULL")
    return out


@dataclass
class DeltaBatch:
    """The changes of one relation in one step: columns plus ``_weight``, consolidated."""

    table: pa.Table
    step: int = 0

    @property
    def num_rows(self) -> int:
        return self.table.num_rows

    def __len__(self) -> int:
        return self.table.num_rows

    @property
    def schema(self) -> pa.Schema:
        return self.table.schema

    def to_arrow(self) -> pa.Table:
        return self.table

    def to_pandas(self):
        return self.table.to_pandas()

    def inserts(self) -> pa.Table:
        """Rows with positive weight (weight kept)."""
        return self.table.filter(pc.greater(self.table.column(WEIGHT), 0))

    def deletes(self) -> pa.Table:
        """Rows with negative weight (weight kept)."""
        return self.table.filter(pc.less(self.table.column(WEIGHT), 0))

    def __repr__(self) -> str:
        return f"DeltaBatch(step={self.step}, rows={self.num_rows}, columns={self.table.column_names})"
