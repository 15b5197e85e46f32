"""PostgreSQL: logical replication in (pgoutput), result tables and the ``freshview`` schema out.

``connect`` bundles the pieces behind ``connectors.base``: ``source.py``
(slot, stream, exported snapshots, catalog), ``results.py`` (result tables,
each step's changes with its LSN in one transaction), ``control.py`` (the
``freshview`` schema: requests, status).  ``faults.py`` says which psycopg
errors are faults; every piece raises those as ``errors``' typed faults
(``connectors.edge``).

Every connection the connector opens (the service's, the replication
stream's, snapshot readers') gets what the DSN does not set otherwise:
``connect_timeout`` and TCP keepalives with a user timeout, so a database
behind a dead network is noticed within about a minute rather than the
kernel's hours, and an ``application_name`` that shows the service's
sessions in ``pg_stat_activity`` (``freshview``, ``freshview stream``,
``freshview snapshot``; one the DSN sets is kept for all).
"""

from __future__ import annotations

from freshview.connectors.base import Connector

#: Connection parameters a DSN gets unless it sets them (libpq's names; see the module docstring).
CONNECTION_DEFAULTS = {"connect_timeout": "10", "keepalives": "1", "keepalives_idle": "20",
                       "keepalives_interval": "5", "keepalives_count": "4", "tcp_user_timeout": "60000"}


def with_defaults(dsn: str) -> str:
    """``dsn`` with ``CONNECTION_DEFAULTS`` for the parameters it does not set (a Unix socket takes no TCP
    settings: libpq ignores them there)."""
    import psycopg.conninfo

    params = psycopg.conninfo.conninfo_to_dict(dsn)
    return psycopg.conninfo.make_conninfo(**{**CONNECTION_DEFAULTS, **params})


def named(dsn: str, name: str) -> dict[str, str]:
    """``psycopg.connect`` keyword arguments naming the session ``name``, unless the DSN names it."""
    import psycopg.conninfo

    return {} if "application_name" in psycopg.conninfo.conninfo_to_dict(dsn) else {"application_name": name}


def connect(dsn: str, *, slot: str | None = None, publication: str | None = None) -> Connector:
    """One autocommit connection shared by the control schema, the result sink and the catalog."""
    import psycopg

    from freshview.connectors.postgres import control, faults
    from freshview.connectors.postgres.access import PostgresGrants
    from freshview.connectors.postgres.identifiers import PostgresNames
    from freshview.connectors.postgres.results import PostgresResults
    from freshview.connectors.postgres.source import PostgresSource, SourceError

    slot = slot or control.slot_name(dsn)
    dsn = with_defaults(dsn)
    try:
        conn = psycopg.connect(dsn, autocommit=True, **named(dsn, "freshview"))
    except psycopg.Error as exc:
        fault = faults.classify(exc)
        if fault is not None:
            raise fault from exc
        raise SourceError(f"cannot connect to the database: {exc}".strip()) from None
    return Connector(PostgresSource(dsn, conn, slot, publication or control.PUBLICATION),
                     PostgresResults(conn, slot), control.PostgresControl(conn, slot), PostgresNames(),
                     (psycopg.Error,), grants=PostgresGrants(conn))
