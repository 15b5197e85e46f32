"""Connectors: change sources, result sinks and control schemas outside the engine.

``base`` is the one interface the service core uses (positions, whole
transactions, snapshot, stream, result sink, control schema); each database
is a package behind it.  A source turns a database's change stream into
per-transaction deltas (Arrow tables with ``_weight``) with a resumable
position; a sink writes a step's view changes and that position back in one
transaction.  Connectors speak only ``algebra``/``schema``/``plan.shape``
types, so they are tested without Spark and the engine without a database.
``postgres`` holds the PostgreSQL logical-replication source (pgoutput), the
result-table sink and the ``freshview`` schema.
"""
