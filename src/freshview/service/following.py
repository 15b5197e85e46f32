"""Following base tables: which changes of the stream a followed table takes, and DDL on it.  No I/O.

A table is followed from a snapshot at position Y (``Source.snapshot``): its
rows are loaded from the snapshot, and the changes of transactions at or
before Y, which the snapshot already holds, are ignored in the stream.
"""

from __future__ import annotations

from typing import Any, Mapping

from freshview.connectors.base import Transaction, after
from freshview.schema import SqlType, TableSchema


def relevant(txn: Transaction, follow_from: Mapping[str, Any]) -> Transaction:
    """The transaction's changes to followed tables not already in their snapshots."""
    return txn.restricted({t for t in (*txn.rows, *txn.truncated)
                           if t in follow_from and after(txn.position, follow_from[t])})


def truncates(txn: Transaction, follow_from: Mapping[str, Any]) -> bool:
    return any(t in follow_from for t in txn.truncated)


def incompatible(columns: Mapping[str, SqlType | None], schema: TableSchema) -> str | None:
    """What a table's new definition breaks for a schema followed so far, if anything (added columns
    are harmless)."""
    for col in schema.columns:
        if col.name not in columns:
            return f"column {col.name} was dropped or renamed"
        current = columns[col.name]
        if current is None:
            return f"column {col.name} now has an unsupported type"
        if current != col.type:
            return f"column {col.name} changed type from {col.type} to {current}"
    return None
