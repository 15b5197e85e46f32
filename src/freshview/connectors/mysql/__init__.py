"""MySQL and MariaDB: the change source (types, catalog, consistent snapshot, binlog stream, deltas),
DSNs, result tables, the ``freshview`` control database and setup checks.

``connect`` bundles the pieces behind ``connectors.base``: ``source.py``
(binlog stream, snapshots, catalog), ``results.py`` (result tables, each
step's changes with its binlog position in one transaction), ``control.py``
(``MySqlControl``: the ``freshview`` database's requests and status).
See docs/architecture.md, "MySQL/MariaDB: the change source".
"""

from __future__ import annotations

from freshview.connectors.base import Connector


def connect(dsn: str) -> Connector:
    """One autocommit connection (UTC, utf8mb4, strict) shared by the control database, the result sink
    and the catalog; the stream and snapshots open their own.  Bare table names are the DSN's database's."""
    import pymysql
    from pymysql.constants import CLIENT

    from freshview.connectors.mysql.access import MySqlGrants
    from freshview.connectors.mysql.catalog import MySqlNames
    from freshview.connectors.mysql.control import MySqlControl
    from freshview.connectors.mysql.dsn import parse_dsn
    from freshview.connectors.mysql.results import MySqlResults
    from freshview.connectors.mysql.source import MySqlSource
    from freshview.connectors.mysql.types import SESSION_SETUP
    from freshview.errors import FreshviewError

    parsed = parse_dsn(dsn)
    if not parsed.database:
        raise FreshviewError(f"the DSN {parsed.redacted()} names no database: write mysql://user@host:port/DATABASE")
    args = parsed.connect_args()
    try:
        # MULTI_STATEMENTS: a step's commit goes out in one packet (``sink.commit_step``); every
        # statement freshview sends has its values inlined by the driver's escaping, never a user's text.
        conn = pymysql.connect(**args, autocommit=True, client_flag=CLIENT.MULTI_STATEMENTS)
        with conn.cursor() as cur:
            for statement in SESSION_SETUP:
                cur.execute(statement)
    except pymysql.err.MySQLError as exc:
        raise FreshviewError(f"cannot connect to {parsed.redacted()}: {exc}") from None
    database = parsed.database
    return Connector(MySqlSource(args, conn), MySqlResults(conn, database), MySqlControl(conn, database),
                     MySqlNames(), (pymysql.err.MySQLError,), dialect="mysql", default_schema=database,
                     grants=MySqlGrants(conn))
