"""The service: freshview running beside a database, and what its users see of it.

Database-neutral: ``core`` is the loop that follows a connector's change
stream (``connectors.base``), feeds micro-batches of whole source
transactions into an ``IncrementalFlow`` and writes each step's result
changes, with the source position reached, in one database transaction;
``batching`` (when to step) and ``decide`` (skip, replay or write) are pure,
as are the decisions of ``following`` and ``recovery``; ``catalog``'s
``ViewCatalog`` owns the views (create, drop, reconcile, followed tables, DDL
on them, failures); ``requests`` serves the ``create_view``/``drop_view``
queue with it; ``names`` maps database table names to engine
names; ``service`` picks the connector a DSN names.  ``setup``, ``status``
and ``embedded`` are PostgreSQL's administrator side.  This layer composes
the connectors and the engine; nothing below imports it.
"""
