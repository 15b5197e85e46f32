"""PostgreSQL: logical replication in (pgoutput), result tables and the ``freshview`` schema out.

``connect`` bundles the pieces behind ``connectors.base``: ``source.py``
(slot, stream, exported snapshots, catalog), ``results.py`` (result tables,
each step's changes with its LSN in one transaction), ``control.py`` (the
``freshview`` schema: requests, status).
"""

from __future__ import annotations

from freshview.connectors.base import Connector


def connect(dsn: str, *, slot: str | None = None, publication: str | None = None) -> Connector:
    """One autocommit connection shared by the control schema, the result sink and the catalog."""
    import psycopg

    from freshview.connectors.postgres import control
    from freshview.connectors.postgres.access import PostgresGrants
    from freshview.connectors.postgres.identifiers import PostgresNames
    from freshview.connectors.postgres.results import PostgresResults
    from freshview.connectors.postgres.source import PostgresSource, SourceError

    try:
        conn = psycopg.connect(dsn, autocommit=True)
    except psycopg.Error as exc:
        raise SourceError(f"cannot connect to the database: {exc}".strip()) from None
    slot = slot or control.slot_name(dsn)
    return Connector(PostgresSource(dsn, conn, slot, publication or control.PUBLICATION),
                     PostgresResults(conn, slot), control.PostgresControl(conn, slot), PostgresNames(),
                     (psycopg.Error,), grants=PostgresGrants(conn))
