"""Connections to the test MariaDB for the MySQL connector's tests."""

from __future__ import annotations

import pymysql
import pytest


@pytest.fixture
def my(mysql_database):
    """A root connection to a fresh database (autocommit off, as the service's)."""
    conn = pymysql.connect(**mysql_database)
    try:
        yield conn
    finally:
        conn.close()


@pytest.fixture
def fv(my):
    """``my`` with a fresh ``freshview`` database installed (the server's one: dropped first)."""
    from freshview.connectors.mysql import control

    with my.cursor() as cur:
        cur.execute("DROP DATABASE IF EXISTS freshview")
    control.install(my)
    return my
