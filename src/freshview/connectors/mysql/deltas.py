"""Binlog transactions to Arrow deltas, one per table. No I/O.

Delta rule: an insert is its row with weight +1, a delete its row with −1,
an update −before +after.  The binlog carries whole rows for all three
(``binlog_row_image=FULL``), so unlike PostgreSQL's default replica identity
no old row is ever looked up, and a batch's delta is a multiset sum that
does not depend on the order of its changes: the row images of a table in a
micro-batch are gathered into one "plus" (new images) and one "minus" (old
images) list, the images of one table map are joined so that each column
goes to Arrow in one call (``rowimages.RowImages.arrays``), and the result is consolidated
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
from freshview.connectors.mysql.rowimages import ImageError
from freshview.connectors.mysql.transactions import MySqlTransaction
from freshview.errors import ChangeError
from freshview.schema import WEIGHT


def to_deltas(txns: MySqlTransaction | Iterable[MySqlTransaction],
              sources: Mapping[TableName, SourceTable]) -> dict[TableName, pa.Table]:
    """One consolidated Arrow delta (the table's columns + ``_weight``) per changed table."""
    batch = [txns] if isinstance(txns, MySqlTransaction) else list(txns)
    plus: dict[TableName, list] = {}
    minus: dict[TableName, list] = {}
    for txn in batch:
        for name, runs in txn.changes.items():
            if name not in sources:
                raise ChangeError(f"changes for table {name}, which no view reads", str(name))
            p = plus.setdefault(name, [])
            m = minus.setdefault(name, [])
            for run in runs:
                p.extend(run.after)
                m.extend(run.before)
    out = {}
    for name in plus:
        source = sources[name]
        # (No empty table among the parts: an empty chunk between two others made the engine drop the
        # later chunk's rows in large steps; found with this change, reproduced on the engine alone.)
        parts = [t for t in (*_weighted(plus[name], 1, source), *_weighted(minus[name], -1, source)) if t.num_rows]
        table = pa.concat_tables(parts) if parts else source.schema.arrow(with_weight=True).empty_table()
        out[name] = consolidate(table)
    return out


def _weighted(sets: Sequence, weight: int, source: SourceTable) -> list[pa.Table]:
    """The image sets as tables of the source's columns + ``_weight``: the sets of one layout joined
    first, so each column converts in one call per layout."""
    schema = source.schema.arrow(with_weight=True)
    groups: dict[object, list] = {}
    for s in sets:
        groups.setdefault(s.group, []).append(s)
    tables = []
    for group in groups.values():
        images = group[0] if len(group) == 1 else type(group[0]).concat(group)
        try:
            arrays = images.arrays(source.columns)
        except KeyError as missing:
            raise ChangeError(f"the binlog rows of {source.name} have no column {missing.args[0]!r}: the table "
                              "was altered since freshview described it", str(source.name)) from None
        except ImageError as error:
            col = next((c for c in source.columns if c.name == error.column), None)
            raise ChangeError(f"{source.name}.{error.column}: cannot convert a binlog value to "
                              f"{col.type if col else '?'}: {error}", str(source.name)) from None
        arrays.append(pa.array(np.full(len(images), weight, dtype=np.int64)))
        tables.append(pa.Table.from_arrays(arrays, schema=schema))
    return tables


__all__ = ["ChangeError", "to_deltas", "WEIGHT"]
