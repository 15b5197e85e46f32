"""A throwaway MariaDB server for the test suite (the MySQL side's oracle and source).

Like the PostgreSQL one: a fresh server in a temporary directory on a free
127.0.0.1 port, with the binlog settings freshview needs
(``freshview.service.embedded_mariadb``).  The machine's own MariaDB (port
3306) is never used.  Set ``FRESHVIEW_TEST_MARIADB`` to ``host:port`` to use an
existing server instead (opt-in; root without a password, binlog in ROW
format with full images and metadata).
"""

from __future__ import annotations

import contextlib
import itertools
import os
from typing import Iterator

from freshview.service.embedded_mariadb import MariaDBServer

_counter = itertools.count()


@contextlib.contextmanager
def mariadb_server() -> Iterator[dict]:
    """Yield ``pymysql.connect`` keyword arguments (root, no database) of a fresh server."""
    external = os.environ.get("FRESHVIEW_TEST_MARIADB")
    if external:
        host, _, port = external.partition(":")
        yield {"host": host or "127.0.0.1", "port": int(port or 3306), "user": "root", "password": ""}
        return
    with MariaDBServer() as server:
        yield server.connect_args()


@contextlib.contextmanager
def fresh_mysql_database(server: dict) -> Iterator[dict]:
    """A new empty database on ``server`` (dropped afterwards); yields connect args with it selected."""
    import pymysql

    name = f"fvtest_{os.getpid()}_{next(_counter)}"
    conn = pymysql.connect(autocommit=True, **server)
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{name}`")
        yield {**server, "database": name}
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
        conn.close()
