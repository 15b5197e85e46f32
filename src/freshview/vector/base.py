"""The vector sink protocol, and the keyed sink both stores build on.

A sink is told once what it stores (``open``: a name, the columns with their types, the key),
is filled with the current rows (``replace``), then gets every committed step's change
(``apply``: named columns plus ``_weight``, consolidated) and ``close`` at the end.  Changes are
netted per key with the result sinks' rule (``connectors.result_changes.net_changes``): per key
its new row (an upsert) or, if it has none, a delete.
"""

from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

import numpy as np
import pyarrow as pa

from freshview.connectors.result_changes import net_changes
from freshview.schema import SqlType

Columns = Sequence[tuple[str, SqlType]]


@runtime_checkable
class VectorSink(Protocol):
    def open(self, name: str, columns: Columns, key: Sequence[str]) -> None: ...

    def replace(self, rows: pa.Table) -> None: ...

    def apply(self, delta: pa.Table, step: int) -> None: ...

    def close(self) -> None: ...


class KeyedVectorSink:
    """``apply`` as upserts and deletes by key: a store implements ``write(upserts, deletes)``."""

    name: str = ""
    columns: tuple[tuple[str, SqlType], ...] = ()
    key: tuple[str, ...] = ()

    def open(self, name: str, columns: Columns, key: Sequence[str]) -> None:
        self.name, self.columns, self.key = name, tuple(columns), tuple(key)

    @property
    def names(self) -> list[str]:
        return [n for n, _ in self.columns]

    def apply(self, delta: pa.Table, step: int) -> None:
        rows, ops = split_changes(delta, self.names, self.key)
        if rows.num_rows or ops.num_rows:
            self.write(rows, ops)

    def write(self, upserts: pa.Table, deletes: pa.Table) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def replace(self, rows: pa.Table) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def close(self) -> None:
        pass


def split_changes(delta: pa.Table, names: Sequence[str], key: Sequence[str]) -> tuple[pa.Table, pa.Table]:
    """A step's change as (rows to upsert, keys to delete): per key its new row, else a delete."""
    if delta.num_rows == 0:
        return delta.select(list(names)), delta.select(list(key))
    rows, ops = net_changes(delta, names, key, counted=False)
    upsert = np.asarray(ops.to_numpy(zero_copy_only=False)) == 1
    return rows.filter(pa.array(upsert)), rows.filter(pa.array(~upsert)).select(list(key))


def vector_columns(columns: Columns) -> dict[str, SqlType]:
    """The float-array columns (embeddings) among ``columns``."""
    return {n: t for n, t in columns if t.is_float_vector}
