"""Following base tables: loading them from a snapshot, which changes of the stream they take, DDL on them.

A table is followed from a snapshot at position Y (``Source.snapshot``): its
rows are loaded from the snapshot (``follow``), and the changes of
transactions at or before Y, which the snapshot already holds, are ignored
in the stream (``relevant``).  Everything but ``follow`` is pure.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Mapping

from freshview.connectors.base import SourceTable, Transaction, after
from freshview.schema import SqlType, TableSchema

if TYPE_CHECKING:
    from freshview.service.core import Core

log = logging.getLogger("freshview.service")


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


def follow(core: "Core", tables: Mapping[str, SourceTable]) -> None:
    """Start following base tables: make their changes streamed, then load them from one new snapshot
    and remember its position for each (saved with the engine's state)."""
    if not tables:
        return
    source, flow = core.connector.source, core.flow
    source.prepare(list(tables))
    with source.snapshot() as snap:
        for table, described in tables.items():
            name = core.names.engine(table)
            flow.register_source(name, described.schema)
            estimate = snap.estimate(table)

            def progress(done: int, table: str = table, finished: bool = False) -> None:
                if core.stream is not None:
                    core.stream.keepalive()  # keep the main stream alive through long snapshots
                if core.snapshot_progress is not None:
                    core.snapshot_progress(table, done, estimate, finished)

            progress(0)
            loaded = 0
            for chunk in snap.read(described, core.options.snapshot_chunk_rows, progress):
                flow.tick(name, chunk)
                loaded += chunk.num_rows
            progress(loaded, finished=True)
            core.follow_from[table] = snap.position
            core.save_follow_from()
            log.info("following %s from %s", table, snap.position)
