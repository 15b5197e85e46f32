"""Vector stores kept in sync with a view or a source: ``IncrementalFlow.attach_vector_sink(name, sink)``.

* ``PgVectorSink(dsn, table)``: a PostgreSQL table with the ``vector`` extension (pgvector); float
  arrays of a declared dimension become ``vector(d)`` columns.
* ``LanceDBSink(uri, table)``: a LanceDB table (embedded, a directory); float arrays of a declared
  dimension become ``fixed_size_list<float32>[d]``, the vector column LanceDB searches.

Both follow ``base.KeyedVectorSink``: on attach the store is filled with the current rows, then
after each committed step the step's change is netted per key (``connectors.result_changes``) and
written as upserts and deletes in one store transaction (PostgreSQL) or one merge plus one delete
(LanceDB).  Nothing here imports the flow: it calls the sink through the ``VectorSink`` protocol.
"""

from __future__ import annotations

from typing import Any

from freshview.vector.base import KeyedVectorSink, VectorSink

__all__ = ["VectorSink", "KeyedVectorSink", "PgVectorSink", "LanceDBSink"]


def __getattr__(name: str) -> Any:  # the drivers load only when a sink of theirs is asked for
    if name == "PgVectorSink":
        from freshview.vector.pgvector import PgVectorSink

        return PgVectorSink
    if name == "LanceDBSink":
        from freshview.vector.lance import LanceDBSink

        return LanceDBSink
    raise AttributeError(name)
