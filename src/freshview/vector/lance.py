"""``LanceDBSink``: a LanceDB table (embedded: a directory, no server) kept equal to a view or source.

Columns keep their Arrow types, except that a float array of declared dimension d becomes
``fixed_size_list<float32>[d]``, the vector column LanceDB searches (``table.search(q)``).
Attaching overwrites the table with the current rows; each committed step is one
``merge_insert`` on the key (upserts) and one ``delete`` of the deleted keys.  Needs the
``lancedb`` package (``pip install freshview[vector]``).
"""

from __future__ import annotations

from typing import Any, Sequence

import pyarrow as pa

from freshview.errors import FreshviewError
from freshview.vector.base import Columns, KeyedVectorSink, vector_columns


class LanceDBSink(KeyedVectorSink):
    def __init__(self, uri: str, table: str) -> None:
        try:
            import lancedb  # noqa: F401
        except ImportError:
            raise FreshviewError("LanceDBSink needs the lancedb package: pip install lancedb") from None
        self.uri, self.table_name = str(uri), table
        self.db: Any = None
        self.table: Any = None
        self.schema: pa.Schema | None = None

    def open(self, name: str, columns: Columns, key: Sequence[str]) -> None:
        import lancedb

        super().open(name, columns, key)
        vectors = vector_columns(columns)
        fields = []
        for n, t in self.columns:
            if n in vectors and t.dim is not None:
                fields.append(pa.field(n, pa.list_(pa.float32(), t.dim)))
            else:
                fields.append(pa.field(n, t.arrow))
        self.schema = pa.schema(fields)
        self.db = lancedb.connect(self.uri)

    def replace(self, rows: pa.Table) -> None:
        self.table = self.db.create_table(self.table_name, data=self._conform(rows), schema=self.schema,
                                          mode="overwrite", on_bad_vectors="null")

    def write(self, upserts: pa.Table, deletes: pa.Table) -> None:
        if deletes.num_rows:
            self.table.delete(_predicate(deletes, self.key))
        if upserts.num_rows:
            (self.table.merge_insert(list(self.key)).when_matched_update_all().when_not_matched_insert_all()
             .execute(self._conform(upserts), on_bad_vectors="null"))  # a NULL vector stays NULL

    def _conform(self, rows: pa.Table) -> pa.Table:
        return rows.select(self.schema.names).cast(self.schema)  # type: ignore[union-attr]


def _literal(value: Any) -> str:
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    raise FreshviewError(f"LanceDBSink cannot delete by a key value of type {type(value).__name__}: "
                         "use integer, text or boolean keys")


def _predicate(keys: pa.Table, key: Sequence[str]) -> str:
    """A SQL filter matching exactly the given keys (LanceDB's ``delete`` takes one)."""
    columns = [keys.column(k).to_pylist() for k in key]
    if len(key) == 1:
        return f"`{key[0]}` IN ({', '.join(_literal(v) for v in columns[0])})"
    terms = ("(" + " AND ".join(f"`{k}` = {_literal(v)}" for k, v in zip(key, values)) + ")"
             for values in zip(*columns))
    return " OR ".join(terms)
