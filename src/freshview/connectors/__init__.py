"""Connectors: change sources and result sinks outside the engine.

A source turns a database's change stream into per-transaction deltas
(Arrow tables with ``_weight``) with a resumable position; a sink writes a
step's view changes back in one transaction.  Connectors speak only
``algebra``/``schema`` types, so they are tested without Spark and the engine
without a database.  ``postgres`` holds the PostgreSQL logical-replication
source (pgoutput) and the result-table sink.
"""
