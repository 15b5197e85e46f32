"""A connector's changes as the engine's: what the loop steps and what a population catches up on.

``engine_changes`` turns a group of whole transactions into one ``SourceChange`` per engine source
(engine names; a TRUNCATE: everything the engine holds of the table goes first).  Old rows are the
engine's to look up, by key, in its step; ``source_rows`` serves only a change the engine cannot take
by key (PostgreSQL: unchanged TOAST values).  The loop (``core``) calls it against the service's engine,
a population (``population``) against its own.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

import pyarrow as pa

from freshview.connectors.base import Deltas, TableChange, Transaction
from freshview.flow import SourceChange, source_checks
from freshview.schema import TableSchema


def engine_changes(deltas: Deltas, group: Sequence[Transaction], schemas: Mapping[str, TableSchema],
                   engine_name: Callable[[str], str],
                   source_rows: Callable[[str, pa.Table], pa.Table]) -> dict[str, SourceChange]:
    """``schemas``: the followed tables' (qualified names) as the engine holds them; ``source_rows(table,
    keys)``: the engine's rows of ``table`` (qualified) with those keys."""
    truncated = {t for txn in group for t in txn.truncated}

    def lookup_old(table: str, keys: pa.Table) -> pa.Table:
        if table in truncated:  # the rows it had are gone; later changes see only new rows
            return schemas[table].arrow().empty_table()
        return source_rows(table, keys)

    changes = deltas(group, schemas, lookup_old)
    out = {engine_name(t): source_change(c, t in truncated) for t, c in changes.items()}
    for table in truncated - changes.keys():
        out[engine_name(table)] = SourceChange(truncate=True)
    return out


def source_change(change: TableChange, truncate: bool) -> SourceChange:
    """A connector's ``TableChange`` as the engine's ``SourceChange`` (``present``: a check that each key
    is held before the step)."""
    present = change.present
    return SourceChange(rows=change.rows, upserts=change.upserts, deletes=change.deletes, truncate=truncate,
                        checks=None if present is None or not present.num_rows else source_checks(present, 1))
