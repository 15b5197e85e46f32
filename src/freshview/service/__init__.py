"""The service: freshview running beside a PostgreSQL database, and what its users see of it.

``control`` owns the ``freshview`` schema inside the user's database (status
tables, the request queue, the ``create_view``/``drop_view`` procedures);
``names`` maps database table names to engine names; ``service`` is the
process that follows the logical replication stream, feeds micro-batches of
whole source transactions into an ``IncrementalFlow`` and writes each step's
result changes, with the source position reached, in one database
transaction; ``setup`` and ``status`` are the administrator's side.  This
layer composes the connectors and the engine; nothing below imports it.
"""
