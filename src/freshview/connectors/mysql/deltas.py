"""Binlog transactions to Arrow deltas, one per table. No I/O.

Delta rule: an insert is its row with weight +1, a delete its row with −1,
an update −before +after.  The binlog carries whole rows for all three
(``binlog_row_image=FULL``), so unlike PostgreSQL's default replica identity
no old row is ever looked up, and a batch's delta is a multiset sum that
does not depend on the order of its changes: the rows of a table in a
micro-batch are gathered into one "plus" and one "minus" list, each column
goes to Arrow in one ``types.to_arrow`` call, and the result is consolidated
(``freshview.algebra.consolidate``: equal rows' weights summed, zeros
dropped), so a row inserted and deleted in the same batch vanishes.

TRUNCATE is the caller's to expand (it knows the table's current rows), as
for PostgreSQL; a row that lacks one of the table's columns means the table
was altered since it was described, and is refused naming both.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import numpy as np
import pyarrow as pa

from freshview.algebra import consolidate
from freshview.connectors.mysql.catalog import SourceTable, TableName
from freshview.connectors.mysql.transactions import MySqlTransaction
from freshview.connectors.mysql.types import to_arrow
from freshview.errors import FreshviewError
from freshview.schema import WEIGHT

_EMPTY_SET = "empty set"  # mysql-replication's NONE_SOURCE.EMPTY_SET


class ChangeError(FreshviewError):
    """A change freshview cannot turn into a correct delta (a column gone, a value out of range ...)."""

    def __init__(self, message: str, table: TableName | None = None) -> None:
        super().__init__(message)
        self.table = table


def to_deltas(txns: MySqlTransaction | Iterable[MySqlTransaction],
              sources: Mapping[TableName, SourceTable]) -> dict[TableName, pa.Table]:
    """One consolidated Arrow delta (the table's columns + ``_weight``) per changed table."""
    batch = [txns] if isinstance(txns, MySqlTransaction) else list(txns)
    plus: dict[TableName, list] = {}
    minus: dict[TableName, list] = {}
    for txn in batch:
        for name, runs in txn.changes.items():
            if name not in sources:
                raise ChangeError(f"changes for table {name}, which no view reads", name)
            p = plus.setdefault(name, [])
            m = minus.setdefault(name, [])
            for run in runs:
                if run.kind == "insert":
                    p.extend(_images(run.rows, "values", "none_sources"))
                elif run.kind == "delete":
                    m.extend(_images(run.rows, "values", "none_sources"))
                else:
                    m.extend(_images(run.rows, "before_values", "before_none_sources"))
                    p.extend(_images(run.rows, "after_values", "after_none_sources"))
    out = {}
    for name in plus:
        source = sources[name]
        table = pa.concat_tables([_weighted(plus[name], 1, source), _weighted(minus[name], -1, source)])
        out[name] = consolidate(table)
    return out


def _images(rows: list, values: str, nones: str) -> list[tuple[dict, dict]]:
    return [(r[values], r.get(nones) or _NO_NONES) for r in rows]


_NO_NONES: dict = {}


def _weighted(images: Sequence[tuple[dict, dict]], weight: int, source: SourceTable) -> pa.Table:
    arrays = []
    for col in source.columns:
        name = col.name
        try:
            values = [v[name] for v, _ in images]
        except KeyError:
            raise ChangeError(f"the binlog rows of {source.name} have no column {name!r}: the table was "
                              "altered since freshview described it", source.name) from None
        empty = ()
        if col.data_type == "set":
            empty = [i for i, (v, n) in enumerate(images) if v[name] is None and n.get(name) == _EMPTY_SET]
        try:
            arrays.append(to_arrow(values, col, empty))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as error:
            raise ChangeError(f"{source.name}.{name}: cannot convert a binlog value to {col.type}: {error}",
                              source.name) from None
    arrays.append(pa.array(np.full(len(images), weight, dtype=np.int64)))
    return pa.Table.from_arrays(arrays, schema=source.schema.arrow(with_weight=True))


__all__ = ["ChangeError", "to_deltas", "WEIGHT"]
