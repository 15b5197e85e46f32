"""A source's copy filled in bulk: a snapshot's rows into the empty ``source/<name>``, checked once.

The stepwise path (``source.Source.apply``) takes each batch as one step: it looks up the keys the
batch touches, checks the result and appends a run.  Loading an empty copy needs none of the lookups
(there is nothing to find), so ``load`` turns the batches into runs directly (``StateStore.load_runs``:
the store's run format, large runs spilled to files as they are built) and checks what the steps
would have checked:

* per batch, as it arrives: a NULL primary key, a fixed-size array of another length, a weight below
  1 (a load inserts; a weight of 0 is nothing and is dropped) -- refused with the source, the column
  and the row;
* once, over the whole copy (``StateStore.repeated``: one sort of the key hashes): a primary key
  held by more than one row, refused with the source and the key, as a step refuses it.

The caller holds the transaction: a refusal anywhere leaves the copy empty.  A source without a
primary key is a multiset: its rows may repeat.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from freshview.algebra.batch import consolidate
from freshview.errors import DeltaError
from freshview.runtime.operators.source import Source, SourceChange, _check_array_lengths, _row_text
from freshview.runtime.state import bulk
from freshview.schema import WEIGHT

if TYPE_CHECKING:
    from freshview.runtime.state.protocol import StateStore

__all__ = ["load"]


def load(store: StateStore, source: Source, batches: Iterable[pa.Table], run_rows: int | None = None) -> int:
    """Fill ``source``'s empty copy from ``batches`` (the source's own columns + ``_weight``, inside the
    caller's transaction); the rows loaded.  Refusals as in the module docstring (``DeltaError``)."""
    loaded = store.load_runs(source.arrangement, bulk.regroup(_checked(source, batches), run_rows))
    if source.schema.primary_key and loaded:
        twice = store.repeated(source.arrangement)
        if twice.num_rows:
            row = twice.slice(0, 1).to_pylist()[0]
            key = ", ".join(f"{k}={row[c]!r}" for k, c in zip(source.schema.primary_key, source.key))
            raise DeltaError(f"source {source.name!r}: duplicate primary key ({key}); "
                             "an update is the old row at -1 and the new row at +1")
    return loaded


def _checked(source: Source, batches: Iterable[pa.Table]) -> Iterator[pa.Table]:
    """Each batch in the copy's columns, its per-row checks passed, rows of weight 0 dropped."""
    keys = source.key
    for batch in batches:
        rows = source.to_engine(SourceChange(rows=batch)).rows
        assert rows is not None
        if not rows.num_rows:
            continue
        if source.schema.primary_key:
            nulls = [k for k, c in zip(source.schema.primary_key, keys) if rows.column(c).null_count]
            if nulls:
                raise DeltaError(f"source {source.name!r}: primary key column {nulls[0]!r} is NULL")
        if not pc.all(pc.greater(rows.column(WEIGHT), 0)).as_py():
            rows = consolidate(rows)  # (as a step's batch: a row's weights net out first)
            if pc.any(pc.less(rows.column(WEIGHT), 0)).as_py():
                bad = rows.filter(pc.less(rows.column(WEIGHT), 0))
                raise DeltaError(f"source {source.name!r}: a bulk load inserts rows, but "
                                 f"{_row_text(bad, source.schema)} has weight {bad.column(WEIGHT)[0].as_py()}")
        _check_array_lengths(source.name, source.schema, rows, None)
        yield rows
